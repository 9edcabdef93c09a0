-- sgw user create --company ID --email E   (password: the first line of stdin)
--   -> {"userId"}
--
-- The password never goes on the command line (other users of the machine
-- see command lines): it is read from standard input (typed without echo on
-- a terminal, or the first line of piped input).
local cli = require "cli"
local companies = require "companies"
local users = require "users"

return cli.command {
  name = "user", summary = "Users of the web workspace.",
  subcommands = {
    { name = "create", summary = "create a workspace user; prints {\"userId\"}",
      about = "Creates a workspace user of a company. The password is the first line of standard\n"
        .. "input (typed without echo on a terminal), never an argument:\n"
        .. "  printf '%s\\n' \"$PASSWORD\" | sgw user create --company ID --email EMAIL",
      flags = {
        { "company", "ID", "the company the user belongs to", required = true },
        { "email", "EMAIL", "the address the user logs in with", required = true },
      },
      run = function(flags, console)
        local password = console and console.read_secret("Password for " .. flags.email .. ": ")
        if not password or password == "" then
          return cli.fail("no password: write it as the first line of standard input; see sgw user create --help", 2)
        end
        local email, why = users.check_email(flags.email)
        if not email then return cli.fail("--email: " .. why, 2) end
        local good, pwhy = users.check_password(password)
        if not good then return cli.fail("password: " .. pwhy, 2) end
        local ok, err = cli.need_database()
        if not ok then return cli.fail(err) end
        if not companies.exists(flags.company) then return cli.fail("no company " .. flags.company) end
        local id, cwhy, field = users.create(flags.company, email, password)
        if not id then return cli.fail(field and (field .. ": " .. cwhy) or ("could not create the user: " .. cwhy), field and 2 or 1) end
        return cli.ok({ userId = id })
      end },
  },
}

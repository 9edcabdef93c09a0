-- sgw company create --name N  ->  {"companyId"}
local cli = require "cli"
local companies = require "companies"

return cli.command {
  name = "company", summary = "Companies: the tenants whose clients, accounts and users sgw keeps apart.",
  subcommands = {
    { name = "create", summary = "create a company; prints {\"companyId\"}",
      flags = { { "name", "NAME", "the company's name, 1 to 200 characters", required = true } },
      run = function(flags)
        if #flags.name > 200 then return cli.fail("--name is longer than 200 characters", 2) end
        local ok, err = cli.need_database()
        if not ok then return cli.fail(err) end
        local id, cerr = companies.create(flags.name)
        if not id then return cli.fail("could not create the company: " .. cerr) end
        return cli.ok({ companyId = id })
      end },
  },
}

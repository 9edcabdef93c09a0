-- sgw sandbox add-page --company ID --platform facebook|instagram --name N  ->  {"accountId"}
-- A sandbox test page, as POST /api/v1/sandbox/accounts and the workspace's
-- "Add test page" make them (lib/test_pages.lua): for scripted set-ups such
-- as the demo of scripts/dev run.
local cli = require "cli"
local companies = require "companies"
local test_pages = require "test_pages"

return cli.command {
  name = "sandbox", summary = "Sandbox test pages, which publish and take comments without Meta.",
  subcommands = {
    { name = "add-page", summary = "add a test page to a company; prints {\"accountId\"}",
      flags = {
        { "company", "ID", "the company it belongs to", required = true },
        { "platform", "facebook|instagram", "which platform it stands in for", required = true },
        { "name", "NAME", "its name, 1 to 200 characters", required = true },
      },
      run = function(flags)
        if not test_pages.PLATFORMS[flags.platform] then return cli.fail("--platform must be facebook or instagram", 2) end
        if #flags.name > 200 then return cli.fail("--name is longer than 200 characters", 2) end
        local ok, err = cli.need_database()
        if not ok then return cli.fail(err) end
        if not companies.exists(flags.company) then return cli.fail("no company " .. flags.company) end
        local id, aerr, limit = test_pages.create(flags.company, flags.platform, flags.name)
        if aerr == test_pages.LIMIT_REACHED then return cli.fail(test_pages.limit_message(limit)) end
        if not id then return cli.fail("could not add the test page: " .. tostring(aerr)) end
        return cli.ok({ accountId = id })
      end },
  },
}

-- sgw sandbox add-page --company ID --platform facebook|instagram --name N  ->  {"accountId"}
-- A sandbox test page, as POST /api/v1/sandbox/accounts and the workspace's
-- "Add test page" make them (lib/test_pages.lua): for scripted set-ups such
-- as the demo of scripts/dev run.
local cli = require "cli"
local companies = require "companies"
local test_pages = require "test_pages"

local usage = "usage: sgw sandbox add-page --company ID --platform facebook|instagram --name NAME"

return function(args)
  local pos, flags = cli.parse(args, { company = true, platform = true, name = true })
  if not pos then return cli.fail(flags .. "\n" .. usage, 2) end
  if pos[1] ~= "add-page" or #pos ~= 1 then return cli.fail(usage, 2) end
  if not test_pages.PLATFORMS[flags.platform or ""] then return cli.fail("--platform must be facebook or instagram", 2) end
  if not flags.company then return cli.fail("--company is required\n" .. usage, 2) end
  if not flags.name or #flags.name == 0 or #flags.name > 200 then
    return cli.fail("--name is required (1 to 200 characters)", 2)
  end
  local ok, err = cli.need_database()
  if not ok then return cli.fail(err) end
  if not companies.exists(flags.company) then return cli.fail("no company " .. flags.company) end
  local id, aerr = test_pages.create(flags.company, flags.platform, flags.name)
  if not id then return cli.fail("could not add the test page: " .. tostring(aerr)) end
  return cli.ok({ accountId = id })
end

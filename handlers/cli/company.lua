-- sgw company create --name N  ->  {"companyId"}
local cli = require "cli"
local companies = require "companies"

local usage = "usage: sgw company create --name NAME"

return function(args)
  local pos, flags = cli.parse(args, { name = true })
  if not pos then return cli.fail(flags .. "\n" .. usage, 2) end
  if pos[1] ~= "create" or #pos ~= 1 then return cli.fail(usage, 2) end
  if not flags.name or #flags.name == 0 or #flags.name > 200 then
    return cli.fail("--name is required (1 to 200 characters)", 2)
  end
  local ok, err = cli.need_database()
  if not ok then return cli.fail(err) end
  local id, cerr = companies.create(flags.name)
  if not id then return cli.fail("could not create the company: " .. cerr) end
  return cli.ok({ companyId = id })
end

-- sgw company create --name N  ->  {"companyId"}
local cli = require "cli"
local credentials = require "credentials"

local usage = "usage: sgw company create --name NAME"

return function(args)
  local pos, flags = cli.parse(args, { name = true })
  if not pos then return cli.fail(flags .. "\n" .. usage, 2) end
  if pos[1] ~= "create" or #pos ~= 1 then return cli.fail(usage, 2) end
  local name = flags.name
  if not name or #name == 0 or #name > 200 then return cli.fail("--name is required (1 to 200 characters)", 2) end
  local ok, err = cli.need_database()
  if not ok then return cli.fail(err) end
  local id = credentials.new_id("cmp_")
  local _, ierr = db.exec("INSERT INTO companies (id, name) VALUES ($1, $2)", id, name)
  if ierr then return cli.fail("could not create the company: " .. ierr) end
  return cli.ok({ companyId = id })
end

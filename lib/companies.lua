-- Companies: the tenants. Everything else belongs to one.
local credentials = require "credentials"

local M = {}

-- Returns the new company's id, or nil and why.
function M.create(name)
  if type(name) ~= "string" or #name == 0 or #name > 200 then
    return nil, "the company name must be 1 to 200 characters"
  end
  local id = credentials.new_id("cmp_")
  local _, err = db.exec("INSERT INTO companies (id, name) VALUES ($1, $2)", id, name)
  if err then return nil, err end
  return id
end

function M.exists(id)
  local rows = assert(db.query("SELECT id FROM companies WHERE id = $1", id))
  return rows[1] ~= nil
end

return M

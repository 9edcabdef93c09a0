-- Opaque keyset cursors: the position after the last item of a page,
-- (timestamp with microseconds, id), encoded so clients do not build them.
local json = require "json"

local M = {}

function M.encode(position)
  return crypto.base64url_encode(json.encode(position))
end

-- Returns the position table, or nil when the cursor was not made by us.
function M.decode(text, fields)
  if type(text) ~= "string" or #text > 512 then return nil end
  local raw = crypto.base64url_decode(text)
  local value = raw and json.decode(raw)
  if type(value) ~= "table" then return nil end
  for name, kind in pairs(fields) do
    if type(value[name]) ~= kind then return nil end
  end
  return value
end

-- limit from the query: default, 1..max, else nil and a message.
function M.limit(text, default, max)
  if text == nil then return default end
  local n = math.tointeger(tonumber(text))
  if not n or n < 1 or n > max or not tostring(text):match("^%d+$") then
    return nil, "limit must be a whole number from 1 to " .. max .. "."
  end
  return n
end

return M

-- Opaque keyset cursors: the position after the last item of a page,
-- (timestamp with microseconds, id), encoded so clients do not build them.
local json = require "json"

local M = {}

function M.encode(position)
  return crypto.base64url_encode(json.encode(position))
end

local DAYS = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }

-- A position's time as sqltime.exact writes it, and a real one: its fields
-- go into SQL as a timestamp, where month 13 or year 0 would be a 500.
local function valid_time(t)
  local y, mo, d, h, mi, s = t:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)%.%d%d%d%d%d%dZ$")
  if not y then return false end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  if y < 1 or mo < 1 or mo > 12 or d < 1 or tonumber(h) > 23 or tonumber(mi) > 59 or tonumber(s) > 59 then
    return false
  end
  local leap = y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)
  return d <= DAYS[mo] + ((mo == 2 and leap) and 1 or 0)
end

-- Ids are ASCII words (post_..., cmt_...): anything else never came from us.
local function valid_id(id)
  return #id <= 128 and id:match("^[%w_%-]+$") ~= nil
end

local CHECKS = { time = valid_time, id = valid_id }

-- Returns the position table, or nil when the cursor was not made by us.
-- fields: name -> "time" (sqltime.exact's text), "id" or a Lua type name.
function M.decode(text, fields)
  if type(text) ~= "string" or #text > 512 then return nil end
  local raw = crypto.base64url_decode(text)
  local value = raw and json.decode(raw)
  if type(value) ~= "table" then return nil end
  for name, kind in pairs(fields) do
    local v, check = value[name], CHECKS[kind]
    if check then
      if type(v) ~= "string" or not check(v) then return nil end
    elseif type(v) ~= kind then
      return nil
    end
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

-- application/x-www-form-urlencoded bodies, strictly: a repeated field is
-- reported, not silently merged (RFC 6749 3.2 forbids repeats).
local M = {}

local function unescape(s)
  s = s:gsub("+", " ")
  local bad = false
  s = s:gsub("%%(%x?%x?)", function(h)
    if #h ~= 2 then bad = true return "" end
    return string.char(tonumber(h, 16))
  end)
  if bad then return nil end
  return s
end

M.unescape = unescape

-- Returns fields (name -> value) or nil and a message.
function M.parse(body, max_fields)
  local fields, count = {}, 0
  if body == nil or body == "" then return fields end
  for pair in body:gmatch("[^&]+") do
    count = count + 1
    if count > (max_fields or 50) then return nil, "too many fields" end
    local k, v = pair:match("^([^=]*)=?(.*)$")
    k, v = unescape(k), unescape(v)
    if not k or not v then return nil, "malformed percent-encoding" end
    if fields[k] ~= nil then return nil, "the field '" .. k .. "' is repeated" end
    fields[k] = v
  end
  return fields
end

return M

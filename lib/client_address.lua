-- Who a client address stands for, for limits counted per address. An IPv6
-- client usually has a whole /64 to itself (a home, a server, a phone) and
-- can take a new address from it for every request: its addresses count as
-- one, "2001:db8:1:2::/64". IPv4 addresses (also IPv4-mapped IPv6 ones) are
-- their own. Anything else is returned as given.
local M = {}

local function groups(s)
  local out = {}
  for g in s:gmatch("[^:]+") do out[#out + 1] = g end
  return out
end

function M.group(address)
  if type(address) ~= "string" or not address:find(":", 1, true) then return address end
  local a = address:gsub("%%.*$", ""):lower()          -- a zone (fe80::1%eth0) is no part of it
  local v4 = a:match("^::ffff:(%d+%.%d+%.%d+%.%d+)$")
  if v4 then return v4 end
  local left, right = a:match("^(.-)::(.*)$")
  local parts
  if left then
    local l, r = groups(left), groups(right)
    parts = l
    for _ = 1, 8 - #l - #r do parts[#parts + 1] = "0" end
    for _, g in ipairs(r) do parts[#parts + 1] = g end
  else
    parts = groups(a)
  end
  local head = {}
  for i = 1, 4 do
    local n = tonumber(parts[i] or "0", 16)
    if not n or n > 0xffff then return address end        -- not an IPv6 address after all
    head[i] = ("%x"):format(n)
  end
  return table.concat(head, ":") .. "::/64"
end

return M

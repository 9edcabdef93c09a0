-- Who a client address stands for, for limits counted per address. An IPv6
-- client usually has a whole /64 to itself (a home, a server, a phone) and
-- can take a new address from it for every request: its addresses count as
-- one, "2001:db8:1:2::/64". An IPv4 address is its own, however it is
-- written: dotted, or inside an IPv6 one (mapped ::ffff:a.b.c.d in any
-- spelling, compatible ::a.b.c.d, translated 64:ff9b::a.b.c.d), so that
-- IPv4 clients behind a proxy that writes them so never share one count.
-- Anything else is returned as given.
local M = {}

-- The eight 16-bit groups of an IPv6 address (a dotted IPv4 tail is two),
-- or nil.
local function groups(a)
  local head, v4 = a:match("^(.*:)(%d+%.%d+%.%d+%.%d+)$")
  local tail = {}
  if v4 then
    local b = {}
    for n in v4:gmatch("%d+") do
      n = tonumber(n)
      if n > 255 then return nil end
      b[#b + 1] = n
    end
    tail = { b[1] * 256 + b[2], b[3] * 256 + b[4] }
    a = head:sub(-2) == "::" and head or head:sub(1, -2)
  end
  local function split(s)
    local out = {}
    if s == "" then return out end
    for g in (s .. ":"):gmatch("([^:]*):") do
      local n = g:match("^%x%x?%x?%x?$") and tonumber(g, 16)
      if not n then return nil end
      out[#out + 1] = n
    end
    return out
  end
  local left, right = a:match("^(.-)::(.*)$")
  local out
  if left then
    local l, r = split(left), split(right)
    if not l or not r or #l + #r + #tail > 7 then return nil end
    out = l
    for _ = 1, 8 - #l - #r - #tail do out[#out + 1] = 0 end
    for _, g in ipairs(r) do out[#out + 1] = g end
  else
    out = split(a)
    if not out then return nil end
  end
  for _, g in ipairs(tail) do out[#out + 1] = g end
  if #out ~= 8 then return nil end
  return out
end

local function ipv4(g7, g8)
  return ("%d.%d.%d.%d"):format(g7 >> 8, g7 & 255, g8 >> 8, g8 & 255)
end

function M.group(address)
  if type(address) ~= "string" or not address:find(":", 1, true) then return address end
  local g = groups((address:gsub("%%.*$", "")):lower())  -- a zone (fe80::1%eth0) is no part of it
  if not g then return address end
  local zeros5 = g[1] == 0 and g[2] == 0 and g[3] == 0 and g[4] == 0 and g[5] == 0
  if zeros5 and g[6] == 0xffff then return ipv4(g[7], g[8]) end                   -- mapped
  if zeros5 and g[6] == 0 and g[7] ~= 0 then return ipv4(g[7], g[8]) end         -- compatible
  if g[1] == 0x64 and g[2] == 0xff9b and g[3] == 0 and g[4] == 0 and g[5] == 0 and g[6] == 0 then
    return ipv4(g[7], g[8])                                                       -- translated (NAT64)
  end
  return ("%x:%x:%x:%x::/64"):format(g[1], g[2], g[3], g[4])
end

return M

-- Which webhook URLs clients may register: absolute http(s) URLs, and not
-- loopback, private or otherwise non-global addresses unless
-- webhooks.allow_private_targets is set (the host checks the address it
-- connects to again at every delivery: a name may point elsewhere later).
--
-- A host that is a number is read the way resolvers read it (inet_aton, and
-- the WHATWG URL standard): one to four parts, each decimal, octal (leading
-- 0) or hexadecimal (0x), the last part filling the remaining bytes. So
-- 127.1, 2130706433, 0x7f000001 and 0177.0.0.1 are all 127.0.0.1, and are
-- refused like it; the URL is stored as given.
local M = {}

-- Non-global IPv4 ranges (IANA special-purpose registry), by the address's
-- first three octets.
local function private_v4(a, b, c)
  return a == 0 or a == 10 or a == 127 or a >= 224                     -- this network, private, loopback, multicast, 240/4, broadcast
    or (a == 100 and b >= 64 and b <= 127)                            -- CGNAT
    or (a == 169 and b == 254) or (a == 172 and b >= 16 and b <= 31) or (a == 192 and b == 168)
    or (a == 192 and b == 0 and (c == 0 or c == 2))                   -- IETF protocol assignments, TEST-NET-1
    or (a == 198 and (b == 18 or b == 19))                            -- benchmarking
    or (a == 198 and b == 51 and c == 100) or (a == 203 and b == 0 and c == 113) -- TEST-NET-2, -3
end

local function number(part)
  if part == "" then return nil end
  local hex = part:match("^0[xX](%x*)$")
  if hex then return hex == "" and 0 or tonumber(hex, 16) end
  if part:match("^0%d") then return part:match("^0[0-7]+$") and tonumber(part, 8) end
  if part:match("^%d+$") and #part <= 15 then return tonumber(part, 10) end
  return nil
end

-- The four bytes of a numeric host, false when it is a number that no
-- resolver would take as an address (e.g. 256.1.1.1), nil when it is a name.
function M.ipv4(host)
  host = host:gsub("%.$", "")
  local parts = {}
  for part in (host .. "."):gmatch("([^.]*)%.") do parts[#parts + 1] = part end
  -- As in the URL standard: a name whose last label is a number is an address.
  local last = parts[#parts]
  if not (last and (last:match("^%d+$") or last:match("^0[xX]%x*$"))) then return nil end
  if #parts > 4 then return false end
  local values = {}
  for i, part in ipairs(parts) do
    values[i] = number(part)
    if not values[i] then return false end
    if i < #parts and values[i] > 255 then return false end
  end
  local rest = values[#parts]
  if rest >= 256 ^ (5 - #parts) then return false end
  local bytes = {}
  for i = 1, #parts - 1 do bytes[i] = values[i] end
  for i = 4, #parts, -1 do
    bytes[i] = math.floor(rest % 256)
    rest = rest // 256
  end
  return bytes
end

function M.check(url)
  if type(url) ~= "string" or #url > 2048 then return nil, "must be a URL of at most 2048 characters" end
  local scheme, host = url:match("^(https?)://([^/?#]+)")
  if not scheme then return nil, "must be an absolute http:// or https:// URL" end
  host = host:gsub("^.*@", ""):gsub(":%d*$", ""):lower()
  if host == "" then return nil, "has no host" end
  if host:find("[%%%s\\]") then return nil, "has a host with characters a host name cannot hold" end
  if config.get("webhooks.allow_private_targets") then return true end
  local ip = M.ipv4(host)
  if ip == false then return nil, "has a numeric host that is no IPv4 address" end
  if ip and private_v4(ip[1], ip[2], ip[3]) then
    return nil, "points at a private, loopback or reserved address (" .. table.concat(ip, ".") .. ")"
  end
  if host == "localhost" or host == "localhost." or host:match("%.localhost%.?$") or host:match("^%[") then
    return nil, "points at a loopback or literal IPv6 address"
  end
  return true
end

return M

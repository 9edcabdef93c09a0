-- Which webhook URLs clients may register: absolute http(s) URLs, and not
-- loopback, private or link-local addresses unless
-- webhooks.allow_private_targets is set (the host resolves names again when
-- delivering).
local M = {}

local function private_v4(a, b)
  return a == 10 or a == 127 or a == 0 or (a == 169 and b == 254) or (a == 172 and b >= 16 and b <= 31)
    or (a == 192 and b == 168) or (a == 100 and b >= 64 and b <= 127)
end

function M.check(url)
  if type(url) ~= "string" or #url > 2048 then return nil, "must be a URL of at most 2048 characters" end
  local scheme, host = url:match("^(https?)://([^/?#]+)")
  if not scheme then return nil, "must be an absolute http:// or https:// URL" end
  host = host:gsub("^.*@", ""):gsub(":%d+$", ""):lower()
  if host == "" then return nil, "has no host" end
  if config.get("webhooks.allow_private_targets") then return true end
  local a, b = host:match("^(%d+)%.(%d+)%.%d+%.%d+$")
  if a and private_v4(tonumber(a), tonumber(b)) then return nil, "points at a private or loopback address" end
  if host == "localhost" or host:match("%.localhost$") or host:match("^%[") then
    return nil, "points at a loopback or literal IPv6 address"
  end
  return true
end

return M

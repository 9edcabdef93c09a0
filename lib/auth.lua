-- Who is asking: the credential of a request (an API key in X-Api-Key or
-- Authorization: Bearer, or an OAuth access token as Bearer), resolved to an
-- API client of one company and one environment. The company never comes
-- from anywhere else.
local credentials = require "credentials"
local trim = require "trim"

local M = {}

local byte = string.byte
-- What %s matches: space, \t, \n, \v, \f, \r.
local SPACE = { [32] = true, [9] = true, [10] = true, [11] = true, [12] = true, [13] = true }

-- The one message for every bad credential, so a refusal never tells
-- whether a key exists.
M.REFUSAL = "The credential is missing, malformed, unknown, expired or revoked."

-- Returns the presented credential, nil when none was presented, or
-- false and a reason when the headers themselves are unusable.
function M.presented(req)
  local api_key = req.headers["x-api-key"]
  local authorization = req.headers["authorization"]
  local bearer
  if authorization then
    local scheme, value = authorization:match("^%s*(%S+)%s+(%S+)%s*$")
    if not scheme or scheme:lower() ~= "bearer" then
      return false, "Authorization must be 'Bearer <credential>'."
    end
    bearer = value
  end
  if api_key and bearer and api_key ~= bearer then
    return false, "X-Api-Key and Authorization carry different credentials; send one."
  end
  local credential = api_key or bearer
  if not credential then return nil end
  -- Trimmed only when it needs it (a copy of the key otherwise, on every
  -- request), in steps linear in its length (lib/trim.lua: the patterns
  -- for this take seconds on 16 KB of spaces, before any limit applies).
  if SPACE[byte(credential, 1)] or SPACE[byte(credential, -1)] then
    credential = trim(credential)
  end
  if credential == "" then return false, M.REFUSAL end
  return credential
end

-- Returns identity, or nil; the second value is a refusal detail when a
-- credential was presented but is not valid (so the caller answers 401 even
-- on routes that would not need one). The third, when the identity came
-- from the cache, is the cache generation it came from: it must be
-- confirmed once the credential epoch is known (credentials.observe_epoch).
function M.identify(req, use_cache)
  local credential, why = M.presented(req)
  if credential == nil then return nil end
  if credential == false then return nil, why end
  local ident, reason, cached = credentials.lookup(credential, use_cache)
  if not ident then
    log.info("auth_refused", { requestId = req.id, reason = reason })
    return nil, M.REFUSAL
  end
  return ident, nil, cached
end

return M

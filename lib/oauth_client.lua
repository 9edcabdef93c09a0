-- The client credentials of a POST /oauth/token request: HTTP Basic
-- (form-encoded before base64, RFC 6749 2.3.1) or the client_id and
-- client_secret form fields. Read once per request: the dispatcher limits
-- token requests per client_id, the handler authenticates them.
local form = require "form"

local M = {}

local MAX_ID_LENGTH = 64

-- Basic credentials: id and secret; nil when the header is not Basic, false
-- when it is Basic but malformed.
local function basic_credentials(header)
  local b64 = header:match("^%s*[Bb][Aa][Ss][Ii][Cc]%s+(%S+)%s*$")
  if not b64 then return nil end
  local decoded = crypto.base64_decode(b64)
  if not decoded then return false end
  local id, secret = decoded:match("^([^:]*):(.*)$")
  if not id then return false end
  id, secret = form.unescape(id), form.unescape(secret)
  if not id or not secret then return false end
  return id, secret
end

-- Whether id has the shape of one of our client ids (cli_ + base62).
function M.well_formed_id(id)
  return type(id) == "string" and #id <= MAX_ID_LENGTH and id:match("^cli_%w+$") ~= nil
end

-- What the request presents, as a table: { fields, id, secret, basic } or
-- { error = status, code, description } when it is unusable. Cached in req.
function M.presented(req)
  if req.oauth_client then return req.oauth_client end
  local p
  local media = (req.headers["content-type"] or ""):match("^%s*([^;%s]+)")
  local fields, err
  if media and media:lower() == "application/x-www-form-urlencoded" then
    fields, err = form.parse(req.body)
  end
  if not fields then
    p = { error = 400, code = "invalid_request",
      description = err and err .. "." or "Send the request as application/x-www-form-urlencoded." }
  else
    local authorization = req.headers["authorization"]
    p = { fields = fields }
    if authorization then
      local id, secret = basic_credentials(authorization)
      if id == nil then
        p = { error = 401, code = "invalid_client",
          description = "Authenticate the client with HTTP Basic or client_id and client_secret." }
      elseif id == false then
        p = { error = 401, code = "invalid_client", description = "Malformed Basic credentials." }
      else
        p.id, p.secret, p.basic = id, secret, true
      end
    else
      p.id, p.secret = fields.client_id, fields.client_secret
    end
  end
  req.oauth_client = p
  return p
end

-- The client_id a token request's rate limit is counted on, or nil when it
-- names none of the right shape (then its address is).
function M.rate_id(req)
  local p = M.presented(req)
  if M.well_formed_id(p.id) then return p.id end
  return nil
end

return M

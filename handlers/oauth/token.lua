-- POST /oauth/token: OAuth 2.0 client credentials (RFC 6749 section 4.4).
-- The client authenticates with HTTP Basic or with client_id/client_secret
-- form fields (one method, not both) and receives a Bearer access token for
-- some or all of its scopes. Errors follow RFC 6749 5.2.
local json = require "json"
local form = require "form"
local scopes = require "scopes"
local credentials = require "credentials"

local NO_STORE = { ["Cache-Control"] = "no-store", Pragma = "no-cache", ["Content-Type"] = "application/json" }

local function oauth_error(status, code, description)
  local headers = { ["Cache-Control"] = "no-store", Pragma = "no-cache", ["Content-Type"] = "application/json" }
  if status == 401 then headers["WWW-Authenticate"] = 'Basic realm="sgw"' end
  return status, json.encode({ error = code, error_description = description }), headers
end

-- Basic credentials are form-encoded before base64 (RFC 6749 2.3.1).
local function basic_credentials(header)
  local b64 = header:match("^%s*[Bb][Aa][Ss][Ii][Cc]%s+(%S+)%s*$")
  if not b64 then return nil end
  local decoded = crypto.base64_decode(b64)
  if not decoded then return false end
  local id, secret = decoded:match("^([^:]*):(.*)$")
  if not id then return false end
  return form.unescape(id), form.unescape(secret)
end

local CLIENT_SQL = [[
  SELECT id, company_id, environment, secret_hash, array_to_string(scopes, ' ') AS scopes
    FROM api_clients WHERE id = $1 AND revoked_at IS NULL]]

local function authenticate(client_id, secret)
  if type(client_id) ~= "string" or type(secret) ~= "string" or #client_id > 64 or #secret > 256
      or not client_id:match("^cli_%w+$") then
    return nil
  end
  local rows = assert(db.query(CLIENT_SQL, client_id))
  local c = rows[1]
  -- Hash even when the client is unknown, so timing does not tell.
  local presented = credentials.hash(secret)
  if not c or not crypto.constant_eq(c.secret_hash, presented) then return nil end
  local env = secret:match("^sgs_(%l+)_")
  if env ~= c.environment then return nil end
  return c
end

return function(req)
  local media = (req.headers["content-type"] or ""):match("^%s*([^;%s]+)")
  if not media or media:lower() ~= "application/x-www-form-urlencoded" then
    return oauth_error(400, "invalid_request", "Send the request as application/x-www-form-urlencoded.")
  end
  local fields, err = form.parse(req.body)
  if not fields then return oauth_error(400, "invalid_request", err .. ".") end

  local id, secret
  local authorization = req.headers["authorization"]
  if authorization then
    id, secret = basic_credentials(authorization)
    if id == nil then
      return oauth_error(401, "invalid_client", "Authenticate the client with HTTP Basic or client_id and client_secret.")
    end
    if id == false then return oauth_error(401, "invalid_client", "Malformed Basic credentials.") end
    if fields.client_id or fields.client_secret then
      return oauth_error(400, "invalid_request", "Use one client authentication method, not both.")
    end
  else
    id, secret = fields.client_id, fields.client_secret
    if not id or not secret then
      return oauth_error(401, "invalid_client", "Client authentication is missing.")
    end
  end

  if not fields.grant_type then return oauth_error(400, "invalid_request", "grant_type is required.") end
  if fields.grant_type ~= "client_credentials" then
    return oauth_error(400, "unsupported_grant_type", "Only client_credentials is supported.")
  end

  local client = authenticate(id, secret)
  if not client then
    return oauth_error(401, "invalid_client", "Client authentication failed.")
  end

  local held = scopes.set(scopes.from_text(client.scopes))
  local granted
  if fields.scope == nil or fields.scope:match("^%s*$") then
    granted = scopes.from_text(client.scopes)
  else
    granted = {}
    local seen = {}
    for s in fields.scope:gmatch("%S+") do
      if not held[s] then
        return oauth_error(400, "invalid_scope", "The client does not hold the scope '" .. s:sub(1, 64) .. "'.")
      end
      if not seen[s] then
        seen[s] = true
        granted[#granted + 1] = s
      end
    end
  end

  local token = credentials.new_access_token()
  local ttl = config.get("oauth.token_ttl_seconds")
  assert(db.exec([[INSERT INTO access_tokens (token_hash, client_id, company_id, environment, scopes, expires_at)
      VALUES ($1, $2, $3, $4, string_to_array($5, ' '), to_timestamp($6))]],
    credentials.hash(token), client.id, client.company_id, client.environment,
    table.concat(granted, " "), clock.now() + ttl))
  return 200, json.encode({
    access_token = token, token_type = "Bearer", expires_in = ttl, scope = table.concat(granted, " "),
  }), NO_STORE
end

-- POST /oauth/token: OAuth 2.0 client credentials (RFC 6749 section 4.4).
-- The client authenticates with HTTP Basic or with client_id/client_secret
-- form fields (one method, not both) and receives a Bearer access token for
-- some or all of its scopes. Errors follow RFC 6749 5.2.
local json = require "json"
local json_shapes = require "json_shapes"
local oauth_client = require "oauth_client"
local scopes = require "scopes"
local credentials = require "credentials"

local NO_STORE = { ["Cache-Control"] = "no-store", Pragma = "no-cache", ["Content-Type"] = "application/json" }

local function oauth_error(status, code, description)
  local headers = { ["Cache-Control"] = "no-store", Pragma = "no-cache", ["Content-Type"] = "application/json" }
  if status == 401 then headers["WWW-Authenticate"] = 'Basic realm="sgw"' end
  return status, json.encode({ error = code, error_description = description }, json_shapes.schema("OAuthError")), headers
end

local CLIENT_SQL = [[
  SELECT id, company_id, environment, secret_hash, array_to_string(scopes, ' ') AS scopes
    FROM api_clients WHERE id = $1 AND revoked_at IS NULL]]

local function authenticate(client_id, secret)
  if not oauth_client.well_formed_id(client_id) or type(secret) ~= "string" or #secret > 256 then
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
  local p = oauth_client.presented(req)
  if p.error then return oauth_error(p.error, p.code, p.description) end
  local fields, id, secret = p.fields, p.id, p.secret
  if p.basic and (fields.client_id or fields.client_secret) then
    return oauth_error(400, "invalid_request", "Use one client authentication method, not both.")
  end
  if not id or not secret then
    return oauth_error(401, "invalid_client", "Client authentication is missing.")
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
  }, json_shapes.schema("TokenResponse")), NO_STORE
end

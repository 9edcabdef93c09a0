-- The periodic token check (CONTRACT 11, README "Token health"): every
-- meta.token_check_interval_hours, Meta's GET /debug_token (with the app token
-- {app-id}|{app-secret}) about each live connected account's token. An
-- invalid token marks the account reconnect_required (lib/token_health.lua);
-- the expiry dates fill tokenExpiresAt and dataAccessExpiresAt; data access
-- ending within DATA_ACCESS_WARN_DAYS emits social.account.data_access_expiring,
-- once per date.
local graph = require "platforms.graph"
local accounts = require "accounts"
local token_health = require "token_health"

local M = {}

M.DATA_ACCESS_WARN_DAYS = 7

-- The app token, or nil while the operator has not set the Meta app.
function M.app_token()
  local id, secret = config.get("meta.app_id") or "", config.get("meta.app_secret") or ""
  if id == "" or secret == "" then return nil end
  return id .. "|" .. secret
end

-- debug_token's data about a token, or nil and the error.
function M.debug_token(token)
  local app = M.app_token()
  if not app then return nil, { code = "invalid_request", message = "meta.app_id and meta.app_secret are not set." } end
  local answer, err = graph.call("GET", "debug_token", { input_token = token }, app)
  if not answer then return nil, err end
  if type(answer.data) ~= "table" then
    return nil, { code = "platform_unavailable", message = "debug_token answered without data." }
  end
  return answer.data
end

-- Unix seconds from debug_token (0 = never) as a timestamp argument, or nil.
local function epoch(v)
  v = tonumber(v)
  if not v or v <= 0 then return nil end
  return v
end

-- The 190 an invalid token stands for, from debug_token's own error when it gives one.
local function invalid(data)
  local e = type(data.error) == "table" and data.error or {}
  local code, sub = tonumber(e.code) or 190, tonumber(e.subcode or e.error_subcode)
  code, sub = math.tointeger(code) or code, sub and (math.tointeger(sub) or sub)
  return { code = "token_expired", platform_code = sub and (code .. "/" .. sub) or tostring(code),
    message = e.message or "Meta reports the access token as no longer valid (debug_token is_valid: false)." }
end

local UPDATE_SQL = [[
  UPDATE social_accounts SET token_checked_at = now(),
         token_expires_at = to_timestamp($2), data_access_expires_at = to_timestamp($3),
         data_access_warned_at = CASE WHEN data_access_expires_at IS NOT DISTINCT FROM to_timestamp($3)
                                      THEN data_access_warned_at END
   WHERE id = $1]]

-- Emits data_access_expiring when the date is near and was not warned about.
local WARN_SQL = [[
  UPDATE social_accounts SET data_access_warned_at = now()
   WHERE id = $1 AND status IN ('active', 'reconnect_required') AND data_access_warned_at IS NULL
     AND data_access_expires_at <= now() + make_interval(days => $2)
  RETURNING id]]

-- Checks one account row (id, platform_account_id, access_token_enc).
function M.check(row)
  local token, terr = accounts.decrypt_token(row)
  if not token then
    log.warn("token_check_no_token", { accountId = row.id, error = terr })
    return
  end
  local data, err = M.debug_token(token)
  if not data then
    log.warn("token_check_failed", { accountId = row.id, class = err.code, platformCode = err.platform_code,
      error = err.message })
    return
  end
  db.transaction(function()
    assert(db.exec(UPDATE_SQL, row.id, epoch(data.expires_at), epoch(data.data_access_expires_at)))
    if data.is_valid == false then token_health.mark(row.id, invalid(data)) end
    if assert(db.query(WARN_SQL, row.id, M.DATA_ACCESS_WARN_DAYS))[1] then
      local account = assert(db.query("SELECT " .. accounts.COLUMNS .. ", company_id FROM social_accounts WHERE id = $1",
        row.id))[1]
      token_health.announce(account, "social.account.data_access_expiring")
    end
  end)
end

-- The job (handlers/jobs/check_tokens.lua): every live connected account
-- with a token, least recently checked first.
function M.run()
  if not M.app_token() then
    log.info("token_check_skipped", { reason = "meta.app_id and meta.app_secret are not set" })
    return
  end
  local rows = assert(db.query([[SELECT id, platform_account_id, access_token_enc FROM social_accounts
      WHERE environment = 'live' AND status IN ('active', 'reconnect_required') AND access_token_enc IS NOT NULL
      ORDER BY token_checked_at NULLS FIRST, id]]))
  for _, row in ipairs(rows) do
    -- One account's surprise is not the others'.
    local ok, e = pcall(M.check, row)
    if not ok then log.error("token_check_error", { accountId = row.id, error = tostring(e) }) end
  end
  log.info("token_check_run", { accounts = #rows })
end

return M

-- Social accounts as the API shows them, always within one company and one
-- environment.
local json = require "json"
local secrets = require "secrets"
local events = require "events"

local M = {}

-- UTC timestamps as the API writes them (CONTRACT section 1).
local function iso(column)
  return "to_char(" .. column .. [[ AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')]]
end

local COLUMNS = table.concat({
  "id, platform, name, username, platform_account_id, environment, status, status_reason",
  iso("connected_at") .. " AS connected_at", iso("status_since") .. " AS status_since",
  iso("token_expires_at") .. " AS token_expires_at", iso("data_access_expires_at") .. " AS data_access_expires_at",
  "webhooks_subscribed_at IS NOT NULL AS webhooks_subscribed",
}, ", ")
M.COLUMNS = COLUMNS

-- Statuses an account has while connected (listed by the API).
M.CONNECTED = { active = true, reconnect_required = true }

local function or_null(v)
  if v == nil then return json.null end
  return v
end

-- statusReason: null while active, else {code, message, platformCode, since}.
local function status_reason(row)
  local r = row.status_reason
  if row.status == "active" or type(r) ~= "table" then return json.null end
  return { code = r.code, message = r.message, platformCode = or_null(r.platformCode),
    since = or_null(row.status_since) }
end

-- Sandbox accounts get their comments through the webhook path of the
-- simulator, so they count as subscribed.
function M.present(row)
  return {
    id = row.id, platform = row.platform, name = row.name, username = or_null(row.username),
    platformAccountId = row.platform_account_id, environment = row.environment,
    status = row.status, statusReason = status_reason(row), connectedAt = row.connected_at,
    tokenExpiresAt = or_null(row.token_expires_at), dataAccessExpiresAt = or_null(row.data_access_expires_at),
    webhooksSubscribed = row.environment == "test" or row.webhooks_subscribed == true,
  }
end

-- One account of the caller's company and environment (any status), or nil.
function M.get(client, id)
  local rows = assert(db.query("SELECT " .. COLUMNS .. [[ FROM social_accounts
      WHERE id = $1 AND company_id = $2 AND environment = $3]], id, client.company_id, client.environment))
  return rows[1]
end

-- An active account of the caller's company and environment, or nil.
function M.find_active(client, id)
  if type(id) ~= "string" or #id > 64 then return nil end
  local row = M.get(client, id)
  if row and row.status == "active" then return row end
  return nil
end

-- Connected accounts (active and reconnect_required), never disconnected ones.
function M.list_connected(client)
  local rows = assert(db.read_query("SELECT " .. COLUMNS .. [[ FROM social_accounts
      WHERE company_id = $1 AND environment = $2 AND status IN ('active', 'reconnect_required')
      ORDER BY connected_at, id]], client.company_id, client.environment))
  local out = {}
  for i, row in ipairs(rows) do out[i] = M.present(row) end
  return out
end

-- The platform token of an account row (access_token_enc, platform_account_id),
-- or nil and why. The account id is the associated data, so a token copied
-- to another account's row does not decrypt.
function M.decrypt_token(row)
  if not row.access_token_enc then return nil, "the account has no platform token" end
  return secrets.open(row.access_token_enc, row.platform_account_id)
end

-- Connects an account; the platform token, when there is one, is encrypted.
-- Connecting one again (same company, environment, platform and platform
-- id) makes it active with the new token; what was known about the old token
-- is forgotten, and connectedAt is the new connection's (a deauthorization
-- Meta issued before it does not undo it). An account that was
-- reconnect_required emits social.account.reconnected.
-- opts.connected_by_fb_user: the Facebook user whose consent gave the token.
function M.add(opts)
  local token_enc
  if opts.access_token then
    local err
    token_enc, err = secrets.seal(opts.access_token, opts.platform_account_id)
    if not token_enc then return nil, err end
  end
  local id = "acc_" .. crypto.random_token(24)
  return db.transaction(function()
    local rows, err, state = db.query([[WITH prev AS (
        SELECT status FROM social_accounts
         WHERE company_id = $2 AND environment = $3 AND platform = $4 AND platform_account_id = $5)
      INSERT INTO social_accounts
      (id, company_id, environment, platform, platform_account_id, name, username, access_token_enc, connected_by_fb_user)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
      ON CONFLICT (company_id, environment, platform, platform_account_id) DO UPDATE
        SET name = EXCLUDED.name, username = EXCLUDED.username,
            access_token_enc = coalesce(EXCLUDED.access_token_enc, social_accounts.access_token_enc),
            status = 'active', disconnected_at = NULL, status_reason = NULL, status_since = NULL,
            connected_at = CASE WHEN EXCLUDED.access_token_enc IS NULL AND social_accounts.status = 'active'
                                THEN social_accounts.connected_at ELSE now() END,
            token_expires_at = CASE WHEN EXCLUDED.access_token_enc IS NULL THEN social_accounts.token_expires_at END,
            data_access_expires_at = CASE WHEN EXCLUDED.access_token_enc IS NULL
                                          THEN social_accounts.data_access_expires_at END,
            token_checked_at = CASE WHEN EXCLUDED.access_token_enc IS NULL THEN social_accounts.token_checked_at END,
            data_access_warned_at = CASE WHEN EXCLUDED.access_token_enc IS NULL
                                         THEN social_accounts.data_access_warned_at END,
            connected_by_fb_user = coalesce(EXCLUDED.connected_by_fb_user, social_accounts.connected_by_fb_user)
      RETURNING id, (SELECT status FROM prev) AS previous_status]], id, opts.company_id, opts.environment,
      opts.platform, opts.platform_account_id, opts.name, opts.username, token_enc, opts.connected_by_fb_user)
    if not rows then return nil, err, state end
    local row = rows[1]
    if row.previous_status == "reconnect_required" then
      local account = assert(db.query("SELECT " .. COLUMNS .. " FROM social_accounts WHERE id = $1", row.id))[1]
      events.emit_to_company(opts.company_id, opts.environment, "social.account.reconnected",
        { account = M.present(account) })
    end
    return row.id
  end)
end

return M

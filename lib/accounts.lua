-- Social accounts as the API shows them, always within one company and one
-- environment.
local json = require "json"
local secrets = require "secrets"

local M = {}

local COLUMNS = [[id, platform, name, username, platform_account_id, environment, status,
  to_char(connected_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS connected_at]]

function M.present(row)
  return {
    id = row.id, platform = row.platform, name = row.name, username = row.username or json.null,
    platformAccountId = row.platform_account_id, environment = row.environment,
    status = row.status, connectedAt = row.connected_at,
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

function M.list_active(client)
  local rows = assert(db.query("SELECT " .. COLUMNS .. [[ FROM social_accounts
      WHERE company_id = $1 AND environment = $2 AND status = 'active'
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
function M.add(opts)
  local token_enc
  if opts.access_token then
    local err
    token_enc, err = secrets.seal(opts.access_token, opts.platform_account_id)
    if not token_enc then return nil, err end
  end
  local id = "acc_" .. crypto.random_token(24)
  local rows, err, state = db.query([[INSERT INTO social_accounts
      (id, company_id, environment, platform, platform_account_id, name, username, access_token_enc)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
      ON CONFLICT (company_id, environment, platform, platform_account_id) DO UPDATE
        SET name = EXCLUDED.name, username = EXCLUDED.username,
            access_token_enc = coalesce(EXCLUDED.access_token_enc, social_accounts.access_token_enc),
            status = 'active', disconnected_at = NULL
      RETURNING id]], id, opts.company_id, opts.environment, opts.platform, opts.platform_account_id,
    opts.name, opts.username, token_enc)
  if not rows then return nil, err, state end
  return rows[1].id
end

return M

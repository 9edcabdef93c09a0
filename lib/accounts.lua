-- Social accounts as the API shows them, always within one company and one
-- environment.
local json = require "json"

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

local function encryption_key()
  local key = crypto.base64_decode(config.get("crypto.encryption_key") or "")
  if not key or #key ~= 32 then
    return nil, "crypto.encryption_key must be 32 random bytes in base64 (head -c 32 /dev/urandom | base64)"
  end
  return key
end

-- The platform token of an account row (access_token_enc, platform_account_id),
-- or nil and why. The account id is the associated data, so a token copied
-- to another account's row does not decrypt.
function M.decrypt_token(row)
  if not row.access_token_enc then return nil, "the account has no platform token" end
  local key, err = encryption_key()
  if not key then return nil, err end
  local blob = crypto.base64_decode(row.access_token_enc)
  local token = blob and crypto.aes_gcm_decrypt(key, blob, row.platform_account_id)
  if not token then return nil, "the stored platform token does not decrypt (was crypto.encryption_key changed?)" end
  return token
end

-- Connects an account; the platform token, when there is one, is encrypted.
function M.add(opts)
  local token_enc
  if opts.access_token then
    local key, kerr = encryption_key()
    if not key then return nil, kerr end
    token_enc = crypto.base64_encode(crypto.aes_gcm_encrypt(key, opts.access_token, opts.platform_account_id))
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

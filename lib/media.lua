-- Uploads as the rest of the gateway sees them: looked up within the
-- caller's company and environment, and published to the platforms through
-- signed, expiring URLs.
--
-- Platforms fetch images without a credential, so the URL is the credential:
--   <public_base_url>/media/<uploadId>?exp=<unix seconds>&sig=<base64url HMAC-SHA256>
-- signed over "<uploadId>.<exp>" with a key derived from crypto.encryption_key
-- (never the encryption key itself, so a leaked URL key could not decrypt
-- anything). GET /media/{file} (handlers/media/get.lua) serves them.
local secrets = require "secrets"

local M = {}

local KEY_LABEL = "sgw media url"
local ID_PATTERN = "^upl_%w+$"

-- The signing key, or nil and a message for the operator.
local function signing_key()
  local key, err = secrets.key()
  if not key then return nil, err .. "; it also signs media URLs" end
  return crypto.hmac_sha256(key, KEY_LABEL)
end

local function signature(key, upload_id, exp)
  return crypto.base64url_encode(crypto.hmac_sha256(key, upload_id .. "." .. exp))
end

-- A URL valid for ttl seconds (default media.url_ttl_seconds), and its expiry
-- (unix seconds); nil, message when crypto.encryption_key is not usable.
function M.url(upload_id, ttl)
  local key, err = signing_key()
  if not key then return nil, err end
  local exp = math.floor(clock.now()) + math.floor(ttl or config.get("media.url_ttl_seconds"))
  local base = (config.get("public_base_url") or ""):gsub("/+$", "")
  return ("%s/media/%s?exp=%d&sig=%s"):format(base, upload_id, exp, signature(key, upload_id, tostring(exp))), exp
end

-- true and the seconds left when sig is this upload's signature for exp and
-- exp has not passed; false otherwise (any argument may come from a stranger).
function M.verify(upload_id, exp, sig)
  if type(upload_id) ~= "string" or type(exp) ~= "string" or type(sig) ~= "string" then return false end
  if not exp:match("^%d+$") or #exp > 12 or #sig > 64 then return false end
  local key = signing_key()
  if not key then return false end
  if not crypto.constant_eq(signature(key, upload_id, exp), sig) then return false end
  local left = tonumber(exp) - math.floor(clock.now())
  if left <= 0 then return false end
  return true, left
end

local COLUMNS = [[id, mime_type, jpeg_variant, size_bytes, width, height, sha256,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at]]
M.COLUMNS = COLUMNS

-- An upload of the caller's company and environment, without its bytes:
-- {id, mime_type, jpeg_variant, size_bytes, width, height, sha256, created_at}, or nil
-- (unknown, or another company's or environment's: the caller says 404).
-- client is ctx.client. Raises when PostgreSQL fails.
function M.find_upload(client, upload_id)
  if type(upload_id) ~= "string" or not upload_id:match(ID_PATTERN) then return nil end
  local rows = assert(db.query("SELECT " .. COLUMNS .. [[ FROM uploads
      WHERE id = $1 AND company_id = $2 AND environment = $3]],
    upload_id, client.company_id, client.environment))
  return rows[1]
end

-- Inside the transaction that stores an upload of `size` bytes: raises 413
-- when the company's uploads of this environment would then exceed
-- uploads.company_quota_bytes (0: no quota). Each environment has a quota
-- of its own, so sandbox tests can never stop live uploads (nor learn what
-- live holds). Uploads of one company and environment are counted one at a
-- time (a transaction-scoped lock), so two at once cannot both fit in the
-- last free bytes.
function M.reserve_quota(company_id, environment, size)
  local quota = config.get("uploads.company_quota_bytes")
  if quota <= 0 then return end
  assert(db.query("SELECT pg_advisory_xact_lock(hashtextextended('sgw.uploads.quota:' || $1 || ':' || $2, 0))",
    company_id, environment))
  local used = tonumber(assert(db.query([[SELECT coalesce(sum(size_bytes), 0)::bigint AS used FROM uploads
      WHERE company_id = $1 AND environment = $2]], company_id, environment))[1].used)
  if used + size > quota then
    require("problem").raise(413, "payload_too_large", ("This image (%d bytes) would take your company's %s uploads "
      .. "past their quota: %d of %d bytes are in use. Uploads no post uses are deleted %d days after they were "
      .. "made; reuse an uploaded image by its uploadId, or ask the operator for a larger quota.")
      :format(size, environment == "live" and "live" or "sandbox", used, quota, config.get("retention.uploads_days")))
  end
end

-- The bytes and type of an upload by id alone, for the signed URL handler:
-- {mime_type, bytes} or nil. Raises when PostgreSQL fails.
function M.read(upload_id)
  if type(upload_id) ~= "string" or not upload_id:match(ID_PATTERN) then return nil end
  -- bytea leaves as base64 text (the binding speaks text); PostgreSQL breaks
  -- its base64 into lines, which the decoder does not accept.
  local rows = assert(db.query([[SELECT u.mime_type, translate(encode(b.data, 'base64'), E'\n', '') AS data
      FROM uploads u JOIN upload_bytes b ON b.upload_id = u.id WHERE u.id = $1]], upload_id))
  local row = rows[1]
  if not row then return nil end
  local bytes = crypto.base64_decode(row.data)
  if not bytes then error("upload " .. upload_id .. ": stored bytes do not decode", 0) end
  return { mime_type = row.mime_type, bytes = bytes }
end

return M

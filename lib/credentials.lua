-- Credentials of API clients: making them, storing only their hashes, and
-- finding who a presented key or access token belongs to.
--
-- Lookups are cached per worker for api.credential_cache_seconds. Rotation
-- and revocation bump a counter in Redis (EPOCH_NAME, one copy per rate-limit
-- tag: lib/ratelimit.lua); the rate limiter reads it in the same round trip
-- it makes anyway, and a worker that sees it move
-- drops its cache, so a revoked key stops working on every instance at once
-- without a database query per request. They also publish the change
-- (redis.invalidate), which every instance's host counts: a worker that sees
-- the count move drops its cache too. That is what guards requests served
-- from a rate-limit block, which do not go to Redis (lib/ratelimit.lua).
local scopes = require "scopes"
local secrets = require "secrets"
local ratelimit = require "ratelimit"

local M = {}

M.EPOCH_NAME = "credentials:epoch"
-- Where the number comes from. Instances older than the per-tag layout read
-- it here, so they too hear of changes during a rolling upgrade.
local EPOCH_SOURCE = config.get("redis.namespace") .. ":credentials:epoch"

-- Raises an epoch copy to ARGV[1]; never lowers it, so that two changes made
-- at once leave every copy at the later number.
local RAISE_EPOCH = [[
if (tonumber(redis.call('GET', KEYS[1])) or 0) < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
]]

local KEY_PATTERN = "^sgk_(%l+)_()%w+$"
local MAX_CREDENTIAL_LENGTH = 256

function M.hash(secret)
  return crypto.sha256_hex(secret)
end

function M.new_id(prefix)
  return prefix .. crypto.random_token(24)
end

function M.new_api_key(environment)
  return "sgk_" .. environment .. "_" .. crypto.random_token(40)
end

function M.new_client_secret(environment)
  return "sgs_" .. environment .. "_" .. crypto.random_token(40)
end

function M.new_access_token()
  return "sgat_" .. crypto.random_token(48)
end

function M.new_webhook_secret()
  return "whsec_" .. crypto.base64_encode(crypto.random_bytes(32))
end

-- What is shown of a key after creation.
function M.prefix_of(key)
  return key:sub(1, #"sgk_test_" + 4)
end

-- Does this look like one of our API keys? Checked before any lookup, so that
-- garbage costs nothing and an unknown environment is refused early.
function M.api_key_environment(key)
  if #key > MAX_CREDENTIAL_LENGTH then return nil end
  -- The position capture spares making a string of the secret part.
  local env, secret_from = key:match(KEY_PATTERN)
  if (env == "live" or env == "test") and #key - secret_from + 1 >= 32 then return env end
  return nil
end

function M.is_access_token(token)
  return #token <= MAX_CREDENTIAL_LENGTH and token:match("^sgat_%w+$") ~= nil
end

-- --------------------------------------------------------------- cache

local cache, cache_size, cache_epoch = {}, 0, nil
local CACHE_MAX = 10000

local function cache_clear()
  cache, cache_size = {}, 0
end

-- Called with the epoch the rate limiter read; nil means Redis did not
-- answer, so nothing cached can be trusted.
function M.observe_epoch(epoch)
  if epoch == nil or epoch ~= cache_epoch then
    cache_clear()
    cache_epoch = epoch
    return true
  end
  return false
end

-- The host's count of credential-change news (nil while it cannot hear
-- them; then the epoch read with every rate-limit call guards the cache).
local seen_changes

-- Entries are found by the credential's binary SHA-256: 32 bytes make a
-- short Lua string, which Lua interns, so a credential seen before costs no
-- new string and the lookup compares pointers. The raw credential is never
-- kept.
local function cache_get(digest, now)
  local changes = redis and redis.invalidations and redis.invalidations()
  if changes and changes ~= seen_changes then
    seen_changes = changes
    cache_clear()
    return nil
  end
  local e = cache[digest]
  if not e then return nil end
  if now > e.expires then
    cache[digest] = nil
    cache_size = cache_size - 1
    return nil
  end
  return e.ident
end

local function cache_put(digest, ident, now)
  if cache_size >= CACHE_MAX then cache_clear() end
  if not cache[digest] then cache_size = cache_size + 1 end
  cache[digest] = { ident = ident, expires = now + config.get("api.credential_cache_seconds") }
end

-- --------------------------------------------------------------- lookups

local function identity(row, kind)
  local list = scopes.from_text(row.scopes)
  return {
    client_id = row.client_id,
    company_id = row.company_id,
    environment = row.environment,
    scopes = scopes.set(list),
    scope_list = list,
    -- Made once for the cached identity, not per request.
    rate_key = "client:" .. row.client_id,
    rate_limit = row.rate_limit_per_minute or config.get("api.rate_limit.per_minute"),
    kind = kind,
    expires_at = row.expires_epoch,
    hash = row.hash,
  }
end

local KEY_SQL = [[
  SELECT k.key_hash AS hash, k.client_id, k.company_id, k.environment,
         array_to_string(c.scopes, ' ') AS scopes, c.rate_limit_per_minute,
         extract(epoch FROM k.expires_at)::float8 AS expires_epoch
    FROM api_keys k JOIN api_clients c ON c.id = k.client_id
   WHERE k.key_hash = $1 AND k.revoked_at IS NULL AND c.revoked_at IS NULL]]

local TOKEN_SQL = [[
  SELECT t.token_hash AS hash, t.client_id, t.company_id, t.environment,
         array_to_string(t.scopes, ' ') AS scopes, c.rate_limit_per_minute,
         extract(epoch FROM t.expires_at)::float8 AS expires_epoch
    FROM access_tokens t JOIN api_clients c ON c.id = t.client_id
   WHERE t.token_hash = $1 AND c.revoked_at IS NULL]]

local function expired(ident, now)
  return ident.expires_at ~= nil and ident.expires_at <= now
end

-- Finds the identity behind a presented credential. Returns the identity,
-- or nil and a reason for the log (never for the client: every refusal
-- reads the same, so nothing tells whether a key exists). The third value
-- is true when the answer came from the cache. Raises when the database
-- cannot answer.
function M.lookup(credential, use_cache)
  if #credential > MAX_CREDENTIAL_LENGTH then return nil, "malformed" end
  local digest = crypto.sha256(credential)
  local now = clock.now()
  -- A cached identity came from this very credential, checked in full when
  -- it was cached: the shape checks below are for the first time only.
  if use_cache then
    local ident = cache_get(digest, now)
    if ident then
      if expired(ident, now) then return nil, "expired" end
      return ident, nil, true
    end
  end
  local kind, sql
  if M.api_key_environment(credential) then
    kind, sql = "api_key", KEY_SQL
  elseif M.is_access_token(credential) then
    kind, sql = "access_token", TOKEN_SQL
  else
    return nil, "malformed"
  end
  local hash = crypto.hex_encode(digest)
  -- A credential that cannot be checked is not an invalid one: the error
  -- goes up (an outage answers 503), never a refusal.
  local rows = assert(db.query(sql, hash))
  local row = rows[1]
  -- The index found the row by hash; compare again in constant time so the
  -- decision never rests on a comparison that could leak timing.
  if not row or not crypto.constant_eq(row.hash, hash) then return nil, "unknown" end
  local ident = identity(row, kind)
  if kind == "api_key" and M.api_key_environment(credential) ~= ident.environment then
    return nil, "environment mismatch"
  end
  if use_cache then cache_put(digest, ident, now) end
  if expired(ident, now) then return nil, "expired" end
  return ident
end

-- last_used_at is for people (the workspace list), so once a minute per
-- credential and worker is enough.
local last_touch = {}

function M.touch(ident)
  local now = clock.now()
  if ident.kind ~= "api_key" or (last_touch[ident.hash] or 0) > now - 60 then return end
  last_touch[ident.hash] = now
  db.exec("UPDATE api_keys SET last_used_at = now() WHERE key_hash = $1", ident.hash)
  db.exec("UPDATE api_clients SET last_used_at = now() WHERE id = $1", ident.client_id)
end

-- Tells every instance to forget cached credentials (after a rotation or a
-- revocation). Returns true, or false when Redis could not be told (then
-- caches expire after api.credential_cache_seconds).
function M.bump_epoch()
  if not redis then return false end
  local n = redis.call("INCR", EPOCH_SOURCE)
  for _, key in ipairs(n and ratelimit.epoch_keys(M.EPOCH_NAME) or {}) do
    if not redis.eval_cached(RAISE_EPOCH, 1, key, n) then n = nil end
  end
  -- Instances that spend rate-limit blocks do not read the epoch on every
  -- request: they hear of the change through the host's subscription.
  if redis.invalidate then redis.invalidate() end
  return n ~= nil
end

-- ----------------------------------------------------------- management

M.encryption_key = secrets.key

-- A client's webhook signing secret is sealed with the client's id as
-- associated data, so a value copied to another client's row does not open.
function M.seal_webhook_secret(client_id, secret)
  return secrets.seal(secret, client_id)
end

-- The secret in clear, or nil and why. Secrets sealed before they were bound
-- to their row (no associated data) still open; `rebound` is then the value
-- sealed again with the binding, for the caller to store in place.
function M.open_webhook_secret(client_id, sealed)
  local plain, err = secrets.open(sealed, client_id)
  if plain then return plain end
  plain = secrets.open(sealed)
  if not plain then return nil, err end
  return plain, secrets.seal(plain, client_id)
end

-- Creates a client with its key and secrets. Returns the secrets (shown
-- once) or nil, err.
function M.create_client(opts)
  local client_id = M.new_id("cli_")
  local webhook_secret, webhook_secret_enc
  if opts.webhook_url then
    local err
    webhook_secret = M.new_webhook_secret()
    webhook_secret_enc, err = M.seal_webhook_secret(client_id, webhook_secret)
    if not webhook_secret_enc then return nil, err end
  end
  local api_key = M.new_api_key(opts.environment)
  local secret = M.new_client_secret(opts.environment)
  local ok, err = pcall(db.transaction, function()
    assert(db.exec([[INSERT INTO api_clients (id, company_id, environment, name, scopes,
        rate_limit_per_minute, webhook_url, webhook_secret_enc, secret_hash)
        VALUES ($1, $2, $3, $4, string_to_array($5, ' '), $6, $7, $8, $9)]],
      client_id, opts.company_id, opts.environment, opts.name, table.concat(opts.scopes, " "),
      opts.rate_limit, opts.webhook_url, webhook_secret_enc, M.hash(secret)))
    assert(db.exec([[INSERT INTO api_keys (client_id, company_id, environment, key_hash, key_prefix)
        VALUES ($1, $2, $3, $4, $5)]],
      client_id, opts.company_id, opts.environment, M.hash(api_key), M.prefix_of(api_key)))
  end)
  if not ok then return nil, tostring(err) end
  return { clientId = client_id, apiKey = api_key, clientSecret = secret, webhookSecret = webhook_secret }
end

-- Issues a new key; the previous ones keep working for the grace period.
function M.rotate_key(client_id)
  local rows = assert(db.query("SELECT company_id, environment FROM api_clients WHERE id = $1 AND revoked_at IS NULL", client_id))
  local c = rows[1]
  if not c then return nil, "no active client " .. client_id end
  local grace_ends = clock.now() + config.get("api.key_rotation_grace_hours") * 3600
  local api_key = M.new_api_key(c.environment)
  local ok, err = pcall(db.transaction, function()
    assert(db.exec([[UPDATE api_keys SET expires_at = to_timestamp($2)
        WHERE client_id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > to_timestamp($2))]],
      client_id, grace_ends))
    assert(db.exec([[INSERT INTO api_keys (client_id, company_id, environment, key_hash, key_prefix)
        VALUES ($1, $2, $3, $4, $5)]], client_id, c.company_id, c.environment, M.hash(api_key), M.prefix_of(api_key)))
  end)
  if not ok then return nil, tostring(err) end
  M.bump_epoch()
  return { apiKey = api_key, previousKeyExpiresAt = clock.iso(grace_ends), keyPrefix = M.prefix_of(api_key) }
end

-- Revokes a client, its keys and its tokens at once.
function M.revoke_client(client_id)
  local revoked
  local ok, err = pcall(db.transaction, function()
    local rows = assert(db.query("UPDATE api_clients SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING id", client_id))
    revoked = rows[1] ~= nil
    assert(db.exec("UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE client_id = $1", client_id))
    assert(db.exec("DELETE FROM access_tokens WHERE client_id = $1", client_id))
  end)
  if not ok then return nil, tostring(err) end
  if not revoked then return nil, "no client " .. client_id end
  M.bump_epoch()
  return { clientId = client_id, revokedAt = clock.iso() }
end

return M

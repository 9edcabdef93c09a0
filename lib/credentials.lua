-- Credentials of API clients: making them, storing only their hashes, and
-- finding who a presented key or access token belongs to.
--
-- Lookups are cached for api.credential_cache_seconds in the process's
-- shared store (host: `shared`), so every worker of the process, request or
-- job, finds what any of them looked up. Rotation and revocation bump a
-- counter in Redis (EPOCH_NAME, one copy per rate-limit tag:
-- lib/ratelimit.lua); the rate limiter reads it in the same round trip it
-- makes anyway, and a worker that sees it move drops the cache, so a revoked
-- key stops working on every instance at once without a database query per
-- request. They also publish the change (redis.invalidate), which every
-- instance's host counts: a worker that sees the count move drops the cache
-- too. That is what guards requests served from a rate-limit block, which do
-- not go to Redis (lib/ratelimit.lua). The change's transaction also
-- enqueues an announce_credential_change job, which bumps the counter again
-- until Redis takes it: a bump that found Redis unreachable would otherwise
-- leave instances that still reach it serving the changed credential from
-- their caches.
local jobs = require "jobs"
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

-- Entries live in the shared store under their cache generation:
-- <ENTRY_PREFIX><generation>:<the credential's binary SHA-256> (the raw
-- credential is never kept). Dropping the cache is moving the generation:
-- older entries are never read again and leave by their time to live or as
-- the store's least recently used. The store bounds their number
-- (shared.max_entries, with whatever else it holds).
local GENERATION_KEY = "credentials:generation"
local EPOCH_KEY = "credentials:epoch"       -- the epoch last seen by any worker
local CHANGES_KEY = "credentials:changes"   -- the host's count last seen
local ENTRY_PREFIX = "credentials:"

local function generation()
  return shared.get(GENERATION_KEY) or 0
end

-- The generation moves before the epoch or count that made it move is
-- written: a worker that finds the new number already there reads the new
-- generation after it, never an entry of the old one.
local function cache_clear()
  shared.incr(GENERATION_KEY, 1, 0)
end

-- Called with the epoch the rate limiter read (nil: Redis did not answer,
-- so nothing cached can be trusted) and, for an identity that came from the
-- cache, the generation it came from. True when the cache was dropped since
-- then, by this call or by another worker's: such an identity must be
-- looked up again.
-- The epoch and count this worker last saw: while they have not moved, it
-- need not ask the store whether another worker saw them move first.
local seen_epoch, seen_changes

function M.observe_epoch(epoch, cached_generation)
  if epoch == nil then
    cache_clear()
    shared.delete(EPOCH_KEY)
    seen_epoch = nil
    return true
  end
  if epoch ~= seen_epoch then
    seen_epoch = epoch
    if shared.get(EPOCH_KEY) ~= epoch then
      cache_clear()
      shared.set(EPOCH_KEY, epoch)
      return true
    end
  end
  return cached_generation ~= nil and cached_generation ~= generation()
end

-- An identity is kept as the row it was made from, one line per field,
-- since the store holds strings (each worker keeps the table it makes from
-- one: the near cache below).
local ROW_PATTERN = "^(.-)\n(.-)\n(.-)\n(.-)\n(.-)\n(.-)\n(.-)\n(.*)$"

local function encode(row, kind)
  local expires = row.expires_epoch and string.format("%.17g", row.expires_epoch) or ""
  return table.concat({ kind, row.hash, row.client_id, row.company_id, row.environment, row.scopes or "",
    tostring(row.rate_limit_per_minute or ""), expires }, "\n")
end

local identity

local function decode(text)
  local kind, hash, client_id, company_id, environment, scope_text, rate_limit, expires = text:match(ROW_PATTERN)
  if not kind then return nil end
  return identity({ hash = hash, client_id = client_id, company_id = company_id, environment = environment,
    scopes = scope_text, rate_limit_per_minute = tonumber(rate_limit),
    expires_epoch = tonumber(expires) }, kind)
end

-- What this worker read from the store, by digest, for the generation it
-- read it under (a generation that moved empties it): a request served
-- from it costs one read of the generation, not a read and a parse of the
-- entry. Each keeps the entry's end (clock.mono_ms), so it lives no longer
-- than the entry itself.
local near, near_gen, near_size, NEAR_MAX = {}, nil, 0, 10000

-- The generation, after making sure the host's count of credential-change
-- news has not moved since it was last acted on (else the cache is dropped).
local function current_generation()
  local changes = redis and redis.invalidations and redis.invalidations()
  if changes and changes ~= seen_changes then
    seen_changes = changes
    if changes ~= shared.get(CHANGES_KEY) then
      cache_clear()
      shared.set(CHANGES_KEY, changes)
    end
  end
  return generation()
end

-- The identity cached for digest in generation gen, or nil.
local function cache_get(digest, gen)
  if gen ~= near_gen then near, near_gen, near_size = {}, gen, 0 end
  local now = clock.mono_ms()
  local e = near[digest]
  if e and now < e.ends then return e.ident end
  local key = ENTRY_PREFIX .. gen .. ":" .. digest
  local text = shared.get(key)
  local ident = text and decode(text)
  if not ident then return nil end
  local left = shared.ttl(key)
  if not left then return nil end
  if near_size >= NEAR_MAX then near, near_size = {}, 0 end
  if not near[digest] then near_size = near_size + 1 end
  near[digest] = { ident = ident, ends = now + (left > 0 and left or math.huge) }
  return ident
end

-- Kept under the generation read before the database was asked: when the
-- cache was dropped meanwhile, the row may predate the change, and the
-- entry is never read.
local function cache_put(digest, gen, row, kind)
  local ttl_ms = math.floor(config.get("api.credential_cache_seconds") * 1000)
  if ttl_ms > 0 then shared.set(ENTRY_PREFIX .. gen .. ":" .. digest, encode(row, kind), ttl_ms) end
end

-- --------------------------------------------------------------- lookups

function identity(row, kind)
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
-- is the cache generation the answer came from, when it came from the
-- cache (for observe_epoch). Raises when the database cannot answer.
function M.lookup(credential, use_cache)
  if #credential > MAX_CREDENTIAL_LENGTH then return nil, "malformed" end
  local digest = crypto.sha256(credential)
  local now = clock.now()
  local gen = use_cache and current_generation()
  -- A cached identity came from this very credential, checked in full when
  -- it was cached: the shape checks below are for the first time only.
  if use_cache then
    local ident = cache_get(digest, gen)
    if ident then
      if expired(ident, now) then return nil, "expired" end
      return ident, nil, gen
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
  if use_cache then cache_put(digest, gen, row, kind) end
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
-- the change's announce_credential_change job tries again).
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

-- Enqueues, in the caller's transaction, the job that bumps the epoch
-- until Redis takes it (handlers/jobs/announce_credential_change.lua).
function M.announce_change()
  assert(jobs.enqueue("announce_credential_change", { changed_at = clock.now() }))
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
    M.announce_change()
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
    if revoked then M.announce_change() end
  end)
  if not ok then return nil, tostring(err) end
  if not revoked then return nil, "no client " .. client_id end
  M.bump_epoch()
  return { clientId = client_id, revokedAt = clock.iso() }
end

return M

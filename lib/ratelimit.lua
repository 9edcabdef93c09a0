-- Per-key rate limits shared by every gateway instance through Redis.
--
-- Algorithm: GCRA (generic cell rate algorithm), the "virtual scheduling"
-- form of a token bucket. A limit of N per minute means one request every
-- T = 60 s / N; the only state is the key's theoretical arrival time (TAT),
-- the moment its bucket would be full again. A request at `now` is allowed
-- when max(TAT, now) + T - now <= 60 s (a fresh key may spend all N at once),
-- and then moves the TAT by T. Why GCRA rather than fixed or sliding windows:
--   - one key per client holding one number, O(1) per request, expiring by
--     itself (PEXPIRE at the TAT) — no lists of timestamps, no cleanup;
--   - smooth: capacity comes back continuously (one request every T), so no
--     window edge lets a client send 2N within a few seconds;
--   - exact across instances: the check and the update run as one Redis
--     script on Redis's clock (TIME), so instances never disagree and their
--     own clocks do not matter. The script also reads the credential-cache
--     epoch key, so a request costs exactly one round trip.
-- Refused requests do not move the TAT: a client that keeps hammering still
-- gets its N per minute.
--
-- Blocks: a client with a large limit (N >= 2,000 per minute) may take up to
-- N/1000 requests from Redis at once and spend them in this instance (every
-- worker alike, through the shared store) within 50 ms (BLOCK_MS), so that a
-- busy client does not cost a Redis round trip
-- per request. Blocks start at one request and double while they run out
-- before their time; what an expired block did not spend is given back with
-- the next call (the TAT moves back), so a client is charged for what it
-- sent. The limit stays shared: all blocks come from the one TAT; at any
-- moment each instance may hold at most N/1000 of it (0.1%). Blocks are used
-- only while the host hears about credential changes (redis.invalidations:
-- a rotation or revocation anywhere ends every block and cached credential
-- at once); otherwise, and for smaller limits, every request asks Redis.
--
-- Header values: Remaining is how many requests could be sent right now;
-- Reset is the whole seconds (rounded up) until the bucket is full again,
-- i.e. until Remaining would be back at the limit; Retry-After (refusals
-- only) is the whole seconds (>= 1) until the next request is allowed.
--
-- When Redis is unreachable or errs, requests are allowed (fail open, as the
-- contract says): counted in sgw_ratelimit_fail_open_total and logged at most
-- every 10 s per worker.
local M = {}

-- Runs inside Redis (Lua 5.1; also valid Lua 5.4, so the unit specs run this
-- very text). Times are integer microseconds, exact in doubles (< 2^53).
-- KEYS[1] state key, KEYS[2] (optional) epoch key; ARGV[1] limit per minute,
-- ARGV[2] requests wanted (default 1), ARGV[3] requests given back (default
-- 0). Limits above one request per microsecond count as one per microsecond.
-- Returns {allowed 1|0, remaining, us until full, us until allowed, epoch,
-- requests granted}.
M.script = [[
if redis.replicate_commands then redis.replicate_commands() end
local window = 60000000
local limit = math.max(1, math.min(window, math.floor(tonumber(ARGV[1]))))
local want = math.max(1, math.floor(tonumber(ARGV[2] or '1')))
local give = math.max(0, math.floor(tonumber(ARGV[3] or '0')))
-- An integer interval keeps the arithmetic exact (window = N * interval is
-- at most N microseconds short of a minute).
local interval = math.floor(window / limit)
window = interval * limit
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
tat = math.max(tat - give * interval, now)
local available = math.floor((window - (tat - now)) / interval)
local allowed, wait, granted = 1, 0, 0
if available < 1 then
  allowed, wait = 0, tat + interval - window - now
else
  granted = math.min(want, available)
  tat = tat + granted * interval
end
if granted > 0 or give > 0 then
  if tat > now then
    redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.max(1, math.ceil((tat - now) / 1000)))
  else
    redis.call('DEL', KEYS[1])
  end
end
local epoch = 0
if KEYS[2] then
  local e = redis.call('GET', KEYS[2])
  -- Created when missing: while a cluster moves a slot, a script whose keys
  -- are only partly there is refused (TRYAGAIN).
  if not e then redis.call('SET', KEYS[2], '0') end
  epoch = math.floor(tonumber(e) or 0)
end
return { allowed, math.floor((window - (tat - now)) / interval), tat - now, wait, epoch, granted }
]]

-- Key layout: the state of a key lives at <redis.namespace>:{rl<n>}:<key>,
-- beside the credential epoch of its tag, <redis.namespace>:{rl<n>}:<name>,
-- n = the key's slot mod SHARDS. One script touches both, and on a Redis
-- Cluster the keys of one script must share a hash slot: the {tag} puts them
-- in one. SHARDS tags spread the keys over the cluster's nodes; every epoch
-- key holds the same number (lib/credentials.lua writes them all).
M.SHARDS = 16

local function tag(key)
  return config.get("redis.namespace") .. ":{rl" .. redis.key_slot(key) % M.SHARDS .. "}:"
end

-- The epoch key named `name` of every tag.
function M.epoch_keys(name)
  local keys, ns = {}, config.get("redis.namespace")
  for n = 0, M.SHARDS - 1 do keys[#keys + 1] = ns .. ":{rl" .. n .. "}:" .. name end
  return keys
end

local BLOCK_MS = 50
local BLOCK_SHARE = 1000   -- a block holds at most limit / BLOCK_SHARE requests

local LOG_EVERY_MS = 10000
local last_fail_log -- per worker state: a dead Redis logs once per 10 s, not per request

local function ceil_s(us)
  return math.max(0, math.ceil(us / 1000000))
end

-- class: the host's ("reply" when Redis refused the script itself, which
-- is a fault to fix rather than an outage to wait out; "timeout",
-- "unavailable").
local function fail_open(limit, err, class)
  metrics.inc("sgw_ratelimit_fail_open_total")
  local now = clock.mono_ms()
  if not last_fail_log or now - last_fail_log >= LOG_EVERY_MS then
    last_fail_log = now
    log.warn("ratelimit_fail_open", { error = tostring(err), class = class })
  end
  return { allowed = true, limit = limit, remaining = limit, reset = 60, failed_open = true }
end

local RENEWAL_STALE_MS = 100 -- a renewal whose reply never came
local TAKE_ALL = 1 << 40     -- subtracted to take what is left of a block at once

-- The rate-limit headers of an answer, as integers (the host formats them).
local function headers_of(r)
  return {
    ["X-RateLimit-Limit"] = math.floor(r.limit),
    ["X-RateLimit-Remaining"] = r.remaining,
    ["X-RateLimit-Reset"] = r.reset,
    ["Retry-After"] = r.retry_after,
  }
end

-- An instance's block of a key lives in the shared store, so that every
-- worker spends from the one block (requests need not find the worker that
-- took it):
--   rl:block:<key>   "limit size remaining reset epoch changes expires": what
--                    Redis answered when the block was taken (changes: the
--                    redis.invalidations count then; expires: mono ms)
--   rl:left:<key>    what is left of it, taken one by one (shared.incr)
--   rl:renewing:<key> the size asked for by the one call for the next block
--                    on its way (its caller holds the renewal)
--   rl:credit:<key>  while that call is on its way, other requests of the key
--                    spend from what it asked for: starts at -(want - 1) and
--                    counts up, so a request that brings it to 0 or below
--                    took credit; a busy client does not send every request
--                    that arrives meanwhile to Redis too.
-- The block's text is parsed once per worker (the same text is the same
-- block) into a table with the one answer its requests share.
local parsed, parsed_count = {}, 0
local MAX_PARSED = 10000

local function block_of(text)
  if not text then return nil end
  local b = parsed[text]
  if b then return b end
  local l, sz, rem, rs, ep, ch, ex = text:match("^(%d+) (%d+) (%d+) (%d+) (%-?%d+) (%d+) (%d+)$")
  if not l then return nil end
  b = { limit = tonumber(l), size = tonumber(sz), remaining = tonumber(rem), reset = tonumber(rs),
        epoch = tonumber(ep), changes = tonumber(ch), expires = tonumber(ex) }
  b.answer = { allowed = true, limit = b.limit, reset = b.reset, epoch = b.epoch }
  b.answer.headers = headers_of(b.answer)
  if parsed_count >= MAX_PARSED then parsed, parsed_count = {}, 0 end
  parsed[text], parsed_count = b, parsed_count + 1
  return b
end

-- How many requests the next call asks for, given the last block and what
-- it did not spend.
local function next_size(b, rest, max_block)
  if not b or b.size == 0 then return 1 end
  if rest == 0 then return math.min(max_block, b.size * 2) end   -- ran out in time: grow
  return math.max(1, math.min(max_block, b.size - rest))          -- expired: what was used
end

-- Takes the renewal of key's block, or nil when another request holds it.
-- What the last block did not spend goes back to the bucket with the call,
-- once: the block is emptied now, whatever becomes of the call.
local function take_renewal(key, b, limit, max_block)
  local k = { left = "rl:left:" .. key, block = "rl:block:" .. key,
              renewing = "rl:renewing:" .. key, credit = "rl:credit:" .. key }
  if not shared.add(k.renewing, 0, RENEWAL_STALE_MS) then return nil end
  local rest = 0
  local after = shared.incr(k.left, -TAKE_ALL)
  if after and b and b.limit == limit then rest = math.max(0, after + TAKE_ALL) end
  shared.delete(k.left)
  k.want, k.give = next_size(b, rest, max_block), rest
  shared.set(k.renewing, k.want, RENEWAL_STALE_MS)
  shared.set(k.credit, 1 - k.want, RENEWAL_STALE_MS)
  return k
end

-- Ends a renewal: how many requests took credit from it (lending stops now).
local function end_renewal(k)
  local after = shared.incr(k.credit, k.want)
  shared.delete(k.credit)
  shared.delete(k.renewing)
  return after and math.max(0, math.min(k.want - 1, after - 1)) or 0
end

local function forget_block(key)
  shared.delete("rl:block:" .. key)
  shared.delete("rl:left:" .. key)
end

-- Counts one request against `key` (e.g. "client:cli_1", "addr:10.0.0.1")
-- and reads the epoch named `epoch_name` (may be nil) of the key's tag in the
-- same round trip.
function M.check(key, limit, epoch_name)
  local max_block = limit // BLOCK_SHARE
  local changes = max_block >= 2 and redis.invalidations and redis.invalidations() or nil
  local want, give, renewal = 1, 0, nil
  if changes then
    local now = clock.mono_ms()
    local b = block_of(shared.get("rl:block:" .. key))
    local current = b and b.changes == changes and b.limit == limit
    if current and now < b.expires then
      local left = shared.incr("rl:left:" .. key, -1)
      if left and left >= 0 then
        -- One answer per block, brought up to date: a request only reads it.
        local r = b.answer
        r.remaining = b.remaining + left
        return r
      end
    end
    if current then
      local credit = shared.incr("rl:credit:" .. key, 1)
      if credit and credit <= 0 then
        local r = b.answer
        r.remaining = math.max(0, b.remaining - (credit + (shared.get("rl:renewing:" .. key) or 1) - 1))
        return r
      end
    end
    -- Beside a renewal on its way, this request asks for itself alone.
    renewal = take_renewal(key, b, limit, max_block)
    if renewal then want, give = renewal.want, renewal.give end
  end

  -- The call waits without holding the worker: the host resumes this
  -- request when the reply is in.
  local prefix = tag(key)
  local state_key = prefix .. key
  local reply, err, class
  if epoch_name then
    reply, err, class = redis.eval_cached(M.script, 2, state_key, prefix .. epoch_name, limit, want, give)
  else
    reply, err, class = redis.eval_cached(M.script, 1, state_key, limit, want, give)
  end
  local lent = renewal and end_renewal(renewal)
  if type(reply) ~= "table" or type(reply[5]) ~= "number" then
    if renewal then forget_block(key) end
    return fail_open(limit, err or "unexpected reply", class or "reply")
  end
  local r = {
    allowed = reply[1] == 1,
    limit = limit,
    remaining = math.max(0, reply[2]),
    reset = ceil_s(reply[3]),
    epoch = reply[5],
  }
  if not r.allowed then
    r.retry_after = math.max(1, ceil_s(reply[4]))
    if renewal then forget_block(key) end
  elseif renewal then
    -- This request spends one, those that took credit meanwhile theirs; the
    -- rest is the instance's until the block expires.
    local size = math.max(1, reply[6] or 1)
    local left = math.max(0, size - 1 - lent)
    local ttl = BLOCK_MS + RENEWAL_STALE_MS
    shared.set(renewal.left, left, ttl)
    shared.set(renewal.block, string.format("%.0f %.0f %.0f %.0f %.0f %.0f %.0f", limit, size, r.remaining, r.reset,
      r.epoch, changes, clock.mono_ms() + BLOCK_MS), ttl)
    r.remaining = r.remaining + left
  end
  return r
end

-- The rate-limit headers of an answer. The answer of a block keeps its
-- table, and each request of the block only moves Remaining (the host sends
-- the table before the next request runs).
function M.headers(r)
  local h = r.headers
  if not h then return headers_of(r) end
  h["X-RateLimit-Remaining"] = r.remaining
  return h
end

return M

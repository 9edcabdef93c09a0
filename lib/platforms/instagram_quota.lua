-- Instagram's publishing quota (CONTRACT 11): at most `quota_total` posts per
-- rolling `quota_duration` seconds per account, enforced by Meta at
-- media_publish. Read before publishing so that a used-up quota becomes a
-- wait for the window, not an error from Meta.
--
--   quota.check(account) -> nil                          quota left (or unknown)
--                        -> { code = "rate_limited", ... } the error of a quota wait
--   quota.exhausted(account, err) -> that error, after media_publish said 9/2207042
--   quota.published(account)      counts a publish in the cached usage
--   quota.reserve_container(account, target_id) -> reservation id, or nil and
--                                    the error of a container-limit wait
--   quota.release_container(id)   Meta's answer said no container was made
--
-- The answer of GET /{ig-user}/content_publishing_limit is cached in Redis for
-- meta.instagram_quota_cache_seconds, so every instance sees the same usage,
-- and each publish adds one to the cached usage. A stale count is harmless:
-- Meta's 9/2207042 at media_publish is treated the same way.
--
-- When the window frees: Meta does not say when the publishes that fill it
-- were made. The first slot is certain to be free once the oldest publish
-- still in the window leaves it: for the publishes sgw made itself that is
-- its published_at + quota_duration; for publishes made elsewhere at the
-- latest now + quota_duration. The wait is the earlier of the two.
local coalesce = require "coalesce"
local graph = require "platforms.graph"
local graph_errors = require "platforms.graph_errors"

local M = {}

M.PLATFORM_CODE = "9/2207042"

local INCREMENT = [[
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('HINCRBY', KEYS[1], 'usage', 1) end
return 0]]

local function key(account)
  return config.get("redis.namespace") .. ":igquota:" .. account.id
end

local function integer(v)
  v = tonumber(v)
  return v and math.tointeger(v) or nil
end

local function cached(account)
  local got = redis.call("HMGET", key(account), "usage", "total", "duration")
  if type(got) ~= "table" then return nil end
  local limit = { usage = integer(got[1]), total = integer(got[2]), duration = integer(got[3]) }
  if limit.usage and limit.total and limit.duration then return limit end
end

-- {usage, total, duration} from Meta (and into the cache), or nil, err.
local function fetch(account)
  local value, err = graph.call("GET", account.platform_account_id .. "/content_publishing_limit",
    { fields = "quota_usage,config" }, account.access_token)
  if not value then return nil, err end
  local entry = type(value.data) == "table" and value.data[1] or nil
  local conf = type(entry) == "table" and type(entry.config) == "table" and entry.config or {}
  local limit = { usage = integer(entry and entry.quota_usage), total = integer(conf.quota_total),
    duration = integer(conf.quota_duration) }
  if not (limit.usage and limit.total and limit.duration and limit.duration > 0) then
    return nil, { code = "platform_unavailable", message = "Meta's content_publishing_limit answer has no quota_usage and config." }
  end
  local ttl = config.get("meta.instagram_quota_cache_seconds")
  if ttl and ttl > 0 then
    -- A cache that cannot be written is only a cache: Meta is asked again next time.
    redis.call("HSET", key(account), "usage", limit.usage, "total", limit.total, "duration", limit.duration)
    redis.call("EXPIRE", key(account), math.ceil(ttl))
  end
  return limit
end

-- fetch for an account that other attempts of this worker are not reading
-- already (their answer is this one's).
local fetch_once = coalesce.single_flight(function(_, account) return fetch(account) end)

-- Seconds until a slot of the window is certain to be free (see above).
local function seconds_to_free(account, duration)
  local now = clock.now()
  local row = (db.query([[SELECT extract(epoch FROM min(published_at))::float8 AS oldest FROM post_targets
      WHERE social_account_id = $1 AND status = 'published' AND published_at > to_timestamp($2)]],
    account.id, now - duration) or {})[1]
  local frees = now + duration
  if row and row.oldest and row.oldest + duration < frees then frees = row.oldest + duration end
  return math.max(1, frees - now)
end

local function per(duration)
  if duration % 3600 == 0 then
    local hours = duration // 3600
    return hours == 1 and "hour" or (hours .. " hours")
  end
  return duration .. " seconds"
end

local function wait_error(account, limit, platform)
  local wait = seconds_to_free(account, limit.duration)
  return {
    code = "rate_limited", quota_wait = true, retry_after = wait, platform_code = platform and M.PLATFORM_CODE,
    platform = platform,
    message = ("Instagram's publishing limit of %d %s per %s is used up (%d used); the next try is at %s, "
      .. "when the oldest post of the window leaves it."):format(limit.total, limit.total == 1 and "post" or "posts",
      per(limit.duration), limit.usage,
      clock.iso(clock.now() + wait)),
  }
end

function M.check(account)
  local limit = cached(account)
  -- Only room is taken from the cache: a used-up quota is read again, so that
  -- a cached count never outlives the window it came from.
  if limit and limit.usage < limit.total then return nil end
  local err
  limit, err = fetch_once(account.id, account)
  -- Meta throttles this account's calls: wait for that first.
  if not limit and err and err.paused then return err end
  -- Unknown: publish anyway; Meta still refuses over the quota (9/2207042).
  if not limit then
    log.warn("instagram_quota_unknown", { accountId = account.id, error = err and err.message })
    return nil
  end
  if limit.usage >= limit.total then return wait_error(account, limit) end
end

-- media_publish answered 9/2207042: the quota is used up whatever the cache
-- said. Read it again for the figures; without them, Meta's error as classified.
function M.exhausted(account, err)
  redis.call("DEL", key(account))
  local limit = fetch(account)
  if not limit then
    err.quota_wait = true
    return err
  end
  limit.usage = math.max(limit.usage, limit.total)
  return wait_error(account, limit, err.platform)
end

function M.published(account)
  redis.eval_cached(INCREMENT, 1, key(account))
end

-- Containers: Meta lets an account create at most
-- meta.instagram_container_limit (400) of them per rolling
-- meta.instagram_container_window_seconds (24 h), published or not. Only the
-- publishing quota above says how much is used, so sgw counts the containers
-- it makes itself (table instagram_containers): a slot is taken, under a lock
-- on the account, before POST /{ig-user}/media is sent, and given back when
-- Meta answered that call with an error (no container was made). A call whose
-- answer was lost keeps its slot: the container may exist. Containers made by
-- other tools are not seen; Meta refuses those beyond its limit itself.
-- Under the lock, once the rows that left the window are deleted, the
-- account's rows are the window.
local RESERVE = {
  "SELECT pg_advisory_xact_lock(hashtextextended('sgw.instagram_containers:' || $1, 0))",
  "DELETE FROM instagram_containers WHERE social_account_id = $1 AND made_at <= now() - make_interval(secs => $2)",
  [[INSERT INTO instagram_containers (social_account_id, target_id)
    SELECT $1, $2 WHERE (SELECT count(*) FROM instagram_containers WHERE social_account_id = $1) < $3
    RETURNING id]],
  [[SELECT count(*)::int AS used, extract(epoch FROM now() - min(made_at))::float8 AS oldest_age
      FROM instagram_containers WHERE social_account_id = $1]],
}

function M.reserve_container(account, target_id)
  -- At least one: a limit of none would make every target wait for ever.
  local limit = math.max(1, config.get("meta.instagram_container_limit"))
  local window = config.get("meta.instagram_container_window_seconds")
  local answers = db.transaction(function()
    return assert(db.batch({ RESERVE[1], account.id }, { RESERVE[2], account.id, window },
      { RESERVE[3], account.id, target_id, limit }, { RESERVE[4], account.id }))
  end)
  local reserved = answers[3][1]
  if reserved then return reserved.id end
  local usage = answers[4][1]
  -- The oldest container leaves the window `window` seconds after it was made.
  local wait = math.max(1, math.ceil(window - (usage.oldest_age or window)))
  return nil, {
    code = "rate_limited", quota_wait = true, retry_after = wait,
    message = ("Instagram's limit of %d %s per %s is used up (%d made by sgw); the next try is at %s, "
      .. "when the oldest of them leaves the window."):format(limit, limit == 1 and "container" or "containers",
      per(window), usage.used, clock.iso(clock.now() + wait)),
  }
end

function M.release_container(id)
  assert(db.exec("DELETE FROM instagram_containers WHERE id = $1", id))
end

M.is_quota_error = function(err)
  return type(err) == "table" and err.platform_code == M.PLATFORM_CODE and graph_errors.retryable(err.code)
end

return M

-- Meta's advice once it throttles: stop calling, since every further call
-- adds to the count that keeps the limit in place, and wait as long as it
-- says (estimated_time_to_regain_access). This remembers, in Redis so that
-- every instance and every job sees it, until when Meta holds back
--
--   the app's calls      (code 4: the app's own limit), and
--   one token's calls    (17, 32, 341, 613, 80001-80009, HTTP 429, or a
--                         usage header that says access is not back yet).
--
--   pause.check(token)            -> nil: call; or the rate_limited error
--                                    of a pause (paused = true, throttle =
--                                    "app" or "token"), without calling Meta
--   pause.observe(token, err, regain_seconds, app_usage)  after every
--                                    answer: err as classified, or the wait
--                                    a success's usage header announced; and
--                                    the app's usage percent (X-App-Usage):
--                                    at 100 Meta refuses the app's next
--                                    calls, so they stop for APP_FULL_SECONDS
--                                    before Meta has to say so
--
-- A token stands for its account (a Page token for a Page and the Instagram
-- account on it), and only its digest is stored. Redis that cannot answer
-- pauses nothing: Meta still refuses what is over its limit.
local M = {}

-- How long the app's calls stop once X-App-Usage reaches 100 (Meta gives no
-- wait for its own limit; as after code 4 without Retry-After).
M.APP_FULL_SECONDS = 60

-- Every pause key carries one hash tag, so that the app's and a token's are
-- read in one MGET on a Redis Cluster too (one slot; the traffic is one read
-- per Graph call).
local function key(scope)
  return config.get("redis.namespace") .. ":{graphpause}:" .. scope
end

local function token_scope(token)
  return "token:" .. crypto.sha256_hex(token):sub(1, 32)
end

local function keys_for(token)
  local keys = { key("app") }
  if token then keys[2] = key(token_scope(token)) end
  return keys
end

-- A pause never shortens one already set (a later throttle that says less,
-- or comes without a wait, leaves the longer one standing). Two instances
-- setting one at once may both write; the later write wins, which is no
-- worse than Meta's own estimate moving.
local function pause(scope, seconds)
  local k = key(scope)
  local ends = clock.now() + seconds
  local current = tonumber(redis.call("GET", k))
  if current and current >= ends then return end
  -- The key outlives the pause a little on the wall clock; the value, read
  -- against sgw's clock, decides.
  redis.call("SET", k, string.format("%.3f", ends), "PX", math.ceil((seconds + 60) * 1000))
end

function M.check(token)
  local keys = keys_for(token)
  local got = redis.call("MGET", table.unpack(keys))
  if type(got) ~= "table" then return nil end
  local ends, app = 0, false
  for i = 1, #keys do
    local v = tonumber(got[i])
    if v and v > ends then ends, app = v, i == 1 end
  end
  local wait = ends - clock.now()
  if wait <= 0 then return nil end
  return {
    code = "rate_limited", paused = true, throttle = app and "app" or "token", retry_after = math.ceil(wait),
    message = ("Meta is throttling %s; sgw makes no call until %s, when Meta said access comes back.")
      :format(app and "this app's calls" or "calls for this account", clock.iso(ends)),
  }
end

function M.observe(token, err, regain_seconds, app_usage)
  if app_usage and app_usage >= 100 then pause("app", M.APP_FULL_SECONDS) end
  if err and err.throttle and err.retry_after then
    pause(err.throttle == "app" and "app" or token_scope(token or ""), err.retry_after)
  elseif token and regain_seconds and regain_seconds > 0 then
    -- An answer, but the usage header says access is held back for a while.
    pause(token_scope(token), regain_seconds)
  end
end

return M

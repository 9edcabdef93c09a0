-- Limits on signing in, in Redis so that every instance counts together:
-- failed attempts per email (someone guessing one person's password) and
-- all attempts per address (someone trying many emails). Fixed windows of
-- workspace.login.window_seconds, starting at the first attempt.
--
-- Redis unreachable: attempts are allowed (logged), like every other rate
-- limit of the service; Argon2id still makes each guess slow.
local M = {}

-- KEYS[1] counter; ARGV[1] window (s), ARGV[2] 1 to count an attempt, 0 to
-- only read. Returns {count, seconds until the window ends}.
local SCRIPT = [[
local n
if ARGV[2] == '1' then
  n = redis.call('INCR', KEYS[1])
  if n == 1 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1])) end
else
  n = tonumber(redis.call('GET', KEYS[1]) or '0')
end
return { n, redis.call('TTL', KEYS[1]) }
]]

local function key(kind, value)
  return config.get("redis.namespace") .. ":workspace:login:" .. kind .. ":" .. crypto.sha256_hex(value)
end

local function call(kind, value, count)
  local reply, err = redis.eval_cached(SCRIPT, 1, key(kind, value),
    math.floor(config.get("workspace.login.window_seconds")), count and "1" or "0")
  if type(reply) ~= "table" then
    log.warn("workspace_login_limit_unavailable", { error = tostring(err) })
    return 0, 0
  end
  return reply[1], math.max(1, reply[2])
end

-- Counts an attempt from an address. Returns nil when allowed, else the
-- seconds to wait.
function M.attempt(address)
  local n, ttl = call("address", address or "?", true)
  if n > config.get("workspace.login.max_attempts_per_address") then return ttl end
  return nil
end

-- Seconds to wait before this email may try again, or nil.
function M.email_blocked(email)
  local n, ttl = call("email", email, false)
  if n >= config.get("workspace.login.max_failures_per_email") then return ttl end
  return nil
end

function M.failed(email)
  call("email", email, true)
end

function M.succeeded(email)
  redis.call("DEL", key("email", email))
end

return M

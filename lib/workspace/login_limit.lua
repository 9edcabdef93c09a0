-- Limits on signing in and signing up, in Redis so that every instance
-- counts together.
--
-- Wrong passwords are counted per (email, address): someone guessing one
-- person's password from one place gets a growing wait, while the owner,
-- from anywhere else, is never locked out by it. The first
-- workspace.login.free_failures failures cost nothing; each one after waits
-- delay_base_seconds, doubling, at most max_delay_seconds. The count is
-- forgotten window_seconds after the last failure, or at a success. Many
-- emails from one address are bounded by all attempts per address
-- (max_attempts_per_address per window), and sign-ups have their own bound
-- per address (workspace.signup.max_per_address per window).
--
-- Redis unreachable: attempts are allowed (logged), like every other rate
-- limit of the service; Argon2id still makes each guess slow.
local M = {}

-- Fixed window counter. KEYS[1] counter; ARGV[1] window (s). Returns
-- {count, seconds until the window ends}.
local COUNT = [[
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1])) end
return { n, redis.call('TTL', KEYS[1]) }
]]

-- A failure. KEYS[1] failure count, KEYS[2] the wait; ARGV: window, free
-- failures, base delay, max delay (s). Returns the wait imposed (s, 0 none).
local FAILED = [[
local n = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
local over = n - tonumber(ARGV[2])
if over <= 0 then return 0 end
local wait = math.min(tonumber(ARGV[4]), tonumber(ARGV[3]) * 2 ^ math.min(over - 1, 30))
wait = math.max(1, math.floor(wait))
redis.call('SET', KEYS[2], '1', 'EX', wait)
return wait
]]

-- The digest is the hash tag: a failure count and its wait share a slot, as
-- the scripts touching both need on a Redis Cluster.
local function key(kind, ...)
  return config.get("redis.namespace") .. ":workspace:" .. kind .. ":{" .. crypto.sha256_hex(table.concat({ ... }, "\n")) .. "}"
end

local function eval(script, keys, ...)
  local args = { table.unpack(keys) }
  for _, v in ipairs({ ... }) do args[#args + 1] = v end
  local reply, err = redis.eval_cached(script, #keys, table.unpack(args))
  if reply == nil then log.warn("workspace_login_limit_unavailable", { error = tostring(err) }) end
  return reply
end

local function window()
  return math.floor(config.get("workspace.login.window_seconds"))
end

local function count(kind, address, max)
  local reply = eval(COUNT, { key(kind, address or "?") }, window())
  if type(reply) == "table" and reply[1] > max then return math.max(1, reply[2]) end
  return nil
end

-- Counts a sign-in attempt from an address. Returns nil when allowed, else
-- the seconds to wait.
function M.attempt(address)
  return count("login:address", address, config.get("workspace.login.max_attempts_per_address"))
end

-- Counts a sign-up from an address. Returns nil when allowed, else the
-- seconds to wait.
function M.signup(address)
  return count("signup:address", address, config.get("workspace.signup.max_per_address"))
end

-- Seconds this email must wait before trying again from this address, or nil.
function M.blocked(email, address)
  local ttl = eval("return redis.call('TTL', KEYS[1])", { key("login:wait", email, address or "?") })
  if type(ttl) == "number" and ttl > 0 then return ttl end
  return nil
end

function M.failed(email, address)
  eval(FAILED, { key("login:failures", email, address or "?"), key("login:wait", email, address or "?") },
    window(), math.floor(config.get("workspace.login.free_failures")),
    config.get("workspace.login.delay_base_seconds"), config.get("workspace.login.max_delay_seconds"))
end

function M.succeeded(email, address)
  eval("return redis.call('DEL', KEYS[1], KEYS[2])",
    { key("login:failures", email, address or "?"), key("login:wait", email, address or "?") })
end

return M

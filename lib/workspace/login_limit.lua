-- Limits on signing in and signing up, in Redis so that every instance
-- counts together.
--
-- Attempts are counted per (email, address) before the password is checked
-- (so that attempts sent at once cannot all pass before the first failure
-- counts) and forgotten at a success: someone guessing one person's
-- password from one place gets a growing wait, while the owner, from
-- anywhere else, is never locked out by it. The first
-- workspace.login.free_failures cost nothing; each one after makes the next
-- wait delay_base_seconds, doubling, at most max_delay_seconds. The count is
-- forgotten window_seconds after the last attempt. Many emails from one
-- address are bounded by all attempts per address (max_attempts_per_address
-- per window), and sign-ups have their own bound per address
-- (workspace.signup.max_per_address per window). One email guessed from
-- many addresses is bounded by the attempts at it from addresses it has not
-- signed in from (max_attempts_per_email per window): past them, only
-- addresses where the email signed in within known_address_days may try it,
-- so its owner, at home or at the office, is still not locked out. An IPv6
-- address counts as its /64 (lib/client_address.lua).
--
-- Redis unreachable: attempts are allowed (logged), like every other rate
-- limit of the service; Argon2id still makes each guess slow.
local client_address = require "client_address"

local M = {}

-- Fixed window counter. KEYS[1] counter; ARGV[1] window (s). Returns
-- {count, seconds until the window ends}.
local COUNT = [[
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1])) end
return { n, redis.call('TTL', KEYS[1]) }
]]

-- An attempt. KEYS[1] attempt count, KEYS[2] the wait; ARGV: window, free
-- attempts, base delay, max delay (s). Returns the seconds still to wait
-- (refused, not counted), or 0: counted, and past the free ones it makes
-- the next attempt wait.
local TRY = [[
local ttl = redis.call('TTL', KEYS[2])
if ttl > 0 then return ttl end
local n = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
local over = n - tonumber(ARGV[2])
if over > 0 then
  local wait = math.min(tonumber(ARGV[4]), tonumber(ARGV[3]) * 2 ^ math.min(over - 1, 30))
  redis.call('SET', KEYS[2], '1', 'EX', math.max(1, math.floor(wait)))
end
return 0
]]

-- An attempt at an email. KEYS[1] the email's count of attempts from
-- unknown addresses, KEYS[2] whether this address is known for it; ARGV:
-- window, most attempts. Returns the seconds still to wait (refused, not
-- counted), or 0.
local FROM_UNKNOWN = [[
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if (tonumber(redis.call('GET', KEYS[1])) or 0) >= tonumber(ARGV[2]) then
  return math.max(1, redis.call('TTL', KEYS[1]))
end
if redis.call('INCR', KEYS[1]) == 1 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1])) end
return 0
]]

-- The digest is the hash tag: a failure count and its wait share a slot, as
-- the scripts touching both need on a Redis Cluster.
local function key(kind, ...)
  return config.get("redis.namespace") .. ":workspace:" .. kind .. ":{" .. crypto.sha256_hex(table.concat({ ... }, "\n")) .. "}"
end

local function who(address)
  return client_address.group(address) or "?"
end

-- An email's keys share its digest as hash tag: its count, and each
-- address known for it.
local function email_keys(email, address)
  local prefix = config.get("redis.namespace") .. ":workspace:login:email:{" .. crypto.sha256_hex(email) .. "}"
  return { prefix .. ":unknown", prefix .. ":known:" .. crypto.sha256_hex(who(address)) }
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
  local reply = eval(COUNT, { key(kind, who(address)) }, window())
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

-- Counts a sign-in attempt for this email from this address, before its
-- password is checked. Returns nil when it may go ahead, else the seconds
-- it must wait.
function M.try(email, address)
  local wait = eval(TRY, { key("login:failures", email, who(address)), key("login:wait", email, who(address)) },
    window(), math.floor(config.get("workspace.login.free_failures")),
    config.get("workspace.login.delay_base_seconds"), config.get("workspace.login.max_delay_seconds"))
  if type(wait) == "number" and wait > 0 then return wait end
  return nil
end

-- Counts an attempt at this email from an address it has not signed in
-- from, before the password is checked. Returns nil when it may go ahead,
-- else the seconds it must wait.
function M.try_email(email, address)
  local wait = eval(FROM_UNKNOWN, email_keys(email, address), window(),
    math.floor(config.get("workspace.login.max_attempts_per_email")))
  if type(wait) == "number" and wait > 0 then
    log.warn("workspace_login_email_held", { detail = "an email had more sign-in attempts from unknown addresses "
      .. "than workspace.login.max_attempts_per_email; only addresses it signed in from may try it for now" })
    return wait
  end
  return nil
end

-- A success: the email's failures at this address are forgotten, and the
-- address is known for it for known_address_days.
function M.succeeded(email, address)
  eval("return redis.call('DEL', KEYS[1], KEYS[2])",
    { key("login:failures", email, who(address)), key("login:wait", email, who(address)) })
  eval("return redis.call('SET', KEYS[1], '1', 'EX', ARGV[1])", { email_keys(email, address)[2] },
    math.floor(config.get("workspace.login.known_address_days") * 86400))
end

return M

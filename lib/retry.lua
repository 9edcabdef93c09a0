-- When to try a failed platform call again (CONTRACT 6, automatic retries):
-- only retryable classes, at most publishing.retry.max_attempts attempts,
-- after base * 2^(attempt-1) seconds capped at max, with "equal jitter" (a
-- random point between half and all of that, so that targets failing
-- together do not come back together), and never sooner than the platform
-- asked (retry_after).
local graph_errors = require "platforms.graph_errors"

local M = {}

local function setting(value, key)
  if value ~= nil then return value end
  return config.get(key)
end

-- Seconds to wait after failed attempt number `attempt` (1 for the first).
-- opts: base, max (default publishing.retry.*), retry_after, random (a
-- function returning [0, 1), for specs).
function M.delay(attempt, opts)
  opts = opts or {}
  local base = setting(opts.base, "publishing.retry.base_seconds")
  local max = setting(opts.max, "publishing.retry.max_seconds")
  local random = opts.random or math.random
  local exponent = math.max(0, (attempt or 1) - 1)
  local ceiling = math.min(max, base * 2 ^ exponent)
  local wait = ceiling * (0.5 + 0.5 * random())
  if opts.retry_after and opts.retry_after > wait then wait = opts.retry_after end
  return wait
end

-- Whether an error of this class after `attempts` attempts gets another one.
function M.should_retry(class, attempts, max_attempts)
  max_attempts = setting(max_attempts, "publishing.retry.max_attempts")
  return graph_errors.retryable(class) and attempts < max_attempts
end

return M

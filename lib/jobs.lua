-- jobs.lua — enqueueing durable jobs.
--
-- A job is a row of the jobs table that the host's job workers (host/jobs.c)
-- claim and run with handlers/jobs/<kind>.lua. Enqueueing goes through the
-- caller's database connection, so inside db.transaction the job exists
-- exactly when the change that asked for it commits; the NOTIFY that wakes
-- the workers is delivered at that commit too.
local M = {}

-- How long a job waits after an outbound call the host did not send for its
-- lease (http.request's "lease": the database has not confirmed it lately).
M.LEASE_RETRY_SECONDS = 5

-- The kind and options checked; returns the delay in seconds and
-- max_attempts. Errors name the caller of enqueue/enqueue_many (level 3).
local function settings(name, kind, opts)
  if type(kind) ~= "string" or not kind:match("^[a-z0-9_.]+$") or kind:find("..", 1, true)
    or kind:sub(1, 1) == "." or kind:sub(-1) == "." then
    error(name .. ": kind must match [a-z0-9_.]+", 3)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(name .. ": opts must be a table", 3)
  end
  opts = opts or {}

  -- run_at is on the clock handlers see (which tests may move); the row
  -- stores the database's time, so convert through a delay, measured from
  -- clock_timestamp(): now() is when the enclosing transaction began, which
  -- would make a scheduled job due early by the transaction's age.
  local delay = 0
  if opts.run_at ~= nil then
    if type(opts.run_at) ~= "number" then error(name .. ": run_at must be a number", 3) end
    delay = opts.run_at - clock.now()
  elseif opts.delay ~= nil then
    if type(opts.delay) ~= "number" then error(name .. ": delay must be a number", 3) end
    delay = opts.delay
  end
  if delay < 0 then delay = 0 end

  local max_attempts = opts.max_attempts
  if max_attempts == nil then
    max_attempts = config.get("jobs.max_attempts") or 10
  end
  if math.type(max_attempts) ~= "integer" or max_attempts < 1 then
    error(name .. ": max_attempts must be a positive integer", 3)
  end
  return delay, max_attempts
end

-- Wakes the job workers (delivered at the caller's commit).
local function notify(result)
  local ok, err = db.exec("NOTIFY sgw_jobs")
  if not ok then return nil, err end
  return result
end

-- jobs.enqueue(kind, payload, opts) -> id | nil, err
-- opts: run_at (unix seconds, by clock.now()), delay (seconds),
-- max_attempts (default jobs.max_attempts).
function M.enqueue(kind, payload, opts)
  if payload ~= nil and type(payload) ~= "table" then
    error("jobs.enqueue: payload must be a table", 2)
  end
  local delay, max_attempts = settings("jobs.enqueue", kind, opts)
  local rows, err = db.query(
    "/* generic plan */ INSERT INTO jobs (kind, payload, run_at, max_attempts) "
      .. "VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3), $4) RETURNING id",
    kind, payload or {}, delay, max_attempts)
  if not rows then
    return nil, err
  end
  return notify(rows[1].id)
end

-- jobs.enqueue_many(kind, payloads, opts) -> ids (in the order of payloads)
-- | nil, err: one job per payload, in one statement, with the same opts.
function M.enqueue_many(kind, payloads, opts)
  if type(payloads) ~= "table" then
    error("jobs.enqueue_many: payloads must be a list of tables", 2)
  end
  for _, p in ipairs(payloads) do
    if type(p) ~= "table" then error("jobs.enqueue_many: payloads must be a list of tables", 2) end
  end
  local delay, max_attempts = settings("jobs.enqueue_many", kind, opts)
  if #payloads == 0 then return {} end
  local rows, err = db.query([[/* generic plan */
    INSERT INTO jobs (kind, payload, run_at, max_attempts)
    SELECT $1, p.value, clock_timestamp() + make_interval(secs => $3), $4
      FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS p(value, n) ORDER BY p.n
    RETURNING id]], kind, payloads, delay, max_attempts)
  if not rows then
    return nil, err
  end
  local ids = {}
  for i, r in ipairs(rows) do ids[i] = r.id end
  table.sort(ids) -- bigserial follows the insert order
  return notify(ids)
end

return M

-- The job queue seen from a spec: jobs put in as lib/jobs.lua would (with
-- the NOTIFY that wakes the workers), and counts read from the database.
local stack = require("stack")
local cjson = require("cjson")

local M = {}

--- A number the SQL selects.
function M.count(url, sql)
  return tonumber(stack.psql(url, sql))
end

--- Inserts n jobs of kind with the same payload and max_attempts.
function M.enqueue(url, kind, n, payload, max_attempts)
  stack.psql(url, string.format(
    "INSERT INTO jobs (kind, payload, max_attempts) SELECT %s, %s::jsonb, %d "
      .. "FROM generate_series(1, %d); NOTIFY sgw_jobs",
    "'" .. kind:gsub("'", "''") .. "'", "'" .. cjson.encode(payload):gsub("'", "''") .. "'", max_attempts, n))
end

return M

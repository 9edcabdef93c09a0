-- sgw jobs dead [--kind K]             ->  {"jobs":[{id, kind, attempts, failedAt, lastError}], "more"}
-- sgw jobs retry [--kind K] [--id N]   ->  {"requeued":[ids]}
-- A job that failed on its last attempt is kept with status 'dead' and its
-- last error (the Meta delivery it was processing, the post it was
-- publishing, stay stored); once the cause is fixed, retry runs it again
-- with a fresh count of attempts.
local cli = require "cli"
local json = require "json"

local LIST_MAX = 100

local function kind_of(flags)
  local kind = flags.kind
  if kind and not kind:match("^[a-z0-9_.]+$") then return nil, "--kind must match [a-z0-9_.]+" end
  return kind or ""
end

return cli.command {
  name = "jobs", summary = "Dead jobs: list them, and run them again once their cause is fixed.",
  subcommands = {
    { name = "dead", summary = "list dead jobs, newest first (at most " .. LIST_MAX .. ")",
      flags = { { "kind", "KIND", "only jobs of this kind (process_meta_delivery, publish_target, ...)" } },
      run = function(flags)
        local kind, err = kind_of(flags)
        if not kind then return cli.fail(err, 2) end
        local ok, derr = cli.need_database()
        if not ok then return cli.fail(derr) end
        local rows = assert(db.query([[SELECT id, kind, attempts, split_part(coalesce(last_error, ''), E'\n', 1) AS error
            FROM jobs WHERE status = 'dead' AND ($1 = '' OR kind = $1) ORDER BY id DESC LIMIT $2]], kind, LIST_MAX + 1))
        local list = {}
        for i = 1, math.min(#rows, LIST_MAX) do
          local r = rows[i]
          list[i] = { id = tonumber(r.id), kind = r.kind, attempts = r.attempts, lastError = r.error }
        end
        return cli.ok({ jobs = json.array(list), more = #rows > LIST_MAX })
      end },
    { name = "retry", summary = "queue dead jobs again, due now, their attempts counted afresh; prints {\"requeued\":[ids]}",
      flags = { { "kind", "KIND", "only dead jobs of this kind" },
                { "id", "ID", "only this dead job" } },
      run = function(flags)
        local kind, err = kind_of(flags)
        if not kind then return cli.fail(err, 2) end
        local id = flags.id and math.tointeger(tonumber(flags.id))
        if flags.id and not id then return cli.fail("--id must be a job id (an integer)", 2) end
        local ok, derr = cli.need_database()
        if not ok then return cli.fail(derr) end
        local requeued = {}
        db.transaction(function()
          local rows = assert(db.query([[UPDATE jobs SET status = 'pending', attempts = 0, run_at = now(), last_error = NULL,
              locked_by = NULL, locked_until = NULL
              WHERE status = 'dead' AND ($1 = '' OR kind = $1) AND ($2::bigint IS NULL OR id = $2) RETURNING id]],
            kind, id))
          for i, r in ipairs(rows) do requeued[i] = tonumber(r.id) end
          table.sort(requeued)
          if #rows > 0 then assert(db.exec("NOTIFY sgw_jobs")) end
        end)
        return cli.ok({ requeued = json.array(requeued) })
      end },
  },
}

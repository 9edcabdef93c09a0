-- The daily partitions of the tables partitioned by time (migrations/0029;
-- README, "Retention"): <table>_pYYYYMMDD holds the rows of that UTC day,
-- <table>_default whatever no day partition takes.
--
-- Days ahead are created by the retention job, so rows normally land in
-- their day's partition and the default partition stays empty. A day whose
-- rows already sit in the default partition (no instance ran for days) is
-- not created: PostgreSQL refuses a partition that would take rows from the
-- default one, and those rows are deleted row by row like before.
--
-- A table whose rows are kept forever (its kind's retention 0) gets no new
-- days: nothing would ever drop them, and hundreds of day partitions a year
-- would make every read that cannot prune by time plan over all of them. Its
-- rows go to the default partition, one table as before partitioning; days
-- made while a retention was set stay.
--
-- Creating or dropping a partition takes an exclusive lock on its table;
-- waiting for it behind a long transaction would make every write queue
-- behind that wait, so the wait is short and a partition that could not be
-- made or dropped is tried again at the next run (rows meanwhile go to the
-- default partition, or stay until then).
local json = require "json"

local M = {}

-- Days after today that get their partition; the retention job runs hourly
-- by default, so a day's partition exists days before its first row.
M.AHEAD_DAYS = 3

M.TABLES = {
  { name = "events", column = "created_at" },
  { name = "webhook_deliveries", column = "created_at" },
  { name = "meta_webhook_deliveries", column = "received_at" },
  { name = "comment_changes", column = "changed_at" },
}

local LOCK_TIMEOUT = "2s"

-- Several instances create and drop partitions in turns: PostgreSQL's IF
-- NOT EXISTS does not stop two sessions from creating the same one.
local function locked(fn)
  return pcall(db.transaction, function()
    assert(db.query("SELECT pg_advisory_xact_lock(hashtextextended('sgw/partitions', 0))"))
    assert(db.exec("SET LOCAL lock_timeout = '" .. LOCK_TIMEOUT .. "'"))
    return fn()
  end)
end

local function exists(name)
  return assert(db.query("SELECT to_regclass($1) IS NOT NULL AS present", name))[1].present
end

-- An SQL condition on `column` for a time known to the second ($n: Unix
-- seconds, rounded down): enough for the planner to read one or two day
-- partitions instead of every one. The row's time may have been rounded to
-- the next second when stored, hence the two seconds.
function M.near(column, n)
  return ("%s >= to_timestamp($%d) AND %s < to_timestamp($%d) + interval '2 seconds'"):format(column, n, column, n)
end

-- Creates the partitions of today and the next AHEAD_DAYS days that are
-- missing, except for the tables named in kept_forever ({name = true}).
-- Returns how many it created.
function M.create_ahead(kept_forever)
  local days = assert(db.query([[SELECT to_char(d, 'YYYYMMDD') AS day, to_char(d, 'YYYY-MM-DD') AS first,
      to_char(d + 1, 'YYYY-MM-DD') AS next
      FROM generate_series(0, $1) AS g, LATERAL (SELECT (now() AT TIME ZONE 'UTC')::date + g AS d) AS x]],
    M.AHEAD_DAYS))
  local wanted = {}
  for _, t in ipairs(M.TABLES) do
    for _, d in ipairs(kept_forever and kept_forever[t.name] and {} or days) do
      wanted[#wanted + 1] = { table = t.name, name = t.name .. "_p" .. d.day, first = d.first, next = d.next }
    end
  end
  local names = {}
  for i, p in ipairs(wanted) do names[i] = p.name end
  local missing = {}
  for _, r in ipairs(assert(db.query([[SELECT n FROM jsonb_array_elements_text($1::jsonb) AS n
      WHERE to_regclass(n) IS NULL]], json.encode(names)))) do missing[r.n] = true end
  local created = 0
  for _, p in ipairs(wanted) do
    if missing[p.name] then
      local state
      local ok, made = locked(function()
        if exists(p.name) then return false end
        local done, msg, sqlstate = db.exec(("CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s 00:00:00+00') TO ('%s 00:00:00+00')")
          :format(p.name, p.table, p.first, p.next))
        state = sqlstate
        if not done then error(msg, 0) end
        return true
      end)
      if ok and made then
        created = created + 1
      elseif not ok then
        -- 23514: the default partition holds rows of that day.
        local fields = { partition = p.name, error = tostring(made) }
        if state == "23514" then log.info("partition_left_in_default", fields) else log.warn("partition_not_created", fields) end
      end
    end
  end
  return created
end

-- Drops the day partitions of `table` that end at least `days` days ago,
-- except those holding a row `keep` (an SQL condition) matches. Returns the
-- rows dropped.
function M.drop_older(table_name, days, keep)
  local old = assert(db.query([[SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = $1::regclass AND c.relname ~ ('^' || $1 || '_p[0-9]{8}$')
        AND (to_date(right(c.relname, 8), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
            <= now() - make_interval(days => $2)
      ORDER BY c.relname]], table_name, days))
  local dropped = 0
  for _, p in ipairs(old) do
    local ok, n = locked(function()
      if not exists(p.name) then return 0 end
      -- Nothing writes to a day that old (every time column defaults to
      -- now()), and a kept row only ever stops being kept (processed,
      -- numbered): what this counts and checks is what is dropped.
      if keep and assert(db.query(("SELECT EXISTS (SELECT 1 FROM %s WHERE %s) AS kept"):format(p.name, keep)))[1].kept then
        return 0
      end
      local rows = tonumber(assert(db.query("SELECT count(*) AS n FROM " .. p.name))[1].n)
      assert(db.exec("DROP TABLE " .. p.name))
      return rows
    end)
    if ok then dropped = dropped + n else log.warn("partition_not_dropped", { partition = p.name, error = tostring(n) }) end
  end
  return dropped
end

return M

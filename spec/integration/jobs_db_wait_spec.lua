-- A job waiting on PostgreSQL parks its coroutine, never its worker thread:
-- while one job's transaction waits for a lock, the same single worker runs
-- and finishes other jobs; transactions of jobs still commit and roll back
-- as a whole (nested ones in savepoints); a pool with no free connection
-- makes a job wait at most database.pool_wait_ms.
local stack = require("stack")
local fixture_root = require("fixture_root")

local q = stack.shell_quote

local job_queue = require("job_queue")
local count = job_queue.count

local function enqueue(url, n, payload, max_attempts)
  job_queue.enqueue(url, "test_db_wait", n, payload, max_attempts or 1)
end

-- A psql session holding advisory lock `key` (its statement runs at most
-- 300 s); the returned function ends that session, which frees the lock.
local function hold_lock(url, key)
  local tag = "lock holder " .. key
  local code, out = stack.sh("timeout 300 " .. stack.PSQL .. " " .. q(url) .. " -X -q -c "
    .. q("SELECT pg_advisory_lock(" .. key .. "); SELECT pg_sleep(300) /* " .. tag .. " */")
    .. " > /dev/null 2>&1 &")
  assert(code == 0, out)
  stack.eventually(function()
    return count(url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = "
      .. key .. " AND granted") == 1
  end, 10, 0.05, "the lock holder to take the lock")
  return function()
    stack.psql(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%/* "
      .. tag .. " */%' AND pid <> pg_backend_pid()")
    stack.eventually(function()
      return count(url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = " .. key
        .. " AND granted") == 0
    end, 10, 0.05, "the lock to be released")
  end
end

describe("jobs waiting on the database", function()
  local root

  setup(function()
    root = fixture_root.create("jobs_db_wait")
  end)

  teardown(function()
    stack.cleanup()
  end)

  -- One job worker (set: more settings) and one job inside a transaction
  -- waiting for advisory lock `key`, which a session holds until release().
  local function start_with_waiting_job(name, key, set)
    local settings = { ["lua.root"] = root, ["jobs.workers"] = 1, ["jobs.poll_interval_ms"] = 100,
      ["database.statement_timeout_ms"] = 120000 }
    for k, v in pairs(set) do settings[k] = v end
    local sgw = stack.start_sgw({ name = name, set = settings })
    local db = sgw.database_url
    local release = hold_lock(db, key)
    enqueue(db, 1, { lock = key })
    stack.eventually(function()
      return count(db, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = " .. key
        .. " AND NOT granted") == 1
    end, 10, 0.05, "the job to wait for the lock")
    return sgw, db, release
  end

  it("runs other jobs on the same worker while one waits on a lock, then finishes it", function()
    local sgw, db, release = start_with_waiting_job("jobs_db_wait", 4242,
      { ["jobs.concurrency"] = 16, ["database.pool_size"] = 2 })
    -- Thirty more jobs with their own transactions, on the one worker thread
    -- and the one pool connection left.
    enqueue(db, 30, { inner_fail = true })
    stack.eventually(function()
      return count(db, "SELECT count(*) FROM job_selftest_results WHERE kind = 'done'") == 30
    end, 30, 0.1, "the other jobs to finish while one waits\n" .. sgw.log():sub(-2000))
    -- The waiting job is still waiting, and nothing of its transaction shows.
    assert.are.equal(0, count(db, "SELECT count(*) FROM job_selftest_results r JOIN jobs j ON j.id = r.job_id "
      .. "WHERE j.payload ? 'lock'"))
    -- Nested transactions that failed left nothing; their outer ones committed.
    assert.are.equal(0, count(db, "SELECT count(*) FROM job_selftest_results WHERE kind = 'inner'"))
    assert.are.equal(30, count(db, "SELECT count(*) FROM job_selftest_results WHERE kind = 'started'"))
    release()
    stack.eventually(function()
      return count(db, "SELECT count(*) FROM jobs WHERE kind = 'test_db_wait'") == 0
    end, 15, 0.1, "the waiting job to finish once the lock is free\n" .. sgw.log():sub(-2000)
      .. stack.psql(db, "SELECT string_agg(state || ' ' || coalesce(wait_event, '-') || ' ' || left(query, 60), E'\\n') FROM pg_stat_activity")
      .. stack.psql(db, "SELECT string_agg(id || ' ' || status || ' ' || attempts || ' ' || coalesce(last_error, '-'), E'\\n') FROM jobs"))
    assert.are.equal(31, count(db, "SELECT count(*) FROM job_selftest_results WHERE kind = 'done'"))
    assert.are.equal(0, sgw.stop())
  end)

  it("rolls back the whole transaction of a job that fails", function()
    local sgw = stack.start_sgw({ name = "jobs_db_rollback", set = {
      ["lua.root"] = root, ["jobs.workers"] = 1, ["jobs.poll_interval_ms"] = 100 } })
    local db = sgw.database_url
    enqueue(db, 5, { fail = "on purpose" }, 1)
    stack.eventually(function()
      return count(db, "SELECT count(*) FROM jobs WHERE status = 'dead'") == 5
    end, 15, 0.1, "the failing jobs to be dead\n" .. sgw.log():sub(-2000))
    assert.are.equal(0, count(db, "SELECT count(*) FROM job_selftest_results"))
    assert.matches("on purpose", stack.psql(db, "SELECT last_error FROM jobs LIMIT 1"))
    -- The worker's connections are clean: the next jobs commit.
    enqueue(db, 3, {})
    stack.eventually(function()
      return count(db, "SELECT count(*) FROM job_selftest_results WHERE kind = 'done'") == 3
    end, 15, 0.1, "later jobs to commit")
    assert.are.equal(0, sgw.stop())
  end)

  it("fails a statement that waited longer than database.pool_wait_ms for a connection", function()
    local sgw, db, release = start_with_waiting_job("jobs_db_pool_wait", 4343,
      { ["database.pool_size"] = 1, ["database.pool_wait_ms"] = 300 })
    enqueue(db, 1, {}, 1)
    stack.eventually(function()
      return count(db, "SELECT count(*) FROM jobs WHERE status = 'dead'") == 1
    end, 15, 0.1, "the second job to give up waiting\n" .. sgw.log():sub(-2000))
    assert.matches("no connection of the job worker's pool was free within 300 ms",
      stack.psql(db, "SELECT last_error FROM jobs WHERE status = 'dead'"))
    release()
    stack.eventually(function()
      return count(db, "SELECT count(*) FROM jobs WHERE kind = 'test_db_wait' AND status <> 'dead'") == 0
    end, 15, 0.1, "the first job to finish")
    assert.are.equal(1, count(db, "SELECT count(*) FROM job_selftest_results WHERE kind = 'done'"))
    assert.are.equal(0, sgw.stop())
  end)
end)

-- The job runner against the real stack: many outbound calls at once from one
-- worker, no job lost when an instance dies mid-flight, retries ending in
-- `dead`, and timers that fire once per interval across instances.
--
-- The jobs are the host's self-test job (handlers/jobs/selftest_fetch.lua),
-- which fetches payload.url and records one row per run in
-- job_selftest_results; the URLs point at slow_server (spec/support), which
-- answers after a delay and reports the most requests it held at once.
local stack = require("stack")
local cjson = require("cjson")

local q = stack.shell_quote

-- ------------------------------------------------------------------ helpers

local start_slow_server = require("slow_server").start

local job_queue = require("job_queue")
local count = job_queue.count

-- Inserts n self-test jobs with the same payload and wakes the workers.
local function enqueue(url, n, payload, max_attempts)
  job_queue.enqueue(url, "selftest_fetch", n, payload, max_attempts or 10)
end

local function log_tail(inst)
  return "\nsgw log:\n" .. inst.log():sub(-3000)
end

-- ------------------------------------------------------------------ specs

describe("job runner", function()
  local slow

  setup(function()
    slow = start_slow_server(1000)
  end)

  teardown(function()
    stack.cleanup()
    if slow then slow.stop() end
  end)

  it("runs 64 outbound calls at once on one worker and completes all 200 jobs", function()
    local sgw = stack.start_sgw({
      name = "jobs_concurrency",
      set = {
        ["jobs.workers"] = 1,
        ["jobs.concurrency"] = 64,
        ["jobs.poll_interval_ms"] = 200,
      },
    })
    local db = sgw.database_url
    stack.request("POST", slow.url .. "/reset")
    enqueue(db, 200, { url = slow.url .. "/fetch" })

    stack.eventually(function()
      local done = count(db, "SELECT count(DISTINCT job_id) FROM job_selftest_results")
      return done == 200, done .. " of 200 jobs recorded"
    end, 60, 0.2, "the 200 jobs did not complete" .. log_tail(sgw))

    local stats = slow.stats()
    -- 64 calls in flight at once on the fake, never more: how fast the 200
    -- go is the benchmarks' business, not a time limit here.
    assert.is_true(stats.peak >= 64, "peak concurrency was " .. stats.peak)
    assert.is_true(stats.peak <= 64, "jobs.concurrency exceeded: peak " .. stats.peak)
    assert.equal(200, count(db, "SELECT count(*) FROM job_selftest_results WHERE status = 200"))
    stack.eventually(function()
      return count(db, "SELECT count(*) FROM jobs") == 0
    end, 10, 0.1, "completed jobs were not deleted")
    assert.equal(0, sgw.stop())
  end)

  it("runs a job again after its instance was killed mid-flight, once its lease ran out", function()
    local set = {
      ["jobs.workers"] = 1,
      ["jobs.lease_seconds"] = 2,
      ["jobs.poll_interval_ms"] = 200,
    }
    local first = stack.start_sgw({ name = "jobs_crash_a", set = set })
    local db = first.database_url
    stack.request("POST", slow.url .. "/reset")
    enqueue(db, 10, { url = slow.url .. "/fetch?delay=4000" })

    -- Wait until all ten are in flight, then kill the instance.
    stack.eventually(function()
      local s = slow.stats()
      return s.current >= 10, "in flight: " .. s.current
    end, 15, 0.05, "the jobs did not start" .. log_tail(first))
    first.kill()
    assert.equal(0, count(db, "SELECT count(*) FROM job_selftest_results"))
    -- The ten are held by the dead instance (the timers' jobs it ran may be too).
    assert.equal(10, count(db, "SELECT count(*) FROM jobs WHERE kind = 'selftest_fetch' AND locked_by IS NOT NULL "
      .. "AND attempts = 1"))

    local second = stack.start_sgw({ name = "jobs_crash_b", database_url = db, set = set })
    stack.eventually(function()
      local done = count(db, "SELECT count(DISTINCT job_id) FROM job_selftest_results")
      return done == 10, done .. " of 10"
    end, 30, 0.2, "the killed jobs did not run again" .. log_tail(second))
    -- Each ran exactly once more, as its second attempt.
    assert.equal(10, count(db, "SELECT count(*) FROM job_selftest_results WHERE attempt = 2 AND status = 200"))
    stack.eventually(function()
      return count(db, "SELECT count(*) FROM jobs") == 0
    end, 10, 0.1, "the jobs were not completed")
    assert.equal(0, second.stop())
  end)

  it("retries a failing job with back-off and keeps it as dead after max_attempts", function()
    local sgw = stack.start_sgw({
      name = "jobs_dead",
      set = {
        ["jobs.workers"] = 1,
        ["jobs.retry_base_seconds"] = 1,
        ["jobs.retry_max_seconds"] = 2,
        ["jobs.poll_interval_ms"] = 100,
      },
    })
    local db = sgw.database_url
    enqueue(db, 1, { fail = "selftest failure requested" }, 3)
    stack.psql(db, "INSERT INTO jobs (kind, max_attempts) VALUES ('no_such_kind', 5); NOTIFY sgw_jobs")

    local row
    stack.eventually(function()
      row = stack.psql(db, "SELECT status || '|' || attempts || '|' || coalesce(last_error, '') "
        .. "FROM jobs WHERE kind = 'selftest_fetch'")
      return row:match("^dead|"), row
    end, 30, 0.2, "the failing job did not end dead" .. log_tail(sgw))
    local status, attempts, last_error = row:match("^(%a+)|(%d+)|(.*)$")
    assert.equal("dead", status)
    assert.equal("3", attempts)
    assert.truthy(last_error:find("selftest failure requested", 1, true), last_error)
    -- It ran three times, one row per run, with a pause between runs.
    assert.equal("1,2,3", stack.psql(db, "SELECT string_agg(attempt::text, ',' ORDER BY attempt) FROM job_selftest_results"))
    local gap = tonumber(stack.psql(db, "SELECT extract(epoch FROM max(created_at) - min(created_at)) FROM job_selftest_results"))
    assert.is_true(gap >= 1, "retries came after " .. gap .. " s in all")

    -- A kind without a handler is dead at once.
    stack.eventually(function()
      return stack.psql(db, "SELECT status FROM jobs WHERE kind = 'no_such_kind'") == "dead"
    end, 10, 0.1, "the unknown kind was not buried")
    local err = stack.psql(db, "SELECT last_error FROM jobs WHERE kind = 'no_such_kind'")
    assert.truthy(err:find("unknown job kind", 1, true), err)
    assert.equal("1", stack.psql(db, "SELECT attempts FROM jobs WHERE kind = 'no_such_kind'"))
    assert.truthy(sgw.log():find('"job_dead"', 1, true))

    -- The operator lists them, fixes the cause (here: the payload that
    -- asked to fail) and runs one kind again, with a fresh count of attempts.
    local function command(argv)
      local code, out = sgw:command(argv)
      assert.equal(0, code, out)
      return assert(cjson.decode(out:match("{.*}")), out)
    end
    local dead = command { "jobs", "dead" }.jobs
    assert.equal(2, #dead)
    assert.same({ "no_such_kind", "selftest_fetch" }, { dead[1].kind, dead[2].kind })
    assert.truthy(dead[1].lastError:find("unknown job kind", 1, true), dead[1].lastError)
    assert.truthy(dead[2].lastError:find("selftest failure requested", 1, true), dead[2].lastError)
    assert.equal(3, dead[2].attempts)
    stack.psql(db, "UPDATE jobs SET payload = jsonb_build_object('url', '" .. slow.url .. "/fetch') WHERE kind = 'selftest_fetch'")
    local requeued = command { "jobs", "retry", "--kind", "selftest_fetch" }.requeued
    assert.same({ dead[2].id }, requeued)
    stack.eventually(function()
      return stack.psql(db, "SELECT count(*) FROM jobs WHERE kind = 'selftest_fetch'") == "0"
    end, 20, 0.1, "the job run again to completion" .. log_tail(sgw))
    assert.equal("1,2,3,1", stack.psql(db, "SELECT string_agg(attempt::text, ',' ORDER BY created_at) FROM job_selftest_results"))
    assert.same({ dead[1].id }, { command { "jobs", "dead" }.jobs[1].id })
    assert.same({}, command { "jobs", "retry", "--id", tostring(dead[2].id) }.requeued)
    assert.equal(0, sgw.stop())
  end)

  it("reschedules a job that returns {retry_in = s}, and counts no attempt with attempt = false", function()
    local sgw = stack.start_sgw({
      name = "jobs_retry_in",
      set = { ["jobs.workers"] = 1, ["jobs.poll_interval_ms"] = 100 },
    })
    local db = sgw.database_url
    enqueue(db, 1, { retry_in = 1 })
    stack.eventually(function()
      return count(db, "SELECT count(*) FROM jobs") == 0
    end, 15, 0.1, "the job did not complete" .. log_tail(sgw))
    assert.equal("1,2", stack.psql(db, "SELECT string_agg(attempt::text, ',' ORDER BY attempt) FROM job_selftest_results"))
    local gap = tonumber(stack.psql(db, "SELECT extract(epoch FROM max(created_at) - min(created_at)) FROM job_selftest_results"))
    assert.is_true(gap >= 0.9, "ran again after " .. gap .. " s")

    -- {retry_in = s, attempt = false}: a wait, not an attempt; the count stays.
    stack.psql(db, "DELETE FROM job_selftest_results")
    enqueue(db, 1, { waits = 3 })
    stack.eventually(function()
      return count(db, "SELECT count(*) FROM jobs") == 0
    end, 15, 0.1, "the waiting job did not complete" .. log_tail(sgw))
    assert.equal("1,1,1,1", stack.psql(db, "SELECT string_agg(attempt::text, ',' ORDER BY created_at) FROM job_selftest_results"))
    assert.equal(0, sgw.stop())
  end)

  it("fires each timer once per interval across instances", function()
    -- A copy of handlers/ and lib/ with a timers table of its own.
    local root = stack.build_dir() .. "/test-roots/" .. stack.unique_name("timers")
    local code, out = stack.sh("mkdir -p " .. q(root) .. " && cp -R " .. q(stack.repo_root() .. "/handlers")
      .. " " .. q(stack.repo_root() .. "/lib") .. " " .. q(root) .. "/")
    assert.equal(0, code, out)
    local f = assert(io.open(root .. "/handlers/timers.lua", "w"))
    f:write('return { { name = "selftest_tick", every = 1, job = "selftest_fetch" } }\n')
    f:close()

    local set = { ["jobs.workers"] = 2, ["jobs.poll_interval_ms"] = 100, ["lua.root"] = root }
    local a = stack.start_sgw({ name = "jobs_timer_a", set = set })
    local db = a.database_url
    local b = stack.start_sgw({ name = "jobs_timer_b", database_url = db, set = set })
    stack.eventually(function()
      return count(db, "SELECT count(*) FROM timer_runs WHERE name = 'selftest_tick'") >= 4
    end, 15, 0.1, "four timer slots")
    assert.equal(0, a.stop())
    assert.equal(0, b.stop())
    stack.sh("rm -rf " .. q(root))

    local slots = count(db, "SELECT count(*) FROM timer_runs WHERE name = 'selftest_tick'")
    assert.is_true(slots >= 4, "only " .. slots .. " slots")
    -- Consecutive slots, each fired once: one job (and one run) per slot.
    assert.equal(slots, count(db, "SELECT max(slot) - min(slot) + 1 FROM timer_runs"))
    assert.equal(slots, count(db, "SELECT count(*) FROM job_selftest_results")
      + count(db, "SELECT count(*) FROM jobs WHERE kind = 'selftest_fetch'"))
  end)
end)

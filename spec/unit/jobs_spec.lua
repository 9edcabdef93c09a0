-- lib/jobs.lua against a fake host: what enqueue sends to the database.
describe("jobs.enqueue", function()
  local jobs, calls, now

  before_each(function()
    calls = {}
    now = 1000
    _G.clock = { now = function() return now end }
    _G.config = { get = function(key) return key == "jobs.max_attempts" and 7 or nil end }
    _G.db = {
      query = function(sql, ...)
        calls[#calls + 1] = { sql = sql, args = { ... } }
        return { { id = 42 }, affected = 1 }
      end,
      exec = function(sql)
        calls[#calls + 1] = { sql = sql }
        return 0
      end,
    }
    package.loaded.jobs = nil
    jobs = require("jobs")
  end)

  after_each(function()
    _G.clock, _G.config, _G.db = nil, nil, nil
  end)

  it("inserts the job and wakes the workers", function()
    assert.equal(42, jobs.enqueue("publish_post", { post_id = "p1" }))
    assert.equal(2, #calls)
    assert.truthy(calls[1].sql:find("INSERT INTO jobs", 1, true))
    assert.same({ "publish_post", { post_id = "p1" }, 0, 7 }, calls[1].args)
    assert.equal("NOTIFY sgw_jobs", calls[2].sql)
  end)

  it("turns run_at and delay into a delay on the database clock", function()
    jobs.enqueue("a", {}, { run_at = now + 30 })
    assert.equal(30, calls[1].args[3])
    jobs.enqueue("a", {}, { delay = 5, max_attempts = 2 })
    assert.equal(5, calls[3].args[3])
    assert.equal(2, calls[3].args[4])
    jobs.enqueue("a", nil, { run_at = now - 10 })
    assert.equal(0, calls[5].args[3])
    assert.same({}, calls[5].args[2])
  end)

  it("refuses bad arguments", function()
    assert.has_error(function() jobs.enqueue("Bad Kind", {}) end)
    assert.has_error(function() jobs.enqueue("../x", {}) end)
    assert.has_error(function() jobs.enqueue("a..b", {}) end)
    assert.has_error(function() jobs.enqueue(nil, {}) end)
    assert.has_error(function() jobs.enqueue("a", "payload") end)
    assert.has_error(function() jobs.enqueue("a", {}, { max_attempts = 0 }) end)
    assert.has_error(function() jobs.enqueue("a", {}, { delay = "soon" }) end)
    assert.equal(0, #calls)
  end)

  it("returns nil and the error when the database refuses", function()
    _G.db.query = function() return nil, "relation \"jobs\" does not exist", "42P01" end
    local id, err = jobs.enqueue("a", {})
    assert.is_nil(id)
    assert.truthy(err:find("does not exist", 1, true))
  end)

  it("enqueues many jobs in one statement and wakes the workers once", function()
    _G.db.query = function(sql, ...)
      calls[#calls + 1] = { sql = sql, args = { ... } }
      return { { id = 8 }, { id = 7 }, affected = 2 }
    end
    assert.same({ 7, 8 }, jobs.enqueue_many("deliver_event", { { eventId = "evt_1" }, { eventId = "evt_2" } },
      { max_attempts = 1000 }))
    assert.equal(2, #calls)
    assert.truthy(calls[1].sql:find("INSERT INTO jobs", 1, true))
    assert.same({ "deliver_event", { { eventId = "evt_1" }, { eventId = "evt_2" } }, 0, 1000 }, calls[1].args)
    assert.equal("NOTIFY sgw_jobs", calls[2].sql)
  end)

  it("enqueues nothing, and wakes no one, for no payloads", function()
    assert.same({}, jobs.enqueue_many("a", {}))
    assert.equal(0, #calls)
  end)

  it("refuses bad arguments to enqueue_many", function()
    assert.has_error(function() jobs.enqueue_many("a", "payloads") end)
    assert.has_error(function() jobs.enqueue_many("a", { "not a table" }) end)
    assert.has_error(function() jobs.enqueue_many("Bad Kind", { {} }) end)
    assert.equal(0, #calls)
  end)
end)

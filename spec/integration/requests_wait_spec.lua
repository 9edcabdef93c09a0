-- Requests waiting on an outbound call or on PostgreSQL park their
-- coroutines, never their worker thread: one worker keeps a hundred
-- outbound calls in flight and as many statements as its pool has
-- connections; a request that waits longer than database.pool_wait_ms for a
-- connection answers 503 with Retry-After, and the worker carries on.
local stack = require("stack")
local cjson = require("cjson")
local fixture_root = require("fixture_root")
local slow_server = require("slow_server")

local fire = require("steady_load").burst

local function all_equal(list, value)
  for _, v in ipairs(list) do
    if v ~= value then return false end
  end
  return true
end

local function sleeping(url)
  return tonumber(stack.psql(url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    .. "AND query LIKE 'SELECT pg_sleep(%' AND state = 'active'"))
end

describe("requests waiting", function()
  local root, slow

  setup(function()
    root = fixture_root.create("requests_wait")
    slow = slow_server.start(1000)
  end)

  teardown(function()
    stack.cleanup()
    if slow then slow.stop() end
  end)

  it("keeps a hundred outbound calls in flight on one worker", function()
    -- Each call waits 8 s, long enough for all hundred to be under way at
    -- once however slowly the machine starts the clients.
    local sgw = stack.start_sgw({ name = "requests_fetch", set = { ["lua.root"] = root, ["http.workers"] = 1,
      ["lua.handler_budget_ms"] = 60000 } })
    slow.reset()
    local wait = fire(sgw, 100, "/test/fetch?url=" .. slow.url .. "/hello%3Fdelay%3D8000")
    local statuses = wait(60)
    assert.are.equal(100, #statuses)
    assert.is_true(all_equal(statuses, "200"), table.concat(statuses, " "))
    local stats = slow.stats()
    -- One at a time on the worker's thread this would be a peak of 1.
    assert.are.equal(100, stats.peak, cjson.encode(stats))
    assert.are.equal(0, sgw.stop())
  end)

  it("runs as many statements at once as the worker's pool has connections", function()
    local sgw = stack.start_sgw({ name = "requests_pool", set = { ["lua.root"] = root, ["http.workers"] = 1,
      ["database.pool_size"] = 4, ["database.statement_timeout_ms"] = 60000 } })
    local wait = fire(sgw, 12, "/test/mixed?sleep=1")
    stack.eventually(function() return sleeping(sgw.database_url) == 4 end, 20, 0.05,
      "four statements of one worker at once")
    local statuses = wait(60)
    assert.are.equal(12, #statuses)
    assert.is_true(all_equal(statuses, "200"), table.concat(statuses, " "))
    assert.are.equal(0, sleeping(sgw.database_url))
    assert.are.equal(0, sgw.stop())
  end)

  it("answers 503 with Retry-After when no connection frees up within database.pool_wait_ms", function()
    local sgw = stack.start_sgw({ name = "requests_pool_wait", set = { ["lua.root"] = root, ["http.workers"] = 1,
      ["database.pool_size"] = 1, ["database.pool_wait_ms"] = 200, ["database.statement_timeout_ms"] = 60000 } })
    local wait = fire(sgw, 1, "/test/slow")
    stack.eventually(function() return sleeping(sgw.database_url) == 1 end, 20, 0.05,
      "the slow request to hold the only connection")
    local status, body, headers = sgw:request("GET", "/api/v1/social-accounts",
      { headers = { ["X-Api-Key"] = "sgk_test_" .. string.rep("a", 32) } })
    assert.are.equal(503, status, body)
    assert.are.equal("service_unavailable", cjson.decode(body).code)
    assert.matches("^%d+$", headers["retry-after"])
    local statuses = wait(30)
    assert.are.same({ "200" }, statuses)
    -- The connection is free again: the same request is answered.
    assert.are.equal(401, (sgw:request("GET", "/api/v1/social-accounts",
      { headers = { ["X-Api-Key"] = "sgk_test_" .. string.rep("a", 32) } })))
    assert.are.equal(0, sgw.stop())
  end)
end)

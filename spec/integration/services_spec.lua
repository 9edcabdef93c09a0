-- The `services` fixture really gives a PostgreSQL and a Redis, and stack.lua
-- can use them; then a smoke run of sgw itself through stack.start_sgw.
local stack = require("stack")

describe("test services", function()
  local svc

  setup(function()
    svc = stack.services()
  end)

  teardown(stack.cleanup)

  it("PostgreSQL answers a query", function()
    assert.equal("42", stack.psql(svc.database_url, "SELECT 40 + 2"))
  end)

  it("Redis answers PING", function()
    local code, out = stack.sh("redis-cli -u " .. stack.shell_quote(svc.redis_url) .. " PING")
    assert.equal(0, code)
    assert.equal("PONG", (out:gsub("%s+$", "")))
  end)

  it("gives fresh, separate databases", function()
    local a, name_a = stack.fresh_database("spec")
    local b, name_b = stack.fresh_database("spec")
    assert.are_not.equal(name_a, name_b)
    assert.equal(name_a, stack.psql(a, "SELECT current_database()"))
    stack.psql(a, "CREATE TABLE only_in_a (x int)")
    assert.equal("1", stack.psql(a, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'"))
    assert.equal("0", stack.psql(b, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'"))
  end)
end)

describe("stack.start_sgw", function()
  local sgw

  teardown(stack.cleanup)

  it("starts sgw, which answers on both listeners and stops cleanly on SIGTERM", function()
    sgw = stack.start_sgw({ name = "smoke" })
    assert.truthy(sgw.pid > 0)

    local status = stack.request("GET", sgw.admin_url .. "/healthz")
    assert.equal(200, status)

    local st, _, headers = stack.request("GET", sgw.base_url .. "/api/v1/no-such-thing")
    assert.is_number(st, "public listener did not answer")
    assert.truthy(headers["x-request-id"], "no X-Request-Id header")

    local code, out = sgw.reload()
    assert.equal(0, code, out)

    assert.equal(0, sgw.stop())
    assert.is_false(sgw.alive())
  end)
end)

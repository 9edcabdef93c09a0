-- sgw behind PgBouncer in transaction pooling mode (database.url) with the
-- job workers' LISTEN on a direct connection (database.listen_url). The pool
-- has two server connections, so the transactions of every worker of both
-- instances interleave on them: anything sgw kept in a session would leak to
-- or be missing from the next client.
local stack = require "stack"
local cjson = require "cjson.safe"
local comment_stack = require "comment_stack"

local SERVICES = "bash spec/support/services "

local function services(command, args)
  local code, out = stack.sh(SERVICES .. command .. " " .. stack.shell_quote(os.getenv("SGW_TEST_SERVICES_DIR"))
    .. " " .. args)
  assert(code == 0, out)
  return out
end

describe("PgBouncer in transaction mode", function()
  local name = "pgb" .. math.random(1, 1e9)
  local env, t, other, second, direct_url, pooled_url

  setup(function()
    local port = assert(services("pgbouncer", name .. " --pool-size 2"):match("(%d+)%s*$"))
    local dbname
    direct_url, dbname = stack.migrated_database("pgbouncer")
    pooled_url = stack.url_with_database("postgresql://postgres@127.0.0.1:" .. port .. "/postgres", dbname)
    -- A session default sgw must not depend on: it sets its time zone and
    -- statement timeout per transaction.
    stack.psql(direct_url, 'ALTER DATABASE "' .. dbname .. '" SET timezone = \'America/New_York\'')
    env = comment_stack.start({ name = "pgbouncer", database_url = pooled_url, set = {
      ["database.listen_url"] = direct_url,
      -- PgBouncer 1.18 (Debian 12) does not track protocol-level prepared
      -- statements: as the README says, names off.
      ["database.prepared_statements"] = false,
      -- Only the LISTEN on the direct connection wakes the job workers soon.
      ["jobs.poll_interval_ms"] = 30000,
    } })
    second = env.another()
    t = comment_stack.test_tenant(env, "Pooled Co")
    other = comment_stack.test_tenant(env, "Other Co")
  end)

  teardown(function()
    comment_stack.stop()
    services("stop-extra", name)
  end)

  it("publishes through the sandbox, replays an idempotent request and times in UTC", function()
    local request = { targets = { { socialAccountId = t.fb.id, platform = "facebook" } },
      content = { type = "text", message = "Pooled" }, publishing = { mode = "immediate" } }
    local key = { ["Idempotency-Key"] = "pooled-" .. name }
    local s1, b1 = t.api("POST", "/api/v1/posts", request, key)
    assert.are.equal(202, s1, cjson.encode(b1))
    -- The replay may land on the other instance: same answer, one post.
    local s2, b2 = second:json("POST", "/api/v1/posts", { body = request,
      headers = { ["X-Api-Key"] = t.key, ["Idempotency-Key"] = key["Idempotency-Key"] } })
    assert.are.equal(202, s2, cjson.encode(b2))
    assert.are.equal(b1.operationId, b2.operationId)
    assert.are.equal("succeeded", t.wait(b1.operationId, 20).status)
    local _, post = t.api("GET", "/api/v1/posts/" .. b1.resource.postId)
    assert.are.equal("published", post.status)
    assert.matches("Z$", post.createdAt)
    assert.are.equal(1, env.count("SELECT count(*) FROM posts WHERE id = '" .. b1.resource.postId .. "'"))
    local _, list = other.api("GET", "/api/v1/posts")
    assert.are.same({}, list.data)
  end)

  it("takes sandbox comments into the inbox on both instances, each company its own", function()
    local _, target = t.publish(t.fb, { type = "text", message = "Comment here" })
    local c = t.sandbox_comment(target, "Pooled comment")
    for _, inst in ipairs({ env.sgw, second }) do
      local status, page = inst:json("GET", "/api/v1/comments", { headers = { ["X-Api-Key"] = t.key } })
      assert.are.equal(200, status)
      assert.are.equal(c.id, page.data[1].id)
    end
    local _, theirs = other.api("GET", "/api/v1/comments")
    assert.are.same({}, theirs.data)
  end)

  it("runs a job woken through LISTEN on the direct connection", function()
    local started = stack.now()
    env.run_job("idempotency_cleanup")
    assert.is_true(stack.now() - started < 10, "the job waited for the 30 s poll")
  end)

  it("reloads and keeps serving and rate limiting", function()
    local status = stack.request("POST", env.sgw.admin_url .. "/reload")
    assert.are.equal(200, status)
    local s, body, headers = t.api("GET", "/api/v1/social-accounts")
    assert.are.equal(200, s)
    assert.are.equal(2, #body.data)
    assert.is_truthy(tonumber(headers["x-ratelimit-remaining"]))
  end)

  it("leaves no session state on the pooled server connections", function()
    -- Through the pool, after all the traffic above: the database's own
    -- defaults, not what sgw uses inside its transactions.
    assert.are.equal("America/New_York", stack.psql(pooled_url, "SHOW TimeZone"))
    assert.are.equal("0", stack.psql(pooled_url, "SHOW statement_timeout"))
    assert.are.equal("0", stack.psql(pooled_url,
      "SELECT count(*) FROM pg_prepared_statements"))
  end)
end)

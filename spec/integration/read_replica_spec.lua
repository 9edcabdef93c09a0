-- database.read_url: a streaming replica serves the lag-tolerant reads
-- (listings, inbox, GETs) while it is within database.max_replica_lag_ms;
-- operations and writes stay on the primary. Proved by pausing the
-- replica's replay: a listing from it misses a new post that the primary
-- already has.
local stack = require "stack"
local cjson = require "cjson.safe"
local comment_stack = require "comment_stack"

local function services(command, args)
  local code, out = stack.sh("bash spec/support/services " .. command .. " "
    .. stack.shell_quote(os.getenv("SGW_TEST_SERVICES_DIR")) .. " " .. args)
  assert(code == 0, out)
  return out
end

local function ids(page)
  local out = {}
  for _, p in ipairs(page.data) do out[p.id] = true end
  return out
end

describe("read replica", function()
  local name = "rep" .. math.random(1, 1e9)
  local env, t, other, strict, replica_url

  local function list(inst, client)
    local status, page = inst:json("GET", "/api/v1/posts?limit=100", { headers = { ["X-Api-Key"] = (client or t).key } })
    assert.are.equal(200, status, cjson.encode(page))
    return ids(page)
  end

  setup(function()
    local primary, replica = services("replica", name):match("(%d+) (%d+)%s*$")
    local dbname = "sgw_replica"
    local primary_url = "postgresql://postgres@127.0.0.1:" .. primary .. "/" .. dbname
    replica_url = "postgresql://postgres@127.0.0.1:" .. replica .. "/" .. dbname
    stack.psql("postgresql://postgres@127.0.0.1:" .. primary .. "/postgres", "CREATE DATABASE " .. dbname)
    -- Patient: only the replica's replay is stopped below, never longer.
    env = comment_stack.start({ name = "replica", database_url = primary_url, set = {
      ["database.read_url"] = replica_url, ["database.max_replica_lag_ms"] = 600000 } })
    strict = env.another({ ["database.max_replica_lag_ms"] = 1000 })
    t = comment_stack.test_tenant(env, "Replica Co")
    other = comment_stack.test_tenant(env, "Other Co")
  end)

  teardown(function()
    comment_stack.stop()
    services("stop-extra", name)
  end)

  it("serves listings from the replica, GETs and operations see the caller's own write", function()
    local first = t.publish(t.fb, { type = "text", message = "Before the pause" })
    stack.eventually(function() return list(env.sgw)[first] end, 10, 0.05, "the replica to have the first post")
    stack.psql(replica_url, "SELECT pg_wal_replay_pause()")

    local status, body = t.api("POST", "/api/v1/posts", { targets = { { socialAccountId = t.fb.id, platform = "facebook" } },
      content = { type = "text", message = "During the pause" }, publishing = { mode = "immediate" } })
    assert.are.equal(202, status, cjson.encode(body))
    local new = body.resource.postId
    assert.are.equal("succeeded", t.wait(body.operationId, 20).status)     -- the primary
    local s, post = t.api("GET", "/api/v1/posts/" .. new)                   -- a miss asks the primary
    assert.are.equal(200, s)
    assert.are.equal("published", post.status)
    assert.are.equal(1, #post.targets)
    local seen = list(env.sgw)
    assert.is_true(seen[first])
    assert.is_nil(seen[new])                                                -- the paused replica
    -- One second behind is too far for the strict instance: the primary.
    stack.eventually(function() return list(strict)[new] end, 10, 0.1, "the strict instance to skip the replica")
    assert.are.same({}, list(strict, other))

    stack.psql(replica_url, "SELECT pg_wal_replay_resume()")
    stack.eventually(function() return list(env.sgw)[new] end, 10, 0.05, "the replica to catch up")
    local _, metrics = stack.request("GET", env.sgw.admin_url .. "/metrics")
    assert.matches('sgw_db_reads_total{target="replica"}', metrics, 1, true)
  end)

  it("finds a replica behind whose WAL receiver hears nothing, though it has replayed all it received", function()
    local function usable(inst)
      local _, metrics = stack.request("GET", inst.admin_url .. "/metrics")
      return (metrics or ""):match("\nsgw_db_replica_usable (%d)")
    end
    stack.eventually(function() return usable(strict) == "1" end, 15, 0.1, "the strict instance to use the replica")
    -- The primary's WAL sender stops sending (as on a link that drops
    -- everything): the replica's receiver still runs and has replayed all it
    -- got, so by its own view it is not behind at all.
    local sender = stack.psql(env.sgw.database_url, "SELECT pid FROM pg_stat_replication")
    assert.matches("^%d+$", sender)
    assert.are.equal(0, (stack.sh("kill -STOP " .. sender)))
    finally(function() stack.sh("kill -CONT " .. sender) end)
    local first = t.publish(t.fb, { type = "text", message = "Not sent to the replica" })
    stack.eventually(function() return usable(strict) == "0" end, 10, 0.1, "the strict instance to skip the replica")
    stack.eventually(function() return list(strict)[first] end, 10, 0.1, "the listing from the primary")
    assert.are.equal("1", usable(env.sgw), "the patient instance still uses it")

    assert.are.equal(0, (stack.sh("kill -CONT " .. sender)))
    stack.eventually(function() return usable(strict) == "1" end, 15, 0.1, "the strict instance back on the replica")
  end)

  it("reads from the primary while the replica is down", function()
    local _, target = t.publish(t.fb, { type = "text", message = "Replica down" })
    services("replica-stop", name)
    local c = t.sandbox_comment(target, "Still listed")
    stack.eventually(function()
      local status, page = t.api("GET", "/api/v1/comments")
      return status == 200 and page.data[1] and page.data[1].id == c.id
    end, 10, 0.1, "the inbox from the primary")
    assert.are.equal(c.id, t.get(c.id).id)
    local status, accounts = t.api("GET", "/api/v1/social-accounts")
    assert.are.equal(200, status)
    assert.are.equal(2, #accounts.data)
    assert.matches("db_replica_skipped", env.sgw:log(), 1, true)
  end)
end)

-- Rate limits against the real stack: one budget shared by two instances,
-- fail open while Redis is down (and limits again once it is back), per-client
-- limits independent of each other and of anonymous traffic.
--
-- Anonymous requests are limited per source address and every spec talks from
-- 127.0.0.1: on the shared test Redis, each database gets its own
-- redis.namespace (spec/support/stack.lua), which keeps specs apart.
local stack = require "stack"
local redis_cluster = require "redis_cluster"
local own_services = require "own_services"
local cjson = require "cjson.safe"

local function cluster_backend(name) return name ~= "one Redis" end

local function header_int(headers, name)
  return tonumber(headers[name] or "")
end

-- Every answer carries the three headers; returns them as numbers.
local function limits_of(status, headers)
  local l = header_int(headers, "x-ratelimit-limit")
  local rem = header_int(headers, "x-ratelimit-remaining")
  local reset = header_int(headers, "x-ratelimit-reset")
  assert(l and rem and reset, "status " .. tostring(status) .. " without X-RateLimit-* headers")
  assert.is_true(rem >= 0 and reset >= 0)
  return l, rem, reset
end

local function assert_rate_limited(status, body, headers)
  assert.equal(429, status)
  assert.equal("application/problem+json", headers["content-type"])
  local p = assert(cjson.decode(body))
  assert.equal("rate_limited", p.code)
  assert.equal(429, p.status)
  assert.equal(headers["x-request-id"], p.requestId)
  local retry = header_int(headers, "retry-after")
  assert.is_truthy(retry, "429 without Retry-After")
  assert.is_true(retry >= 1)
  return retry
end

-- Runs an sgw CLI command against inst's database; its JSON answer.
local function cli(inst, argv)
  local code, out = inst:command(argv)
  assert(code == 0, table.concat(argv, " ") .. " failed: " .. out)
  return assert(cjson.decode(out:match("{.*}")), out)
end

local function metric(inst, name)
  local status, text = inst:admin("GET", "/metrics")
  assert.equal(200, status)
  for line in text:gmatch("[^\n]+") do
    local v = line:match("^" .. name .. "%s+([%d.eE+]+)$") or line:match("^" .. name .. "{[^}]*}%s+([%d.eE+]+)$")
    if v then return tonumber(v) end
  end
end

describe("rate limits", function()
  local redis_servers = {}

  local function new_redis()
    local r = own_services.redis()
    r.start()
    redis_servers[#redis_servers + 1] = r
    return r
  end

  after_each(function()
    stack.cleanup()
    for _, r in ipairs(redis_servers) do r.kill() end
    redis_servers = {}
  end)

  it("runs a request once: its rate-limit call waits, counted and logged once", function()
    local inst = stack.start_sgw { name = "rl_once", set = { ["api.rate_limit.anonymous_per_minute"] = 100 } }
    local ids = {}
    for i = 1, 3 do
      -- Malformed: refused without a database lookup, after the rate limit.
      local status, _, headers = inst:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = "not-a-key" } })
      assert.equal(401, status)
      assert.equal(tostring(100 - i), headers["x-ratelimit-remaining"])
      ids[#ids + 1] = headers["x-request-id"]
    end
    local log = inst:log()
    for _, id in ipairs(ids) do
      local lines = 0
      for line in log:gmatch("[^\n]+") do
        if line:find('"event":"auth_refused"', 1, true) and line:find(id, 1, true) then lines = lines + 1 end
      end
      assert.equal(1, lines)
    end
  end)

  it("fails open when Redis is unreachable", function()
    local inst = stack.start_sgw {
      name = "rl_dead_redis", redis_url = "redis://127.0.0.1:1",
      set = { ["api.rate_limit.anonymous_per_minute"] = 3, ["http.workers"] = 2 },
    }
    for _ = 1, 10 do
      local status, _, headers = inst:request("GET", "/api/v1/openapi.json")
      assert.equal(200, status)
      local limit, remaining, reset = limits_of(status, headers)
      assert.same({ 3, 3, 60 }, { limit, remaining, reset })
      assert.is_nil(headers["retry-after"])
    end
    local status, body = inst:admin("GET", "/readyz")
    assert.equal(503, status)
    assert.truthy(body:find('"redis":"unreachable"', 1, true), body)
    assert.is_true((metric(inst, "sgw_ratelimit_fail_open_total") or 0) >= 10)
    -- Logged, but not once per request: at most once per worker in 10 s.
    local _, lines = inst:log():gsub('"ratelimit_fail_open"', "")
    assert.is_true(lines >= 1 and lines <= 2, lines .. " ratelimit_fail_open log lines")
  end)

  it("fails open while Redis restarts, then limits again", function()
    local r = new_redis()
    local inst = stack.start_sgw {
      name = "rl_restart", redis_url = r.url,
      set = { ["api.rate_limit.anonymous_per_minute"] = 3, ["redis.retry_interval_ms"] = 100 },
    }
    for _ = 1, 3 do assert.equal(200, (inst:request("GET", "/api/v1/openapi.json"))) end
    assert_rate_limited(inst:request("GET", "/api/v1/openapi.json"))

    r.kill()
    for _ = 1, 6 do
      local status, _, headers = inst:request("GET", "/api/v1/openapi.json")
      assert.equal(200, status)
      assert.equal("3", headers["x-ratelimit-remaining"])
    end

    -- A new, empty Redis on the same port: the script is loaded again
    -- (NOSCRIPT) and the budget starts over.
    r.start()
    local statuses = {}
    stack.eventually(function()
      local status = inst:request("GET", "/api/v1/openapi.json")
      statuses[#statuses + 1] = status
      return status == 429
    end, 10, 0.05, "a 429 once Redis is back")
    for _, s in ipairs(statuses) do assert.is_true(s == 200 or s == 429) end
    assert.is_true(#statuses >= 4)
  end)

  it("revokes a busy client at once, also after Redis went away and came back", function()
    local r = new_redis()
    local inst = stack.start_sgw {
      name = "rl_blocks_revoke", redis_url = r.url,
      set = { ["redis.retry_interval_ms"] = 100, ["api.credential_cache_seconds"] = 600 },
    }
    local function run(argv) return cli(inst, argv) end
    local company = run { "company", "create", "--name", "Busy" }.companyId
    local c = run { "client", "create", "--company", company, "--environment", "test",
      "--scopes", "accounts:read", "--rate-limit", "1000000" }
    local function get()
      return inst:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } })
    end
    for _ = 1, 50 do assert.equal(200, (get())) end

    r.kill()
    for _ = 1, 5 do
      local status, _, headers = get()
      assert.equal(200, status)
      assert.equal("1000000", headers["x-ratelimit-remaining"]) -- failed open
    end
    r.start()
    stack.eventually(function()
      local status, _, headers = get()
      return status == 200 and headers["x-ratelimit-remaining"] ~= "1000000"
    end, 10, 0.05, "counted in Redis again")
    for _ = 1, 50 do assert.equal(200, (get())) end

    run { "client", "revoke", "--client", c.clientId }
    for _ = 1, 8 do
      local status, body = get()
      assert.equal(401, status, body)
    end
  end)

end)

-- The same limits and revocation news on one Redis and on a Redis Cluster
-- (3 masters, 3 replicas; redis.cluster_urls names the masters).
for _, backend in ipairs { "one Redis", "a Redis Cluster" } do
  describe("rate limits on " .. backend, function()
    local cluster
    local suffix = cluster_backend(backend) and "_cluster" or ""

    setup(function()
      if cluster_backend(backend) then cluster = redis_cluster.start { masters = 3, replicas = 1 } end
    end)
    teardown(function()
      stack.cleanup()
      if cluster then cluster.stop() end
    end)
    after_each(function() stack.cleanup() end)

    -- Settings that put an instance on this backend.
    local function on_backend(set)
      if cluster then set["redis.cluster_urls"] = cluster.urls end
      return set
    end

    it("shares one budget between two instances", function()
      local url = stack.migrated_database("ratelimit")
      local set = on_backend { ["api.rate_limit.anonymous_per_minute"] = 10 }
      local a = stack.start_sgw { name = "rl_a" .. suffix, database_url = url, set = set }
      local b = stack.start_sgw { name = "rl_b" .. suffix, database_url = url, set = set, migrate = false }

      local ok, limited, last_remaining = 0, 0, nil
      for i = 1, 12 do
        -- alternate instances; every third request goes to a path that does not exist
        local inst = i % 2 == 1 and a or b
        local path = i % 3 == 0 and "/api/v1/no-such-thing" or "/api/v1/openapi.json"
        local status, body, headers = inst:request("GET", path)
        local limit, remaining, reset = limits_of(status, headers)
        assert.equal(10, limit)
        if status == 429 then
          limited = limited + 1
          local retry = assert_rate_limited(status, body, headers)
          assert.is_true(retry <= 6, "one request comes back every 6 s, Retry-After " .. retry)
          assert.equal(0, remaining)
        else
          ok = ok + 1
          assert.equal(i % 3 == 0 and 404 or 200, status)
          if last_remaining then assert.equal(last_remaining - 1, remaining) end
          last_remaining = remaining
        end
        assert.is_true(reset >= 1 and reset <= 60)
      end
      assert.equal(10, ok)
      assert.equal(2, limited)
      assert.equal(0, last_remaining)
      -- The checks waited on a worker's loop, not on the socket threads.
      assert.is_true((metric(a, "sgw_requests_migrated_total") or 0) >= 6)
    end)

    local has_cli = io.open(stack.repo_root() .. "/handlers/cli/client.lua")
    if has_cli then has_cli:close() end
    local test_clients = has_cli and it or pending

    test_clients("limits each API client on its own, apart from anonymous traffic", function()
      local inst = stack.start_sgw {
        name = "rl_clients" .. suffix,
        set = on_backend { ["api.rate_limit.anonymous_per_minute"] = 2, ["api.rate_limit.per_minute"] = 100 },
      }
      local function run(argv) return cli(inst, argv) end
      local company = run { "company", "create", "--name", "A" }.companyId
      local function client(extra)
        local argv = { "client", "create", "--company", company, "--environment", "test", "--scopes", "accounts:read" }
        for _, v in ipairs(extra or {}) do argv[#argv + 1] = v end
        return run(argv).apiKey
      end
      local limited_key, default_key = client { "--rate-limit", "5" }, client()

      local function get(key)
        return inst:request("GET", "/api/v1/social-accounts", { headers = key and { ["X-Api-Key"] = key } or nil })
      end

      for i = 1, 5 do
        local status, _, headers = get(limited_key)
        assert.equal(200, status)
        local limit, remaining = limits_of(status, headers)
        assert.same({ 5, 5 - i }, { limit, remaining })
      end
      assert_rate_limited(get(limited_key))

      -- Another client and anonymous requests have budgets of their own.
      local status, _, headers = get(default_key)
      assert.equal(200, status)
      local limit, remaining = limits_of(status, headers)
      assert.same({ 100, 99 }, { limit, remaining })
      for i = 1, 2 do
        status, _, headers = inst:request("GET", "/api/v1/openapi.json")
        assert.equal(200, status)
        limit, remaining = limits_of(status, headers)
        assert.same({ 2, 2 - i }, { limit, remaining })
      end
      assert_rate_limited(inst:request("GET", "/api/v1/openapi.json"))
      -- ...and spending them leaves the clients where they were.
      assert_rate_limited(get(limited_key))
      status = get(default_key)
      assert.equal(200, status)
    end)

    it("revokes a busy client at once on every instance", function()
      local url = stack.migrated_database("rl_revoke" .. suffix)
      local set = on_backend { ["api.credential_cache_seconds"] = 600 }
      local a = stack.start_sgw { name = "rl_rev_a" .. suffix, database_url = url, set = set }
      local b = stack.start_sgw { name = "rl_rev_b" .. suffix, database_url = url, set = set, migrate = false }
      local company = cli(a, { "company", "create", "--name", "Busy" }).companyId
      local c = cli(a, { "client", "create", "--company", company, "--environment", "test",
        "--scopes", "accounts:read", "--rate-limit", "1000000" })
      local function get(inst)
        return inst:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } })
      end
      for _ = 1, 30 do
        for _, inst in ipairs { a, b } do
          local status, _, headers = get(inst)
          assert.equal(200, status)
          assert.is_true(tonumber(headers["x-ratelimit-remaining"]) < 1000000, "counted in Redis")
        end
      end
      cli(a, { "client", "revoke", "--client", c.clientId })
      for _, inst in ipairs { a, b } do
        for _ = 1, 8 do assert.equal(401, (get(inst))) end
      end
    end)

    if not cluster_backend(backend) then return end

    -- A client of its own with a small limit, and the slot its rate-limit
    -- state lives in (the {rl<n>} tag of lib/ratelimit.lua).
    local function limited_client(inst, limit)
      local company = cli(inst, { "company", "create", "--name", "Slots" }).companyId
      local c = cli(inst, { "client", "create", "--company", company, "--environment", "test",
        "--scopes", "accounts:read", "--rate-limit", tostring(limit) })
      local tag = "{rl" .. cluster.slot_of("client:" .. c.clientId) % 16 .. "}"
      c.slot = cluster.slot_of(tag)
      c.get = function()
        return inst:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } })
      end
      return c
    end

    it("is checked by sgw doctor: reachable, every slot covered", function()
      local inst = stack.start_sgw { name = "rl_doctor", set = on_backend {} }
      local _, out = inst:command { "doctor", "--json" }
      local report = assert(cjson.decode(out:match("{.*}")), out)
      local redis_check
      for _, c in ipairs(report.checks) do if c.name == "redis" then redis_check = c end end
      assert.same({ name = "redis", status = "ok", message = "Redis Cluster reachable, every slot covered (3 masters)" },
        redis_check)
    end)

    it("keeps the limit while the slot of a client moves to another node (ASK, then MOVED)", function()
      local inst = stack.start_sgw { name = "rl_moved", set = on_backend {} }
      local c = limited_client(inst, 6)
      for i = 1, 2 do
        local status, _, headers = c.get()
        assert.equal(200, status)
        assert.equal(tostring(6 - i), headers["x-ratelimit-remaining"])
      end
      local source = cluster.master_of(c.slot)
      local target
      for _, n in ipairs(cluster.alive()) do
        local m = cluster.cli(n.port, "role"):match("^master") and n.port ~= source.port and n
        if m and not target then target = m end
      end
      local target_id = cluster.node_id(target.port)
      cluster.cli(target.port, "cluster", "setslot", c.slot, "importing", source.id)
      cluster.cli(source.port, "cluster", "setslot", c.slot, "migrating", target_id)
      local keys = {}
      for k in cluster.cli(source.port, "cluster", "getkeysinslot", c.slot, 100):gmatch("[^\n]+") do keys[#keys + 1] = k end
      assert.is_true(#keys >= 1, "the client's state is in the slot")
      cluster.cli(source.port, "migrate", "127.0.0.1", target.port, "", 0, 5000, "keys", table.unpack(keys))
      -- Keys gone from the source, slot not handed over: the source answers ASK.
      local status, _, headers = c.get()
      assert.equal(200, status)
      assert.equal("3", headers["x-ratelimit-remaining"])
      for _, n in ipairs(cluster.alive()) do
        if cluster.cli(n.port, "role"):match("^master") then
          cluster.cli(n.port, "cluster", "setslot", c.slot, "node", target_id)
        end
      end
      -- Now the source answers MOVED, and sgw follows the new map.
      for want = 2, 0, -1 do
        status, _, headers = c.get()
        assert.equal(200, status)
        assert.equal(tostring(want), headers["x-ratelimit-remaining"])
      end
      assert.equal(429, (c.get()))
      assert.equal(target.port, cluster.master_of(c.slot).port)
    end)

    it("fails open for the slots of a dead master, then counts on the promoted replica", function()
      local inst = stack.start_sgw { name = "rl_failover", set = on_backend { ["redis.retry_interval_ms"] = 100 } }
      local c = limited_client(inst, 30)
      for _ = 1, 3 do assert.equal(200, (c.get())) end
      local master = cluster.master_of(c.slot)
      cluster.kill(master)
      -- Until the cluster has promoted the replica: allowed, uncounted, never a 5xx.
      local statuses = {}
      stack.eventually(function()
        local status, _, headers = c.get()
        statuses[#statuses + 1] = status
        assert.equal(200, status)
        local m = cluster.master_of(c.slot)
        return m and m.port ~= master.port and headers["x-ratelimit-remaining"] ~= "30"
      end, 20, 0.05, "counted again on the promoted replica")
      cluster.wait_ok("the cluster is whole again")
      local _, _, headers = c.get()
      local remaining = tonumber(headers["x-ratelimit-remaining"])
      assert.is_true(remaining < 30)
      local _, _, again = c.get()
      -- One less, or as many when a request's worth came back meanwhile (one
      -- every 2 s at 30 a minute).
      local left = tonumber(again["x-ratelimit-remaining"])
      assert.is_true(left == remaining - 1 or left == remaining, tostring(left))
      -- Every worker counts, not only those that served a request during
      -- the failover: requests sent together reach workers whose last word
      -- from Redis was before it, and none of them fails open.
      local _, out = stack.sh("seq 8 | xargs -P 8 -I{} curl -s -o /dev/null -D - -H "
        .. stack.shell_quote("X-Api-Key: " .. c.apiKey) .. " "
        .. stack.shell_quote(inst.base_url .. "/api/v1/social-accounts"))
      local answers = 0
      for v in out:lower():gmatch("x%-ratelimit%-remaining: (%d+)") do
        answers = answers + 1
        assert.is_true(tonumber(v) < 30, "counted (a request that fails open shows the whole limit left)")
      end
      assert.equal(8, answers)
    end)
  end)
end

-- Rate limits against the real stack: one budget shared by two instances,
-- fail open while Redis is down (and limits again once it is back), per-client
-- limits independent of each other and of anonymous traffic.
--
-- Anonymous requests are limited per source address and every spec talks from
-- 127.0.0.1: on the shared test Redis, each database gets its own
-- redis.namespace (spec/support/stack.lua), which keeps specs apart.
local stack = require "stack"
local cjson = require "cjson.safe"

local q = stack.shell_quote

-- A private redis-server on a free port: start(), kill() (like a crash), start() again.
local function private_redis()
  local port = stack.free_port()
  local dir = stack.build_dir() .. "/test-logs/ratelimit-redis-" .. port
  local r = { port = port, url = "redis://127.0.0.1:" .. port }
  function r.start()
    os.execute("mkdir -p " .. q(dir))
    local code, out = stack.sh("redis-server --port " .. port .. " --bind 127.0.0.1 --daemonize yes"
      .. " --pidfile " .. q(dir .. "/redis.pid") .. " --logfile " .. q(dir .. "/redis.log")
      .. " --dir " .. q(dir) .. " --save '' --appendonly no")
    assert(code == 0, "redis-server did not start: " .. out)
    stack.eventually(function()
      local _, pong = stack.sh("redis-cli -p " .. port .. " ping")
      return pong:match("PONG")
    end, 10, 0.05, "redis answers PING")
    local f = assert(io.open(dir .. "/redis.pid"))
    r.pid = tonumber(f:read("a"):match("%d+"))
    f:close()
  end
  function r.kill()
    if not r.pid then return end
    os.execute("kill -KILL " .. r.pid)
    stack.eventually(function() return stack.sh("kill -0 " .. r.pid) ~= 0 end, 10, 0.05, "redis gone")
    r.pid = nil
  end
  return r
end

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
    local r = private_redis()
    r.start()
    redis_servers[#redis_servers + 1] = r
    return r
  end

  after_each(function()
    stack.cleanup()
    for _, r in ipairs(redis_servers) do r.kill() end
    redis_servers = {}
  end)

  it("shares one budget between two instances", function()
    local url = stack.fresh_database("ratelimit")
    local set = { ["api.rate_limit.anonymous_per_minute"] = 10 }
    local a = stack.start_sgw { name = "rl_a", database_url = url, set = set }
    local b = stack.start_sgw { name = "rl_b", database_url = url, set = set, migrate = false }

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
    -- The checks went to Redis in the pipelined batches, not worker by worker.
    assert.is_true((metric(a, "sgw_redis_pipelined_calls_total") or 0) >= 6)
    assert.is_true((metric(a, "sgw_requests_deferred_total") or 0) >= 6)
  end)

  it("runs a request again after its pipelined call without repeating what it logged", function()
    local inst = stack.start_sgw { name = "rl_rerun", set = { ["api.rate_limit.anonymous_per_minute"] = 100 } }
    -- Malformed: refused without a database lookup, before the rate limit.
    local status, _, headers = inst:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = "not-a-key" } })
    assert.equal(401, status)
    assert.equal("99", headers["x-ratelimit-remaining"])
    assert.is_true((metric(inst, "sgw_requests_deferred_total") or 0) >= 1)
    local lines = 0
    for line in inst:log():gmatch("[^\n]+") do
      if line:find('"event":"auth_refused"', 1, true) and line:find(headers["x-request-id"], 1, true) then
        lines = lines + 1
      end
    end
    assert.equal(1, lines)
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

  local has_cli = io.open(stack.repo_root() .. "/handlers/cli/client.lua")
  if has_cli then has_cli:close() end
  local test_clients = has_cli and it or pending

  test_clients("limits each API client on its own, apart from anonymous traffic", function()
    local inst = stack.start_sgw {
      name = "rl_clients",
      set = { ["api.rate_limit.anonymous_per_minute"] = 2, ["api.rate_limit.per_minute"] = 100 },
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
end)

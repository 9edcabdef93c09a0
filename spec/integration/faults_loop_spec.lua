-- Faults under load, seen from the API, now that request and job workers
-- run event loops of many coroutines: PostgreSQL restarted while several
-- connections keep sending a steady mix of requests (503 with Retry-After
-- while it is down, never 500 nor a hang; the same sgw recovers by itself;
-- no post lost or made twice; scheduled publishing resumes, once per post);
-- Redis restarted under load (requests keep being served, the rate limit
-- fails open and limits again once Redis is back, a revoked key stops
-- working at once); a handler that never yields back to its worker's loop
-- (stopped at its budget; the requests queued behind it are answered).
--
-- Waiting longer than database.pool_wait_ms for a pool connection (503) is
-- requests_wait_spec's; a PostgreSQL outage on every kind of endpoint, one
-- request at a time, is outage_spec's.
local stack = require "stack"
local own_services = require "own_services"
local comment_stack = require "comment_stack"
local steady_load = require "steady_load"
local fixture_root = require "fixture_root"
local cjson = require "cjson.safe"

local iso = stack.iso

local function is_2xx(status) return type(status) == "number" and status >= 200 and status < 300 end

-- Answers of the load as "name: status" counts, for failure messages.
local function summary(answers)
  local counts, keys = {}, {}
  for _, a in ipairs(answers) do
    local k = a.name .. ": " .. tostring(a.status or a.error)
    if not counts[k] then keys[#keys + 1] = k end
    counts[k] = (counts[k] or 0) + 1
  end
  table.sort(keys)
  local out = {}
  for _, k in ipairs(keys) do out[#out + 1] = k .. " x" .. counts[k] end
  return table.concat(out, ", ")
end

-- True when every client has answers of every name in `names` that match
-- `want` and started at or after `since`.
local function each_client_saw(answers, clients, names, since, want)
  local seen = {}
  for _, a in ipairs(answers) do
    if a.started >= since and want(a) then seen[a.client .. " " .. a.name] = true end
  end
  for c = 1, clients do
    for _, name in ipairs(names) do
      if not seen[c .. " " .. name] then return false, "client " .. c .. " has no such answer to " .. name end
    end
  end
  return true
end

describe("faults under load", function()
  teardown(function()
    steady_load.stop_all()
    stack.cleanup()
  end)

  describe("PostgreSQL restarted", function()
    local pg, env, t, post_id
    local CLIENTS, BUDGET_MS = 4, 5000

    setup(function()
      pg = own_services.postgres("faults_loop", "sgw_faults_loop")
      env = comment_stack.start({ name = "faults_loop_pg", database_url = pg.url, set = {
        ["http.workers"] = 2, ["jobs.workers"] = 2, ["lua.handler_budget_ms"] = BUDGET_MS } })
      t = comment_stack.live_tenant(env, "Restart Co")
      post_id = t.publish_text("Published before the restart")
    end)

    teardown(function()
      steady_load.stop_all()
      comment_stack.stop()
      if pg then pg.purge() end
    end)

    -- Sends a post (publishing: a table) with Idempotency-Key `key`.
    local function create(message, publishing, key)
      return t.api("POST", "/api/v1/posts", { targets = { { socialAccountId = t.fb.id, platform = "facebook" } },
        content = { type = "text", message = message }, publishing = publishing }, { ["Idempotency-Key"] = key })
    end

    local function scheduled(message, at)
      local status, body = create(message, { mode = "scheduled", scheduledAt = iso(at) }, "sched-" .. message:gsub("%s", "-"))
      assert(status == 202, cjson.encode(body))
      return body.resource.postId
    end

    local function times_published(message)
      local n = 0
      for _, p in ipairs(env.fake.published(t.page.id).data or {}) do
        if p.message == message then n = n + 1 end
      end
      return n
    end

    it("answers 503 while it is down, recovers by itself, and loses and duplicates nothing", function()
      local key_header = { ["X-Api-Key"] = t.key }
      local later = iso(stack.now() + 3600)
      local names = { "create", "list posts", "list comments", "accounts" }
      local load = steady_load.start(env.sgw.base_url, { clients = CLIENTS, timeout = BUDGET_MS / 1000 + 5, requests = {
        { name = "create", method = "POST", path = "/api/v1/posts", headers = key_header, idempotent = true,
          body = { targets = { { socialAccountId = t.fb.id, platform = "facebook" } },
            content = { type = "text", message = "{key}" }, publishing = { mode = "scheduled", scheduledAt = later } } },
        { name = "list posts", method = "GET", path = "/api/v1/posts?limit=5", headers = key_header },
        { name = "list comments", method = "GET", path = "/api/v1/posts/" .. post_id .. "/comments", headers = key_header },
        { name = "accounts", method = "GET", path = "/api/v1/social-accounts", headers = key_header },
      } })
      load.wait_for(function(answers)
        return each_client_saw(answers, CLIENTS, names, 0, function(a) return is_2xx(a.status) end)
      end, 30, "every client to be answered on every endpoint")

      -- One post falls due while PostgreSQL is down, one after it is back.
      local due_during, due_after = stack.now() + 4, stack.now() + 9
      local during_id = scheduled("Due during the restart", due_during)
      local after_id = scheduled("Due after the restart", due_after)

      pg.stop()
      local stopped = stack.now()
      load.wait_for(function(answers)
        return stack.now() > due_during + 0.5 and each_client_saw(answers, CLIENTS, names, stopped,
          function(a) return a.status == 503 end)
      end, 30, "503 on every endpoint for every client, and the first post due")
      pg.start()
      local started = stack.now()

      -- The same sgw serves every endpoint again, every client sees it.
      load.wait_for(function(answers)
        return each_client_saw(answers, CLIENTS, names, started, function(a) return is_2xx(a.status) end)
      end, 30, "every endpoint to answer 2xx again to every client")
      local answers = load.stop()
      assert.is_true(env.sgw:alive(), "sgw survived the restart")

      -- Never a 500, never a hang: 2xx or 503, each within the request budget.
      local unavailable = 0
      for _, a in ipairs(answers) do
        local what = a.name .. " (client " .. a.client .. ", #" .. a.n .. ")"
        assert.is_nil(a.error, what .. ": no answer: " .. tostring(a.error))
        assert.is_true(a.ended - a.started < BUDGET_MS / 1000 + 1,
          what .. " took " .. (a.ended - a.started) .. " s")
        if a.status == 503 then
          unavailable = unavailable + 1
          assert.matches("^%d+$", a.retry_after or "", what .. " without Retry-After")
          assert.is_true(tonumber(a.retry_after) >= 1, what)
          assert.are.equal("application/problem+json", a.content_type, what)
          assert.are.equal("service_unavailable", a.code, what)
          assert.are.equal(503, a.problem_status, what)
        else
          assert.is_true(is_2xx(a.status), what .. " answered " .. tostring(a.status) .. "; all: " .. summary(answers))
        end
      end
      assert.is_true(unavailable >= CLIENTS * #names, summary(answers))

      -- Every create answered 2xx made exactly its one post; one refused
      -- made at most one, and sent again with its key it makes exactly one.
      local function made()
        local out = {}
        local rows = env.sql("SELECT content->>'message' || ' ' || id FROM posts WHERE content->>'message' LIKE '"
          .. load.prefix .. "-%'")
        for line in rows:gmatch("[^\n]+") do
          local key, id = line:match("^(%S+) (%S+)$")
          out[key] = out[key] or {}
          table.insert(out[key], id)
        end
        return out
      end
      local posts, answered, retried = made(), {}, 0
      for _, a in ipairs(answers) do
        if a.name == "create" then
          answered[a.key] = true
          local ids = posts[a.key] or {}
          if a.status == 503 then
            assert.is_true(#ids <= 1, a.key .. " made " .. #ids .. " posts")
            local status, body = env.sgw:json("POST", "/api/v1/posts", { body = a.request,
              headers = { ["X-Api-Key"] = t.key, ["Idempotency-Key"] = a.key, ["Content-Type"] = "application/json" } })
            assert.is_true(is_2xx(status), a.key .. " sent again: " .. tostring(status) .. " " .. cjson.encode(body))
            retried = retried + 1
          else
            assert.are.same({ a.id }, ids, a.key)
          end
        end
      end
      assert.is_true(retried >= CLIENTS, "creates refused while PostgreSQL was down: " .. retried)
      posts = made()
      for key in pairs(answered) do
        assert.are.equal(1, #(posts[key] or {}), key .. " after sending the refused ones again")
      end
      for key in pairs(posts) do assert.is_true(answered[key], key .. " was never sent") end

      -- Scheduled publishing resumed: each due post published once, as the
      -- fake platform's own record shows.
      for id, message in pairs({ [during_id] = "Due during the restart", [after_id] = "Due after the restart" }) do
        stack.eventually(function()
          local _, post = t.api("GET", "/api/v1/posts/" .. id)
          return post and post.status == "published", post and post.status
        end, 60, 0.1, message .. " to be published")
        assert.are.equal(1, times_published(message), message)
      end
      assert.are.equal(1, times_published("Published before the restart"))
    end)
  end)

  describe("Redis restarted", function()
    local redis, sgw, flow, victim, limited
    local CLIENTS = 3

    setup(function()
      redis = own_services.redis()
      redis.start()
      sgw = stack.start_sgw { name = "faults_loop_redis", redis_url = redis.url,
        set = { ["http.workers"] = 2, ["redis.retry_interval_ms"] = 100 } }
      local company = stack.cli(sgw, { "company", "create", "--name", "Redis Co" }).companyId
      local function client(limit)
        return stack.cli(sgw, { "client", "create", "--company", company, "--environment", "test",
          "--scopes", "accounts:read posts:read", "--rate-limit", tostring(limit) })
      end
      flow, victim, limited = client(1000000), client(1000000), client(3)
    end)

    teardown(function()
      steady_load.stop_all()
      stack.cleanup()
      if redis then redis.kill() end
    end)

    local function get(client)
      return sgw:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = client.apiKey } })
    end

    local function assert_rate_limited(status, body, headers)
      assert.are.equal(429, status, body)
      assert.are.equal("rate_limited", cjson.decode(body).code)
      assert.matches("^%d+$", headers["retry-after"] or "")
    end

    it("keeps answering while it restarts, then limits again, and a revoked key stops working at once", function()
      local function from(client) return { ["X-Api-Key"] = client.apiKey } end
      local names = { "accounts", "posts", "victim" }
      local load = steady_load.start(sgw.base_url, { clients = CLIENTS, requests = {
        { name = "accounts", method = "GET", path = "/api/v1/social-accounts", headers = from(flow) },
        { name = "posts", method = "GET", path = "/api/v1/posts?limit=5", headers = from(flow) },
        { name = "victim", method = "GET", path = "/api/v1/social-accounts", headers = from(victim) },
      } })
      local function answered_after(since, list)
        return function(answers)
          return each_client_saw(answers, CLIENTS, list or names, since, function(a) return a.status ~= nil end)
        end
      end
      load.wait_for(answered_after(0), 30, "every client to be answered")
      for _ = 1, 3 do assert.are.equal(200, (get(limited))) end
      assert_rate_limited(get(limited))

      redis.stop()
      local down = stack.now()
      load.wait_for(answered_after(down), 30, "every client to be answered while Redis is down")
      -- The rate limit fails open (README, Rate limits): served, the
      -- allowance shown full, and /readyz says degraded.
      local status, body, headers = get(limited)
      assert.are.equal(200, status, body)
      assert.are.equal("3", headers["x-ratelimit-remaining"])
      status, body = sgw:admin("GET", "/readyz")
      assert.are.equal(503, status)
      assert.truthy(body:find('"redis":"unreachable"', 1, true), body)

      redis.start()
      stack.eventually(function() return (sgw:admin("GET", "/readyz")) == 200 end, 15, 0.05, "/readyz to be ready again")
      stack.eventually(function() return (get(limited)) == 429 end, 15, 0.05, "the limited client to get 429 again")
      assert_rate_limited(get(limited))

      -- Revocation is immediate (README, Authentication), for every worker
      -- and connection, though each had the key cached before Redis went away.
      local revoking = stack.now()
      stack.cli(sgw, { "client", "revoke", "--client", victim.clientId })
      local revoked = stack.now()
      load.wait_for(answered_after(revoked, { "victim" }), 30, "every client to send the revoked key again")
      local answers = load.stop()
      assert.are.equal(401, (get(victim)))
      assert.are.equal(200, (get(flow)))
      assert.is_true(sgw:alive())

      for _, a in ipairs(answers) do
        local what = a.name .. " (client " .. a.client .. ", #" .. a.n .. ")"
        assert.is_nil(a.error, what .. ": no answer: " .. tostring(a.error))
        if a.name == "victim" and a.started >= revoked then
          assert.are.equal(401, a.status, what .. " after the revocation; all: " .. summary(answers))
        elseif a.name ~= "victim" or a.ended < revoking then
          assert.are.equal(200, a.status, what .. "; all: " .. summary(answers))
        else
          assert.is_true(a.status == 200 or a.status == 401, what .. " during the revocation: " .. a.status)
        end
      end
    end)
  end)

  describe("a handler that never yields back to its worker's loop", function()
    local BUDGET_MS = 1000

    it("is stopped at its budget, and the requests queued behind it are answered", function()
      local root = fixture_root.create("faults_loop")
      local sgw = stack.start_sgw { name = "faults_loop_budget", set = { ["lua.root"] = root, ["http.workers"] = 1,
        ["lua.handler_budget_ms"] = BUDGET_MS, ["api.rate_limit.anonymous_per_minute"] = 1000000 } }
      -- The loop starts after a query moved the request to the worker's thread.
      local looping = steady_load.burst(sgw, 1, "/test/loop?after_query=1")
      stack.eventually(function()
        local _, text = sgw:admin("GET", "/metrics")
        local n = text and tonumber(text:match("\nsgw_http_inflight_requests (%d+)"))
        return n and n >= 1
      end, 10, 0.01, "the looping request to be in flight")
      local queued = steady_load.burst(sgw, 6, "/test/mixed?sleep=0")
      local statuses, seconds = looping(20)
      assert.are.same({ "500" }, statuses)
      assert.is_true(seconds[1] < BUDGET_MS / 1000 + 1.5, "stopped after " .. seconds[1] .. " s")
      -- They waited for the worker's loop, not for their own budget: each is
      -- answered once the loop is stopped.
      statuses, seconds = queued(20)
      assert.are.same({ "200", "200", "200", "200", "200", "200" }, statuses)
      for _, took in ipairs(seconds) do
        assert.is_true(took < BUDGET_MS / 1000 + 1.5, "answered after " .. took .. " s")
      end
      assert.are.same({ "200" }, steady_load.burst(sgw, 1, "/test/mixed?sleep=0")(10))
      assert.are.equal(0, sgw.stop())
    end)
  end)
end)

-- The host foundation against the real stack: routing and bad input as
-- problem documents, handler faults contained, hot reload under load, drain
-- on SIGTERM, configuration errors that name the key.
local stack = require "stack"
local fixture_root = require "fixture_root"
local load = require "load"
local cjson = require "cjson.safe"

local function problem_of(status, body, headers)
  assert.is_truthy(headers["x-request-id"], "every response carries X-Request-Id")
  assert.matches("^req_", headers["x-request-id"])
  assert.are.equal("application/problem+json", headers["content-type"])
  local p = assert(cjson.decode(body), "problem body is JSON")
  assert.are.equal(status, p.status)
  assert.are.equal("/docs/errors#" .. p.code, p.type)
  assert.are.equal(headers["x-request-id"], p.requestId)
  assert.is_string(p.title)
  return p
end

describe("host", function()
  local sgw, root

  setup(function()
    root = fixture_root.create("host")
    sgw = stack.start_sgw {
      name = "host",
      set = {
        ["lua.root"] = root,
        ["lua.handler_budget_ms"] = 300,
        ["lua.memory_limit_mb"] = 48,
        ["http.max_body_bytes"] = 4096,
        ["http.workers"] = 4,
        ["api.rate_limit.anonymous_per_minute"] = 1000000000, -- never in the way of the load below
      },
    }
  end)

  teardown(function() load.stop_all(); stack.cleanup() end)

  describe("routing", function()
    it("passes path parameters, query and JSON body to the handler", function()
      local status, body, headers = sgw:json("POST", "/test/items/it_1/notes/n%202?a=1&b=x", {
        body = { hello = "world" },
      })
      assert.are.equal(201, status)
      assert.are.same({ itemId = "it_1", noteId = "n 2" }, body.params)
      assert.are.same({ a = "1", b = "x" }, body.query)
      assert.are.same({ hello = "world" }, body.body)
      assert.matches("^req_", headers["x-request-id"])
    end)

    it("answers 404 for unknown paths as a problem document", function()
      local status, body, headers = sgw:request("GET", "/api/v1/nothing-here")
      assert.are.equal(404, status)
      assert.are.equal("not_found", problem_of(404, body, headers).code)
    end)

    it("answers 405 with Allow for a known path and the wrong method", function()
      local status, body, headers = sgw:request("DELETE", "/api/v1/openapi.json")
      assert.are.equal(405, status)
      assert.are.equal("GET", headers["allow"])
      assert.are.equal("method_not_allowed", problem_of(405, body, headers).code)
    end)

    it("gives every request its own id", function()
      local _, _, h1 = sgw:request("GET", "/api/v1/openapi.json")
      local _, _, h2 = sgw:request("GET", "/api/v1/openapi.json")
      assert.are_not.equal(h1["x-request-id"], h2["x-request-id"])
    end)

    it("serves the OpenAPI 3.1 document", function()
      local status, doc = sgw:json("GET", "/api/v1/openapi.json")
      assert.are.equal(200, status)
      assert.are.equal("3.1.0", doc.openapi)
      assert.is_table(doc.paths["/api/v1/openapi.json"])
    end)
  end)

  describe("bad input", function()
    it("refuses a body that is not JSON with 415", function()
      local status, body, headers = sgw:request("POST", "/test/items/a/notes/b", {
        headers = { ["Content-Type"] = "text/plain" }, body = "hello",
      })
      assert.are.equal(415, status)
      assert.are.equal("unsupported_media_type", problem_of(415, body, headers).code)
    end)

    it("refuses malformed JSON with 400 invalid_json", function()
      local status, body, headers = sgw:request("POST", "/test/items/a/notes/b", {
        headers = { ["Content-Type"] = "application/json" }, body = '{"a": ',
      })
      assert.are.equal(400, status)
      assert.are.equal("invalid_json", problem_of(400, body, headers).code)
    end)

    it("refuses a body over the limit from its Content-Length with 413", function()
      local status, body, headers = sgw:request("POST", "/test/items/a/notes/b", {
        headers = { ["Content-Type"] = "application/json" }, body = string.rep(" ", 5000) .. "{}",
      })
      assert.are.equal(413, status)
      assert.are.equal("payload_too_large", problem_of(413, body, headers).code)
    end)

    it("refuses a chunked body that grows past the limit with 413", function()
      local code, out = stack.sh("head -c 200000 /dev/zero | curl -s -o /dev/null -w '%{http_code}' "
        .. "-X POST -H 'Content-Type: application/json' -H 'Transfer-Encoding: chunked' -H 'Expect:' "
        .. "--data-binary @- " .. sgw.base_url .. "/test/items/a/notes/b")
      assert.are.equal(0, code)
      assert.are.equal("413", out)
    end)

    it("refuses oversized headers with 431", function()
      local status, body, headers = sgw:request("GET", "/api/v1/openapi.json", {
        headers = { ["X-Padding"] = string.rep("a", 20000) },
      })
      assert.are.equal(431, status)
      assert.are.equal("request_header_fields_too_large", problem_of(431, body, headers).code)
    end)

    it("cuts off a client that stops sending", function()
      -- Announces 100 bytes, sends 10, then waits: the connection must not be
      -- held forever, and the server keeps serving others meanwhile.
      local socket = require "socket"
      local c = assert(socket.tcp())
      c:settimeout(5)
      assert(c:connect("127.0.0.1", sgw.http_port))
      c:send("POST /test/items/a/notes/b HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        .. "Content-Length: 100\r\n\r\n{\"a\":1,   ")
      local status = sgw:request("GET", "/api/v1/openapi.json")
      assert.are.equal(200, status)
      c:close()
    end)
  end)

  describe("handler faults", function()
    it("turns an error into a 500 problem without internals and logs the traceback", function()
      local status, body, headers = sgw:request("GET", "/test/boom")
      assert.are.equal(500, status)
      local p = problem_of(500, body, headers)
      assert.are.equal("internal_error", p.code)
      assert.is_nil(body:find("boom", 1, true), "the cause does not leak into the answer")
      stack.eventually(function()
        return sgw:log():find(headers["x-request-id"], 1, true) and sgw:log():find("boom: a fixture", 1, true)
      end, 5, 0.1, "traceback logged with the request id")
      assert.truthy(sgw:log():find("handlers/test/boom.lua", 1, true), "the log names the file")
    end)

    it("stops an endless loop at the time budget and keeps serving", function()
      local status, body, headers = sgw:request("GET", "/test/loop")
      assert.are.equal(500, status)
      problem_of(500, body, headers)
      status = sgw:request("GET", "/test/loop?sneaky=1")
      assert.are.equal(500, status)
      assert.are.equal(200, (sgw:request("GET", "/test/version")))
    end)

    it("stops a loop inside a coroutine of the handler's own, also when the handler ignores the error", function()
      for _, how in ipairs { "resume", "wrap" } do
        local status, body, headers = sgw:request("GET", "/test/loop?in_coroutine=" .. how)
        assert.are.equal(500, status, how)
        assert.is_nil(body:find("carried_on", 1, true), how)
        problem_of(500, body, headers)
      end
      assert.are.equal(200, (sgw:request("GET", "/test/version")))
    end)

    it("leaves the coroutine library as Lua has it for handlers", function()
      local status, body = sgw:json("GET", "/test/coroutines")
      assert.are.equal(200, status)
      assert.are.same({ 2, 20, "done" }, body.wrap)
      assert.are.same({ true, 5, "pair" }, body.resume1)
      assert.are.equal("suspended", body.status1)
      assert.are.same({ true, "back", true }, body.resume2)
      assert.are.equal("dead", body.status2)
      assert.are.same({ false, "cannot resume dead coroutine" }, body.dead)
      assert.are.same({ false, 7 }, body.error_table)
      assert.is_false(body.wrap_error[1])
      assert.matches("coroutines%.lua:%d+: boom$", body.wrap_error[2])
      assert.is_false(body.bad_argument[1])
      assert.are.equal("bad argument #1 to 'coroutine.resume' (thread expected, got string)", body.bad_argument[2])
    end)

    it("stops an endless loop on the worker's thread, after a query moved the request there", function()
      local status, body, headers = sgw:request("GET", "/test/loop?after_query=1")
      assert.are.equal(500, status)
      problem_of(500, body, headers)
      assert.are.equal(200, (sgw:request("GET", "/test/version")))
    end)

    it("stops a handler whose query outlasted the budget as soon as the query returns", function()
      local status, body, headers = sgw:request("GET", "/test/loop?sleep=0.6")
      assert.are.equal(500, status)
      assert.is_nil(body:find("carried_on", 1, true), "the handler did not carry on past its budget")
      problem_of(500, body, headers)
    end)

    it("stops a job that never ends, and the runner carries on with other jobs", function()
      stack.psql(sgw.database_url, "INSERT INTO jobs (kind, max_attempts) VALUES ('test_loop', 1); NOTIFY sgw_jobs")
      stack.eventually(function()
        return stack.psql(sgw.database_url, "SELECT status FROM jobs WHERE kind = 'test_loop'") == "dead"
      end, 20, 0.1, "the looping job ended dead")
      local err = stack.psql(sgw.database_url, "SELECT last_error FROM jobs WHERE kind = 'test_loop'")
      assert.truthy(err:find("time budget", 1, true), err)
      assert.are.equal(200, (sgw:request("GET", "/test/version")))
    end)

    it("stops a handler at the memory ceiling and keeps serving", function()
      local status, body, headers = sgw:request("GET", "/test/hog")
      assert.are.equal(500, status)
      problem_of(500, body, headers)
      for _ = 1, 10 do
        assert.are.equal(200, (sgw:request("GET", "/test/version")))
      end
    end)
  end)

  describe("inline execution and migration", function()
    -- Requests run on the socket thread that read them until their first
    -- blocking call, which moves them to their worker's own thread.
    local inst

    setup(function()
      inst = stack.start_sgw {
        name = "inline",
        set = {
          ["lua.root"] = root,
          ["bench.enabled"] = true,
          ["http.threads"] = 2,
          ["http.workers"] = 24,
          ["api.rate_limit.anonymous_per_minute"] = 1000000000, -- never in the way of the load below
        },
      }
    end)

    teardown(function() inst:stop(20) end)

    local function counters()
      local status, text = inst:admin("GET", "/metrics")
      assert.are.equal(200, status)
      local function get(name)
        return tonumber(text:match("\n" .. name .. " (%d+)")) or 0
      end
      return { inline = get("sgw_requests_inline_total"), migrated = get("sgw_requests_migrated_total") }
    end

    local function exists(path)
      local f = io.open(path)
      if f then f:close() end
      return f ~= nil
    end

    it("answers a request that never waits on the socket thread", function()
      local before = counters()
      for i = 1, 10 do
        local status, body = inst:json("POST", "/bench/echo", { body = { message = "hello", n = i } })
        assert.are.equal(200, status)
        assert.are.same({ message = "hello", n = i, echo = true }, body)
      end
      local after = counters()
      assert.is_true(after.inline - before.inline >= 10, "inline: " .. before.inline .. " -> " .. after.inline)
      assert.are.equal(before.migrated, after.migrated, "the echo never migrates")
    end)

    it("moves a request to its worker at a database call; the socket threads keep answering", function()
      local before = counters()
      local dir = stack.build_dir() .. "/test-roots/" .. stack.unique_name("mixed")
      assert.are.equal(0, (stack.sh("mkdir -p " .. stack.shell_quote(dir))))
      local codes, done = dir .. "/slow.codes", dir .. "/slow.done"
      -- 20 requests that compute, wait 1.5 s in PostgreSQL, compute again.
      local code = stack.sh("((for i in $(seq 20); do curl -s -o /dev/null -w '%{http_code}\\n' '"
        .. inst.base_url .. "/test/mixed?sleep=1.5' >> " .. stack.shell_quote(codes) .. " & done; wait; touch "
        .. stack.shell_quote(done) .. ") > /dev/null 2>&1 &)")
      assert.are.equal(0, code)
      -- All 20 have reached pg_sleep, each on its worker's thread.
      stack.eventually(function() return counters().migrated - before.migrated >= 20 end, 10, 0.02,
        "20 requests migrated")

      -- With both socket threads free, quick requests keep flowing meanwhile.
      for _ = 1, 50 do
        assert.are.equal(200, (inst:request("GET", "/test/version")))
      end
      assert.is_false(exists(done), "the fast requests finished before the slow ones")

      stack.eventually(function() return exists(done) end, 30, 0.1, "slow requests finished")
      local f = assert(io.open(codes))
      local n = 0
      for line in f:lines() do
        assert.are.equal("200", line)
        n = n + 1
      end
      f:close()
      assert.are.equal(20, n)
    end)
  end)

  describe("hot reload", function()
    it("reloads 20 times under load, refuses a broken edit, and not one request fails", function()
      -- An instance of its own with the default handler budget: the 300 ms
      -- that this spec's loops are stopped at is less than a request may
      -- wait for a core while the load, the reloads and a sanitizer build
      -- share two (one request in 90,000 took 321 ms).
      local sgw = stack.start_sgw {
        name = "host_reload",
        set = { ["lua.root"] = root, ["http.workers"] = 4, ["api.rate_limit.anonymous_per_minute"] = 1000000000 },
      }
      local version_file = root .. "/handlers/test/version.lua"
      local script = stack.build_dir() .. "/test-roots/reload-wrk.lua"
      fixture_root.write(script, [[
done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d non2xx=%d connect=%d read=%d write=%d timeout=%d status=%d\n",
    summary.requests, summary.errors.status, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.timeout, summary.errors.status))
end
]])
      local out_file = stack.build_dir() .. "/test-roots/reload-wrk.out"
      os.remove(out_file)
      local traffic = load.start(sgw.base_url .. "/test/version", { connections = 16, script = script, out = out_file })
      finally(traffic.stop)
      local function answered()
        local _, metrics = sgw:admin("GET", "/metrics")
        local n = 0
        for count in (metrics or ""):gmatch('sgw_http_requests_total{route="/test/version"[^}]*} (%d+)') do
          n = n + tonumber(count)
        end
        return n
      end
      stack.eventually(function() return answered() > 0 end, 10, 0.05, "the load to reach the server")

      -- Each reload lands while requests flow, and the next one waits until
      -- the new version is what the load gets.
      local function served_after_reload(version)
        local before = answered()
        stack.eventually(function()
          local _, body = sgw:json("GET", "/test/version")
          return body and body.version == version and answered() - before >= 100
        end, 20, 0.02, version .. " served under load")
      end
      local refused_seen = false
      for i = 1, 20 do
        if i == 10 then
          fixture_root.write(version_file, "return function() return 200, { version = 'broken' \n")
          local rc, out = sgw:reload()
          assert.are_not.equal(0, rc, "a broken edit is refused")
          assert.truthy(out:find("version.lua", 1, true), "the refusal names the file: " .. out)
          local _, ready = sgw:admin("GET", "/readyz")
          assert.truthy(ready:find("version.lua", 1, true), "/readyz shows the reload error")
          local _, metrics = sgw:admin("GET", "/metrics")
          assert.truthy(metrics:find("sgw_handlers_last_reload_failed 1", 1, true))
          served_after_reload("v9")
          refused_seen = true
        end
        fixture_root.write(version_file, "return function() return 200, { version = 'v" .. i .. "' } end\n")
        local rc, out = sgw:reload()
        assert.are.equal(0, rc, out)
        served_after_reload("v" .. i)
      end
      assert.is_true(refused_seen)

      traffic.stop()
      local f = assert(io.open(out_file))
      local result = f:read("a"):match("RESULT [^\n]+")
      f:close()
      assert.truthy(result, "wrk printed its summary")
      local requests = tonumber(result:match("requests=(%d+)"))
      assert.is_true(requests > 1000, "load ran: " .. result)
      for _, field in ipairs { "non2xx", "connect", "read", "write", "timeout" } do
        assert.are.equal("0", result:match(field .. "=(%d+)"), field .. " errors: " .. result)
      end

      local _, body = sgw:json("GET", "/test/version")
      assert.are.equal("v20", body.version)
      local _, ready = sgw:admin("GET", "/readyz")
      local r = cjson.decode(ready)
      assert.are.equal(cjson.null, r.checks.handlers.lastReloadError)
      assert.is_true(r.checks.handlers.generation >= 21)
      assert.are.equal(0, sgw:stop(20))
    end)

    it("reloads on SIGHUP", function()
      local version_file = root .. "/handlers/test/version.lua"
      fixture_root.write(version_file, "return function() return 200, { version = 'hup' } end\n")
      sgw:signal("HUP")
      stack.eventually(function()
        local _, body = sgw:json("GET", "/test/version")
        return body and body.version == "hup"
      end, 5, 0.1, "SIGHUP reload")
    end)
  end)

  describe("operations", function()
    it("answers /healthz, /readyz and /metrics on the admin listener", function()
      assert.are.equal(200, (sgw:admin("GET", "/healthz")))
      local status, ready = sgw:admin("GET", "/readyz")
      assert.are.equal(200, status)
      local r = cjson.decode(ready)
      assert.are.equal("ok", r.checks.database)
      assert.are.equal("ok", r.checks.redis)
      local _, metrics = sgw:admin("GET", "/metrics")
      assert.truthy(metrics:find('sgw_http_requests_total{method="GET",route="/api/v1/openapi.json",status="200"}', 1, true)
        or metrics:find('route="/api/v1/openapi.json"', 1, true))
      assert.truthy(metrics:find("sgw_http_request_duration_seconds_bucket", 1, true))
      assert.truthy(metrics:find("sgw_handlers_generation", 1, true))
      assert.truthy(metrics:find("sgw_jobs_queue_depth", 1, true))
      -- the admin listener is not the public one
      assert.are.equal(404, (sgw:request("GET", "/metrics")))
    end)

    it("writes one JSON log line per request", function()
      local _, _, headers = sgw:request("GET", "/api/v1/openapi.json")
      local id = headers["x-request-id"]
      local line
      stack.eventually(function()
        for l in sgw:log():gmatch("[^\n]+") do
          if l:find(id, 1, true) and l:find('"event":"request"', 1, true) then line = l end
        end
        return line ~= nil
      end, 5, 0.1, "request log line")
      local entry = assert(cjson.decode(line))
      assert.are.equal(id, entry.requestId)
      assert.are.equal("/api/v1/openapi.json", entry.route)
      assert.are.equal(200, entry.status)
      assert.is_number(entry.durationMs)
    end)

    it("drains in-flight requests on SIGTERM and exits 0", function()
      local other = stack.start_sgw { name = "drain", set = { ["lua.root"] = root, ["api.rate_limit.anonymous_per_minute"] = 1000000 } }
      local out_file = stack.build_dir() .. "/test-roots/drain-" .. other.http_port .. ".out"
      stack.sh("(curl -s -o " .. stack.shell_quote(out_file) .. " -w '%{http_code}' " .. other.base_url
        .. "/test/slow > " .. stack.shell_quote(out_file .. ".code") .. " 2>&1 &)")
      stack.eventually(function()
        local _, metrics = other:admin("GET", "/metrics")
        return metrics and metrics:match("\nsgw_http_inflight_requests ([1-9]%d*)\n")
      end, 10, 0.02, "the slow request to be in flight")
      local code = other:stop(20)
      assert.are.equal(0, code)
      local f = assert(io.open(out_file .. ".code"))
      local http_code = f:read("a")
      f:close()
      assert.are.equal("200", http_code, "the in-flight request finished")
      f = assert(io.open(out_file))
      assert.are.equal(42, cjson.decode(f:read("a")).answer)
      f:close()
    end)

    it("waits on SIGTERM for a request whose body is still arriving", function()
      local other = stack.start_sgw { name = "drain-body", set = { ["lua.root"] = root,
        ["api.rate_limit.anonymous_per_minute"] = 1000000 } }
      local dir = stack.build_dir() .. "/test-roots/drain-body-" .. other.http_port
      local q = stack.shell_quote
      assert(stack.sh("mkdir -p " .. q(dir)) == 0)
      -- 48 KB at 16 KB/s: three seconds of body.
      local f = assert(io.open(dir .. "/body.json", "w"))
      f:write('{"note":"' .. string.rep("x", 48 * 1024) .. '"}')
      f:close()
      stack.sh("(curl -s --limit-rate 16k -H 'Content-Type: application/json' --data-binary @" .. q(dir .. "/body.json")
        .. " -o " .. q(dir .. "/out") .. " -w '%{http_code}' " .. other.base_url .. "/test/items/1/notes/2 > "
        .. q(dir .. "/code") .. " 2>&1 &)")
      stack.eventually(function()
        local _, metrics = other:admin("GET", "/metrics")
        return metrics and metrics:match("\nsgw_http_inflight_requests ([1-9]%d*)\n")
      end, 10, 0.02, "the upload to be under way")
      assert.are.equal(0, other:stop(20))
      local code = stack.eventually(function()
        local c = io.open(dir .. "/code")
        local text = c and c:read("a")
        if c then c:close() end
        return text ~= nil and text ~= "" and text
      end, 10, 0.05, "curl to finish")
      assert.are.equal("201", code, "the upload was answered, not cut")
      local out = assert(io.open(dir .. "/out"))
      assert.are.equal(48 * 1024, #cjson.decode(out:read("a")).body.note)
      out:close()
    end)

    it("exits 0 on SIGTERM under a burst of requests, twenty times out of twenty", function()
      local script = stack.build_dir() .. "/test-roots/burst-wrk.lua"
      fixture_root.write(script, [[
local paths = { "/test/mixed?sleep=0.1", "/test/version", "/test/mixed?sleep=0.3", "/api/v1/openapi.json" }
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[i % #paths + 1])
end
]])
      -- One database, migrated once: each round is a new process, not a new schema.
      local database_url
      for round = 1, 20 do
        -- A short drain, so that some requests are still queued or suspended
        -- when it ends and the stop has to see them through; short waits for
        -- a database connection and a short handler budget, so that the
        -- requests queued behind the slow ones end within a second, not the
        -- default 5 s (twenty rounds of that are minutes).
        local inst = stack.start_sgw { name = "burst-" .. round, database_url = database_url,
          migrate = database_url == nil, set = { ["lua.root"] = root,
          ["api.rate_limit.anonymous_per_minute"] = 1000000, ["http.drain_seconds"] = 0.15, ["http.workers"] = 2,
          ["database.pool_wait_ms"] = 250, ["lua.handler_budget_ms"] = 500 } }
        database_url = inst.database_url
        local burst = load.start(inst.base_url, { connections = 48, timeout = 3, script = script })
        finally(burst.stop)
        stack.eventually(function()
          local _, metrics = inst:admin("GET", "/metrics")
          local n = metrics and tonumber(metrics:match("\nsgw_http_inflight_requests (%d+)\n"))
          return n and n >= 8
        end, 10, 0.01, "a burst in flight (round " .. round .. ")")
        local code, why = inst:stop(30)
        burst.stop()
        assert.are.equal(0, code, "round " .. round .. ": " .. tostring(why) .. "\n" .. inst:log():sub(-2000))
      end
    end)
  end)
end)

describe("Lua module loading", function()
  it("never looks for cjson on a search path: LUA_PATH, LUA_CPATH and ./ cannot stand in for it", function()
    local dir = stack.build_dir() .. "/test-roots/" .. stack.unique_name("hijack")
    assert(stack.sh("mkdir -p " .. stack.shell_quote(dir)) == 0)
    for _, name in ipairs({ "cjson.lua", "cjson.so" }) do
      local f = assert(io.open(dir .. "/" .. name, "w"))
      f:write('error("a stand-in for cjson was loaded")\n')
      f:close()
    end
    local inst = stack.start_sgw { name = "hijack", env = {
      LUA_PATH = dir .. "/?.lua", LUA_PATH_5_4 = dir .. "/?.lua",
      LUA_CPATH = dir .. "/?.so", LUA_CPATH_5_4 = dir .. "/?.so" } }
    local status, doc = inst:json("GET", "/api/v1/openapi.json")
    assert.are.equal(200, status)
    assert.are.equal("3.1.0", doc.openapi)
    assert.falsy(inst:log():find("stand-in", 1, true))
    assert.are.equal(0, inst:stop())
  end)
end)

describe("configuration", function()
  local function run(args)
    local binary = stack.build_dir() .. "/sgw"
    return stack.sh("cd " .. stack.shell_quote(stack.repo_root()) .. " && " .. stack.shell_quote(binary) .. " " .. args)
  end

  it("refuses an unknown key and names it", function()
    local code, out = run("serve --set database.url=x --set http.wrokers=3")
    assert.are.equal(2, code)
    assert.truthy(out:find("http.wrokers", 1, true), out)
  end)

  it("refuses a value of the wrong type and names the key", function()
    local code, out = run("serve --set database.url=x --set http.workers=many")
    assert.are.equal(2, code)
    assert.truthy(out:find("http.workers", 1, true), out)
  end)

  it("says what to do when database.url is missing", function()
    local code, out = run("serve")
    assert.are.equal(2, code)
    assert.truthy(out:find("database.url", 1, true), out)
  end)

  it("reads --config files and lets --set override them", function()
    local path = stack.build_dir() .. "/test-roots/override.conf"
    os.execute("mkdir -p " .. stack.shell_quote(stack.build_dir() .. "/test-roots"))
    local f = assert(io.open(path, "w"))
    f:write("# a test config\nbench.enabled = true\nlog.level = warn\n")
    f:close()
    local code, out = run("check --config " .. stack.shell_quote(path))
    assert.are.equal(0, code, out)
    code, out = run("check --config " .. stack.shell_quote(path) .. " --set log.level=bogus-but-a-string")
    assert.are.equal(0, code, out)
    f = assert(io.open(path, "w"))
    f:write("no equals sign here\n")
    f:close()
    code, out = run("check --config " .. stack.shell_quote(path))
    assert.are.equal(2, code)
    assert.truthy(out:find("override.conf:1", 1, true), out)
  end)

  it("refuses a config file that others can read once it holds a secret, and says what to run", function()
    local dir = stack.build_dir() .. "/test-roots"
    os.execute("mkdir -p " .. stack.shell_quote(dir))
    local function write(name, text, mode)
      local path = dir .. "/" .. name
      local f = assert(io.open(path, "w"))
      f:write(text)
      f:close()
      assert(os.execute("chmod " .. mode .. " " .. stack.shell_quote(path)))
      return path
    end
    local secrets = {
      ["crypto.encryption_key"] = "crypto.encryption_key = " .. stack.ENCRYPTION_KEY .. "\n",
      ["meta.app_secret"] = "meta.app_secret = 0123456789abcdef\n",
      ["database.url"] = "database.url = postgresql://sgw:hunter2@db.internal/sgw\n",
      ["redis.url"] = "redis.url = redis://:hunter2@cache.internal:6379/0\n",
    }
    for key, text in pairs(secrets) do
      for _, mode in ipairs { "644", "640", "604" } do
        local path = write("secret-" .. mode .. ".conf", "log.level = warn\n" .. text, mode)
        local code, out = run("check --config " .. stack.shell_quote(path))
        assert.are.equal(2, code, key .. " " .. mode .. ": " .. out)
        assert.truthy(out:find(key, 1, true), out)
        assert.truthy(out:find("chmod 600 " .. path, 1, true), out)
        assert.is_nil(out:find("hunter2", 1, true), out)
      end
      local path = write("secret-600.conf", "log.level = warn\n" .. text, "600")
      local code, out = run("check --config " .. stack.shell_quote(path))
      assert.are.equal(0, code, key .. ": " .. out)
    end
    -- No secret, or a connection string without a password: any mode will do.
    local path = write("plain.conf", "log.level = warn\ndatabase.url = postgresql://sgw@db.internal/sgw\n"
      .. "meta.app_secret =\n", "644")
    local code, out = run("check --config " .. stack.shell_quote(path))
    assert.are.equal(0, code, out)
  end)

  it("applies migrations once when three instances migrate at the same moment", function()
    local url = stack.fresh_database("migrate3")
    local binary = stack.shell_quote(stack.build_dir() .. "/sgw")
    local cmd = "cd " .. stack.shell_quote(stack.repo_root()) .. " && for i in 1 2 3; do " .. binary
      .. " migrate --set database.url=" .. stack.shell_quote(url) .. " > /dev/null 2>&1 & done; wait"
    assert.are.equal(0, (stack.sh(cmd)))
    local out = stack.psql(url, "SELECT count(*) || '/' || count(DISTINCT version) FROM schema_migrations")
    local files = 0
    for _ in io.popen("ls " .. stack.shell_quote(stack.repo_root() .. "/migrations") .. "/*.sql"):lines() do
      files = files + 1
    end
    assert.truthy(out:find(files .. "/" .. files, 1, true), "each migration recorded once: " .. out)
    local code, again = stack.sh(cmd:gsub("> /dev/null 2>&1 & done; wait", "; done"))
    assert.are.equal(0, code, again)
  end)
end)

-- Idempotency-Key (CONTRACT section 5) against the real stack, through the
-- fixture routes /test/idem (key optional) and /test/idem-required, whose
-- handler (spec/fixtures/handlers/test/idem_create.lua) inserts one row of
-- idem_items per run. These routes have no authentication, so their keys are
-- scoped by the client's address; real endpoints scope them by API client.
local stack = require "stack"
local fixture_root = require "fixture_root"
local cjson = require "cjson.safe"

local q = stack.shell_quote

local function problem_of(status, body, headers)
  assert.are.equal("application/problem+json", headers["content-type"])
  local p = assert(cjson.decode(body), "problem body is JSON")
  assert.are.equal(status, p.status)
  assert.matches("^req_", p.requestId)
  assert.are.equal(headers["x-request-id"], p.requestId)
  return p
end

describe("idempotency", function()
  local sgw, db

  local function items()
    return tonumber(stack.psql(db, "SELECT count(*) FROM idem_items"))
  end

  local function post(path, key, body, extra)
    local headers = { ["Content-Type"] = "application/json", ["Idempotency-Key"] = key }
    for k, v in pairs(extra or {}) do headers[k] = v end
    return sgw:request("POST", path, { headers = headers, body = body })
  end

  -- curl in the background; returns a function that waits for it and gives
  -- status, body, headers (lower-case names).
  local function post_in_background(path, key, body)
    local dir = stack.build_dir() .. "/test-roots/" .. stack.unique_name("idem_bg")
    local code, out = stack.sh("mkdir -p " .. q(dir) .. " && (curl -s -D " .. q(dir .. "/h") .. " -o "
      .. q(dir .. "/b") .. " -w '%{http_code}' -X POST -H 'Content-Type: application/json' -H "
      .. q("Idempotency-Key: " .. key) .. " --data-binary " .. q(body) .. " " .. q(sgw.base_url .. path)
      .. " > " .. q(dir .. "/s.tmp") .. " 2>&1; mv " .. q(dir .. "/s.tmp") .. " " .. q(dir .. "/s") .. ") > /dev/null 2>&1 &")
    assert.are.equal(0, code, out)
    return function()
      local function read(name)
        local f = io.open(dir .. "/" .. name)
        if not f then return nil end
        local s = f:read("a")
        f:close()
        return s
      end
      stack.eventually(function() return read("s") end, 20, 0.05, "background curl")
      local headers = {}
      for name, value in (read("h") or ""):gmatch("([%w-]+):%s*([^\r\n]*)") do headers[name:lower()] = value end
      local status, body = tonumber(read("s")), read("b")
      stack.sh("rm -rf " .. q(dir))
      stack.record("POST", sgw.base_url .. path, status, headers, body)
      return status, body, headers
    end
  end

  setup(function()
    local root = fixture_root.create("idempotency")
    sgw = stack.start_sgw {
      name = "idempotency",
      set = {
        ["lua.root"] = root,
        ["http.workers"] = 8,
        ["api.rate_limit.anonymous_per_minute"] = 100000,
        ["clock.allow_control"] = true,
      },
    }
    db = sgw.database_url
    stack.psql(db, "CREATE TABLE idem_items (id bigserial PRIMARY KEY, name text)")
    -- The gate of ?mode=gate: each statement of a volatile function sees what
    -- was committed before it, so the loop sees the spec's INSERT (4 s at most).
    stack.psql(db, [[CREATE TABLE idem_gates (key text PRIMARY KEY);
      CREATE FUNCTION idem_wait_gate(k text) RETURNS void LANGUAGE plpgsql AS $f$
      BEGIN
        FOR i IN 1..400 LOOP
          IF EXISTS (SELECT 1 FROM idem_gates WHERE key = k) THEN RETURN; END IF;
          PERFORM pg_sleep(0.01);
        END LOOP;
        RAISE EXCEPTION 'the spec never opened the gate of %', k;
      END $f$]])
  end)

  teardown(function() stack.cleanup() end)

  before_each(function()
    stack.psql(db, "TRUNCATE idem_items; DELETE FROM idempotency_keys")
  end)

  it("replays the first response with Idempotent-Replayed and creates nothing twice", function()
    local s1, b1, h1 = post("/test/idem", "replay-1", '{"name":"a"}')
    assert.are.equal(201, s1, b1)
    assert.is_nil(h1["idempotent-replayed"])
    local s2, b2, h2 = post("/test/idem", "replay-1", '{"name":"a"}')
    assert.are.equal(201, s2)
    assert.are.equal(b1, b2)
    assert.are.equal("true", h2["idempotent-replayed"])
    assert.are.equal(h1["location"], h2["location"])
    assert.are.equal("application/json", h2["content-type"])
    assert.are_not.equal(h1["x-request-id"], h2["x-request-id"])
    assert.are.equal(1, items())
    -- Another key is another request.
    local s3, b3 = post("/test/idem", "replay-2", '{"name":"a"}')
    assert.are.equal(201, s3)
    assert.are_not.equal(b1, b3)
    assert.are.equal(2, items())
  end)

  it("compares JSON bodies by meaning: whitespace, key order and number spelling do not matter", function()
    local s1, b1 = post("/test/idem", "semantic-1", '{"name":"a","tags":["x","y"],"n":1}')
    assert.are.equal(201, s1)
    local s2, b2, h2 = post("/test/idem", "semantic-1", ' {\n  "n": 1.0,\t"tags": [ "x", "y" ],\n  "name": "a"\n}\n')
    assert.are.equal(201, s2)
    assert.are.equal(b1, b2)
    assert.are.equal("true", h2["idempotent-replayed"])
    assert.are.equal(1, items())
  end)

  it("refuses a number too large to represent with 400 invalid_json, and keeps nothing", function()
    for i, body in ipairs { '{"name":"a","n":1e999999}', '{"name":"a","n":-1e999999}', '{"name":["1' .. string.rep("0", 400) .. '"],"n":1' .. string.rep("0", 400) .. '}' } do
      local status, problem = post("/test/idem", "overflow-" .. i, body)
      assert.are.equal(400, status, body)
      assert.are.equal("invalid_json", cjson.decode(problem).code)
    end
    assert.are.equal(0, items())
  end)

  it("refuses the same key with a different body or path with 422 idempotency_key_reused", function()
    assert.are.equal(201, (post("/test/idem", "reused-1", '{"name":"a"}')))
    local s, b, h = post("/test/idem", "reused-1", '{"name":"b"}')
    assert.are.equal(422, s)
    assert.are.equal("idempotency_key_reused", problem_of(422, b, h).code)
    s, b, h = post("/test/idem", "reused-1", '{"name":"a","tags":["y","x"]}')
    assert.are.equal(422, s)
    s, b, h = post("/test/idem-required", "reused-1", '{"name":"a"}')
    assert.are.equal(422, s)
    assert.are.equal("idempotency_key_reused", problem_of(422, b, h).code)
    assert.are.equal(1, items())
  end)

  it("answers 409 idempotency_key_in_use while the first request is in flight", function()
    local wait = post_in_background("/test/idem?mode=gate", "inflight-1", '{"name":"slow"}')
    stack.eventually(function()
      return tonumber(stack.psql(db, "SELECT count(*) FROM idempotency_keys WHERE key = 'inflight-1'")) == 1
    end, 5, 0.01, "the first request claimed the key")
    local s, b, h = post("/test/idem?mode=gate", "inflight-1", '{"name":"slow"}')
    assert.are.equal(409, s)
    assert.are.equal("idempotency_key_in_use", problem_of(409, b, h).code)
    assert.are.equal("1", h["retry-after"])
    stack.psql(db, "INSERT INTO idem_gates VALUES ('inflight-1')")
    local s1, b1 = wait()
    assert.are.equal(201, s1)
    local s2, b2, h2 = post("/test/idem?mode=gate", "inflight-1", '{"name":"slow"}')
    assert.are.equal(201, s2)
    assert.are.equal(b1, b2)
    assert.are.equal("true", h2["idempotent-replayed"])
    assert.are.equal(1, items())
  end)

  it("takes over a claim left in flight by a dead instance once its lock ran out", function()
    stack.psql(db, "INSERT INTO idempotency_keys (client_id, key, request_hash, state, locked_by, "
      .. "locked_until, expires_at) VALUES ('anon:127.0.0.1', 'crashed-1', 'x', 'in_flight', 'req_dead', "
      .. "now() + interval '1 hour', now() + interval '1 day')")
    assert.are.equal(422, (post("/test/idem", "crashed-1", '{"name":"t"}')), "held while locked")
    stack.psql(db, "UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE key = 'crashed-1'")
    local s, _, h = post("/test/idem", "crashed-1", '{"name":"t"}')
    assert.are.equal(201, s)
    assert.is_nil(h["idempotent-replayed"])
    assert.are.equal(1, items())
  end)

  it("lets exactly one of 20 concurrent requests with one key create", function()
    local dir = stack.build_dir() .. "/test-roots/" .. stack.unique_name("idem_conc")
    local cmd = "mkdir -p " .. q(dir) .. " && seq 20 | xargs -P 20 -I{} curl -s -D " .. q(dir) .. "/{}.h -o "
      .. q(dir) .. "/{}.b -w '%{http_code}\\n' -X POST -H 'Content-Type: application/json' "
      .. "-H 'Idempotency-Key: concurrent-1' --data-binary '{\"name\":\"c\"}' "
      .. q(sgw.base_url .. "/test/idem?mode=slow")
    local code, out = stack.sh(cmd)
    assert.are.equal(0, code, out)
    local created, replayed, in_use, ids = 0, 0, 0, {}
    for i = 1, 20 do
      local fh, fb = assert(io.open(dir .. "/" .. i .. ".h")), assert(io.open(dir .. "/" .. i .. ".b"))
      local head, body = fh:read("a"), fb:read("a")
      fh:close()
      fb:close()
      local status = tonumber(head:match("^HTTP/[%d.]+ (%d+)"))
      if status == 201 then
        ids[cjson.decode(body).id] = true
        if head:lower():find("idempotent%-replayed: true") then replayed = replayed + 1 else created = created + 1 end
      else
        assert.are.equal(409, status, head .. body)
        assert.are.equal("idempotency_key_in_use", cjson.decode(body).code)
        in_use = in_use + 1
      end
    end
    stack.sh("rm -rf " .. q(dir))
    assert.are.equal(1, created, "one request ran the handler")
    assert.are.equal(20, created + replayed + in_use)
    assert.are.equal(1, items())
    local n = 0
    for _ in pairs(ids) do n = n + 1 end
    assert.are.equal(1, n, "every 201 carries the same id")
  end)

  it("does not remember a 4xx or a 5xx: the same key then succeeds, and their writes are undone", function()
    local s, b, h = post("/test/idem?mode=refuse", "refused-1", '{"name":"r"}')
    assert.are.equal(422, s)
    assert.are.equal("validation_failed", problem_of(422, b, h).code)
    s, b, h = post("/test/idem?mode=boom", "refused-1", '{"name":"r"}')
    assert.are.equal(500, s)
    assert.are.equal("internal_error", problem_of(500, b, h).code)
    assert.are.equal(0, items())
    local s2, _, h2 = post("/test/idem", "refused-1", '{"name":"r"}')
    assert.are.equal(201, s2)
    assert.is_nil(h2["idempotent-replayed"])
    assert.are.equal(1, items())
    assert.truthy(sgw:log():find("handlers/test/idem_create.lua", 1, true), "the log names the failing handler")
  end)

  it("requires the key where the route says so, and refuses malformed keys", function()
    local s, b, h = sgw:request("POST", "/test/idem-required",
      { headers = { ["Content-Type"] = "application/json" }, body = '{"name":"k"}' })
    assert.are.equal(400, s)
    assert.are.equal("idempotency_key_required", problem_of(400, b, h).code)
    for _, key in ipairs { string.rep("k", 256), "two words" } do
      s, b, h = post("/test/idem-required", key, '{"name":"k"}')
      assert.are.equal(400, s)
      assert.are.equal("invalid_parameter", problem_of(400, b, h).code)
    end
    assert.are.equal(201, (post("/test/idem-required", string.rep("k", 255), '{"name":"k"}')))
    -- Optional: no key, no memory.
    s = sgw:request("POST", "/test/idem", { headers = { ["Content-Type"] = "application/json" }, body = '{"name":"k"}' })
    assert.are.equal(201, s)
    s = sgw:request("POST", "/test/idem", { headers = { ["Content-Type"] = "application/json" }, body = '{"name":"k"}' })
    assert.are.equal(201, s)
    assert.are.equal(3, items())
  end)

  -- Last: it moves this instance's clock forward for good.
  it("forgets a key after api.idempotency_ttl_hours, and the clean-up job deletes it", function()
    assert.are.equal(201, (post("/test/idem", "expiry-1", '{"name":"e"}')))
    assert.are.equal(422, (post("/test/idem", "expiry-1", '{"name":"other"}')))
    assert.are.equal(200, (sgw:admin("POST", "/clock/advance?seconds=" .. (24 * 3600 - 60))))
    assert.are.equal(422, (post("/test/idem", "expiry-1", '{"name":"other"}')), "still kept within 24 h")
    assert.are.equal(201, (post("/test/idem", "expiry-2", '{"name":"e2"}')))
    assert.are.equal(200, (sgw:admin("POST", "/clock/advance?seconds=120")))
    local s, _, h = post("/test/idem", "expiry-1", '{"name":"other"}')
    assert.are.equal(201, s, "after 24 h the key is free again")
    assert.is_nil(h["idempotent-replayed"])
    assert.are.equal(3, items())

    -- A day later both keys are past their retention: the job deletes them.
    assert.are.equal(200, (sgw:admin("POST", "/clock/advance?seconds=" .. (24 * 3600))))
    stack.psql(db, "INSERT INTO jobs (kind) VALUES ('idempotency_cleanup'); NOTIFY sgw_jobs")
    stack.eventually(function()
      return tonumber(stack.psql(db, "SELECT count(*) FROM idempotency_keys")) == 0
    end, 10, 0.1, "expired keys deleted")
  end)
end)

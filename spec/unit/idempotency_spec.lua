-- lib/idempotency.lua against a fake host: canonical JSON, request hashes,
-- key validation, and wrap()'s decisions over an in-memory idempotency_keys.
local cjson = require "cjson"

local function decode(text) return (require("json").decode(text)) end

-- An in-memory stand-in for the statements idempotency.lua sends, with
-- transactions that roll the table and the "resources" back on error.
local function fake_db(state)
  local in_tx = false
  local function id(scope, key) return scope .. "\0" .. key end
  local function copy(t)
    local c = {}
    for k, v in pairs(t) do c[k] = type(v) == "table" and copy(v) or v end
    return c
  end
  return {
    in_transaction = function() return in_tx end,
    query = function(sql, ...)
      if state.down then return nil, "connection refused", "08006" end
      if sql:find("INSERT INTO idempotency_keys", 1, true) then
        local now, scope, key, hash, owner, lock, ttl = ...
        local r = state.rows[id(scope, key)]
        if r and not ((r.state == "done" and r.expires_at <= now)
            or (r.state == "in_flight" and r.locked_until <= now)) then
          return {}
        end
        state.rows[id(scope, key)] = { request_hash = hash, state = "in_flight", locked_by = owner,
          locked_until = now + lock, expires_at = now + ttl }
        return { { state = "in_flight" } }
      end
      assert(sql:find("SELECT request_hash", 1, true), sql)
      local r = state.rows[id(...)]
      return { r and copy(r) or nil }
    end,
    exec = function(sql, scope, key, owner, status, body, headers)
      if state.down then return nil, "connection refused", "08006" end
      local r = state.rows[id(scope, key)]
      local mine = r and r.state == "in_flight" and r.locked_by == owner
      if sql:find("UPDATE idempotency_keys", 1, true) then
        if not mine then return 0 end
        r.state, r.response_status, r.response_body, r.response_headers = "done", status, body, copy(headers)
        return 1
      end
      assert(sql:find("DELETE FROM idempotency_keys", 1, true), sql)
      if not mine then return 0 end
      state.rows[id(scope, key)] = nil
      return 1
    end,
    transaction = function(fn, ...)
      local saved_rows, saved_created = copy(state.rows), copy(state.created)
      in_tx = true
      local res = table.pack(pcall(fn, ...))
      in_tx = false
      if not res[1] then
        state.rows, state.created = saved_rows, saved_created
        error(res[2], 0)
      end
      return table.unpack(res, 2, res.n)
    end,
  }
end

describe("idempotency", function()
  local idem, state, now, seq

  before_each(function()
    now, seq = 1000, 0
    state = { rows = {}, created = {} }
    _G.crypto = { sha256_hex = function(s) return "h:" .. s end }
    _G.config = { get = function(k) return k == "api.idempotency_ttl_hours" and 1 or nil end }
    _G.clock = { now = function() return now end }
    _G.log = { error = function() end, warn = function() end }
    _G.db = fake_db(state)
    local store = {}
    _G.shared = {
      get = function(k) return store[k] end,
      set = function(k, v) store[k] = v; return true end,
      delete = function(k) store[k] = nil; return true end,
    }
    package.loaded.idempotency = nil
    idem = require "idempotency"
  end)

  after_each(function()
    _G.crypto, _G.config, _G.clock, _G.log, _G.db, _G.shared = nil, nil, nil, nil, nil, nil
  end)

  describe("canonical JSON", function()
    local function same(a, b) assert.equal(idem.canonical(decode(a)), idem.canonical(decode(b))) end
    local function differ(a, b) assert.are_not.equal(idem.canonical(decode(a)), idem.canonical(decode(b))) end

    it("ignores key order and whitespace, recursively", function()
      same('{"b":1,"a":{"y":[1,2],"x":"s"}}', ' {\n "a" : { "x":"s", "y": [ 1 , 2 ] },\t"b": 1 }')
      assert.equal('{"a":{"x":"s","y":[1,2]},"b":1}', idem.canonical(decode('{"b":1,"a":{"y":[1,2],"x":"s"}}')))
    end)

    it("keeps array order and tells values and types apart", function()
      differ('[1,2]', '[2,1]')
      differ('{"a":1}', '{"a":2}')
      differ('{"a":1}', '{"a":"1"}')
      differ('{"a":true}', '{"a":"true"}')
      differ('{"a":null}', '{}')
      differ('{"a":"x"}', '{"b":"x"}')
    end)

    it("normalises numbers", function()
      same('{"n":1}', '{"n":1.0}')
      same('{"n":1}', '{"n":1e0}')
      same('{"n":-0}', '{"n":0}')
      same('{"n":0.1}', '{"n":1e-1}')
      differ('{"n":0.1}', '{"n":0.10000001}')
      assert.equal("[1,2.5,-3]", idem.canonical({ 1, 2.5, -3.0 }))
    end)

    it("compares strings by their characters, not their escapes", function()
      same('{"s":"caf\\u00e9"}', '{"s":"café"}')
      same('{"s":"a\\/b"}', '{"s":"a/b"}')
      assert.equal([["q\"\\\u000a\u0001"]], idem.canonical('q"\\\n\1'))
    end)

    it("encodes null, booleans and empty containers", function()
      assert.equal("null", idem.canonical(cjson.null))
      assert.equal("[true,false,null]", idem.canonical(decode("[true,false,null]")))
      assert.equal("{}", idem.canonical({}))
    end)
  end)

  describe("request hash", function()
    local function req(method, path, json, body)
      return { method = method, path = path, json = json, body = body }
    end

    it("is the same for the same request meant the same way", function()
      assert.equal(idem.request_hash(req("POST", "/p", decode('{"a":1,"b":2}'))),
        idem.request_hash(req("POST", "/p", decode('{ "b": 2, "a": 1.0 }'))))
    end)

    it("differs by method, path and body", function()
      local base = idem.request_hash(req("POST", "/p", { a = 1 }))
      assert.are_not.equal(base, idem.request_hash(req("PUT", "/p", { a = 1 })))
      assert.are_not.equal(base, idem.request_hash(req("POST", "/q", { a = 1 })))
      assert.are_not.equal(base, idem.request_hash(req("POST", "/p", { a = 2 })))
      assert.are_not.equal(base, idem.request_hash(req("POST", "/p")))
    end)

    it("compares a raw body byte for byte", function()
      assert.equal(idem.request_hash(req("POST", "/u", nil, "\1\2")), idem.request_hash(req("POST", "/u", nil, "\1\2")))
      assert.are_not.equal(idem.request_hash(req("POST", "/u", nil, "\1\2")), idem.request_hash(req("POST", "/u", nil, "\1\3")))
    end)
  end)

  describe("key validation", function()
    it("accepts 1 to 255 visible ASCII characters", function()
      assert.is_true(idem.valid_key("a"))
      assert.is_true(idem.valid_key("order-42:retry_1/~!"))
      assert.is_true(idem.valid_key(string.rep("k", 255)))
    end)

    it("refuses empty, long, spaces, control and non-ASCII characters", function()
      assert.is_false(idem.valid_key(""))
      assert.is_false(idem.valid_key(string.rep("k", 256)))
      assert.is_false(idem.valid_key("a b"))
      assert.is_false(idem.valid_key("a\tb"))
      assert.is_false(idem.valid_key("a\127"))
      assert.is_false(idem.valid_key("café"))
      assert.is_false(idem.valid_key(nil))
    end)
  end)

  describe("wrap", function()
    local function request(key, json)
      seq = seq + 1
      return { id = "req_" .. seq, method = "POST", path = "/test/idem", remote_addr = "127.0.0.1",
        headers = { ["idempotency-key"] = key }, json = json }
    end
    local ctx = { route = { idempotency = "required" }, client = { client_id = "cli_1" } }
    local function create()
      state.created[#state.created + 1] = true
      return 201, { id = "thing_" .. #state.created }, { Location = "/things/" .. #state.created, ["X-Other"] = "1" }
    end
    local function code_of(body) return cjson.decode(body).code end

    it("runs the handler once and replays its response", function()
      local s1, b1, h1 = idem.wrap(request("k1", { a = 1 }), ctx, create)
      assert.equal(201, s1)
      assert.equal("application/json", h1["Content-Type"])
      assert.is_nil(h1["Idempotent-Replayed"])
      local s2, b2, h2 = idem.wrap(request("k1", decode('{ "a": 1.0 }')), ctx, create)
      assert.equal(201, s2)
      assert.equal(b1, b2)
      assert.equal("true", h2["Idempotent-Replayed"])
      assert.equal("/things/1", h2.Location)
      assert.is_nil(h2["X-Other"], "only Content-Type and Location are replayed")
      assert.equal(1, #state.created)
    end)

    it("refuses the key for a different request with 422", function()
      idem.wrap(request("k1", { a = 1 }), ctx, create)
      local s, b = idem.wrap(request("k1", { a = 2 }), ctx, create)
      assert.equal(422, s)
      assert.equal("idempotency_key_reused", code_of(b))
      assert.equal(1, #state.created)
    end)

    it("answers 409 while the first request is in flight", function()
      state.rows["cli_1\0k1"] = { request_hash = idem.request_hash(request("k1", { a = 1 })),
        state = "in_flight", locked_by = "req_other", locked_until = now + 60, expires_at = now + 3600 }
      local s, b, h = idem.wrap(request("k1", { a = 1 }), ctx, create)
      assert.equal(409, s)
      assert.equal("idempotency_key_in_use", code_of(b))
      assert.equal("1", h["Retry-After"])
      assert.equal(0, #state.created)
    end)

    it("runs only outside a transaction, where its claim commits at once", function()
      assert.has_error(function()
        db.transaction(function() idem.wrap(request("k1", {}), ctx, create) end)
      end)
    end)

    it("takes over an in-flight claim past its lock", function()
      state.rows["cli_1\0k1"] = { request_hash = "x", state = "in_flight", locked_by = "req_dead",
        locked_until = now - 1, expires_at = now + 3600 }
      assert.equal(201, (idem.wrap(request("k1", { a = 1 }), ctx, create)))
    end)

    it("does not keep a 4xx, nor what the handler wrote before it", function()
      local s = idem.wrap(request("k1", { a = 1 }), ctx, function()
        create()
        return 422, '{"code":"validation_failed"}', { ["Content-Type"] = "application/problem+json" }
      end)
      assert.equal(422, s)
      assert.equal(0, #state.created)
      assert.is_nil(next(state.rows))
      assert.equal(201, (idem.wrap(request("k1", { a = 1 }), ctx, create)))
    end)

    it("gives up the claim and raises the handler's error again", function()
      local problem = require "problem"
      local ok, err = pcall(idem.wrap, request("k1", {}), ctx, function()
        create()
        problem.raise(422, "validation_failed", "no")
      end)
      assert.is_false(ok)
      assert.is_true(problem.is_problem(err))
      ok, err = pcall(idem.wrap, request("k1", {}), ctx, function() error("boom") end)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("boom", 1, true))
      assert.equal(0, #state.created)
      assert.is_nil(next(state.rows))
    end)

    it("forgets the key after the retention time", function()
      idem.wrap(request("k1", { a = 1 }), ctx, create)
      now = now + 3600
      local s, _, h = idem.wrap(request("k1", { a = 2 }), ctx, create)
      assert.equal(201, s)
      assert.is_nil(h["Idempotent-Replayed"])
      assert.equal(2, #state.created)
    end)

    it("scopes keys by client", function()
      idem.wrap(request("k1", { a = 1 }), ctx, create)
      local other = { route = ctx.route, client = { client_id = "cli_2" } }
      assert.equal(201, (idem.wrap(request("k1", { a = 2 }), other, create)))
      assert.equal(2, #state.created)
    end)

    it("requires a key only where the route says so", function()
      local s, b = idem.wrap(request(nil, {}), ctx, create)
      assert.equal(400, s)
      assert.equal("idempotency_key_required", code_of(b))
      local optional = { route = { idempotency = "optional" }, client = ctx.client }
      assert.equal(201, (idem.wrap(request(nil, {}), optional, create)))
      assert.is_nil(next(state.rows))
    end)

    it("refuses a malformed key with 400 invalid_parameter", function()
      for _, key in ipairs { "", string.rep("k", 256), "with space" } do
        local s, b = idem.wrap(request(key, {}), ctx, create)
        assert.equal(400, s)
        assert.equal("invalid_parameter", code_of(b))
      end
      assert.equal(0, #state.created)
    end)

    it("gives up on the retry a claim it could not give up when the database went away", function()
      local s, b, h = idem.wrap(request("k1", { a = 1 }), ctx, function()
        create()
        state.down = true -- gone before the response is stored: nor can the claim be given up
        error("database unavailable: connection lost", 0)
      end)
      assert.equal(503, s)
      assert.equal("service_unavailable", code_of(b))
      assert.equal("2", h["Retry-After"])
      assert.equal("in_flight", state.rows["cli_1\0k1"].state)
      state.down = false
      -- The retry the 503 asks for goes on at once, not after LOCK_SECONDS.
      assert.equal(201, (idem.wrap(request("k1", { a = 1 }), ctx, create)))
      assert.equal(1, #state.created)
      assert.equal("done", state.rows["cli_1\0k1"].state)
    end)

    it("answers 503 when the key cannot be claimed", function()
      state.down = true
      local s, b, h = idem.wrap(request("k1", {}), ctx, create)
      assert.equal(503, s)
      assert.equal("service_unavailable", code_of(b))
      assert.equal("2", h["Retry-After"])
      assert.equal(0, #state.created)
    end)
  end)
end)

-- lib/ratelimit.lua against a fake Redis that runs the module's own script
-- (the same text Redis runs), so the GCRA arithmetic itself is under test,
-- on a clock the spec moves.
describe("ratelimit", function()
  local ratelimit, store, now_us, mono, down, evals, counted, logged

  -- Redis's view of Lua values: a GET of a missing key is false, numbers in
  -- a reply become integers (truncated).
  local function fake_call(cmd, key, value, px, ms)
    cmd = cmd:upper()
    if cmd == "TIME" then
      return { tostring(now_us // 1000000), tostring(now_us % 1000000) }
    elseif cmd == "GET" then
      local e = store[key]
      if e and e.expires_us and e.expires_us <= now_us then store[key], e = nil, nil end
      return e and e.value or false
    elseif cmd == "SET" and px == nil then
      store[key] = { value = value }
      return "OK"
    elseif cmd == "SET" then
      assert.equal("PX", px)
      assert.is_true(tonumber(ms) >= 1)
      store[key] = { value = value, expires_us = now_us + tonumber(ms) * 1000 }
      return "OK"
    elseif cmd == "DEL" then
      store[key] = nil
      return 1
    end
    error("unexpected command " .. cmd)
  end

  local function to_reply(v)
    if type(v) == "number" then return math.tointeger(v >= 0 and math.floor(v) or math.ceil(v)) end
    if type(v) == "table" then
      local out = {}
      for i, x in ipairs(v) do out[i] = to_reply(x) end
      return out
    end
    return v
  end

  local function eval(script, nkeys, ...)
    local args = { ... }
    local keys, argv = {}, {}
    for i, a in ipairs(args) do
      if i <= nkeys then keys[#keys + 1] = a else argv[#argv + 1] = tostring(a) end
    end
    local env = {
      KEYS = keys, ARGV = argv, math = math, string = string, tonumber = tonumber, tostring = tostring,
      redis = { call = fake_call, replicate_commands = function() return true end },
    }
    return to_reply(assert(load(script, "=ratelimit", "t", env))())
  end

  -- Redis Cluster's key slot: CRC16 (XMODEM) of the key, or of its {tag}.
  local function key_slot(key)
    local tag = key:match("{([^}]+)}")
    key = tag or key
    local crc = 0
    for i = 1, #key do
      crc = crc ~ (key:byte(i) << 8)
      for _ = 1, 8 do
        crc = (crc & 0x8000 ~= 0) and ((crc << 1) ~ 0x1021) or (crc << 1)
        crc = crc & 0xffff
      end
    end
    return crc % 16384
  end

  -- Where the state of a key lives: under one of 16 tags, by its slot.
  local function state_key(key)
    return "sgw:{rl" .. key_slot(key) % 16 .. "}:" .. key
  end

  local function advance(seconds)
    now_us = now_us + math.floor(seconds * 1000000)
  end

  before_each(function()
    store, evals, counted, logged, down = {}, {}, 0, {}, false
    now_us, mono = 1700000000 * 1000000 + 123456, 5000
    _G.redis = {
      key_slot = key_slot,
      eval_cached = function(script, nkeys, ...)
        evals[#evals + 1] = { nkeys = nkeys, ... }
        if down then return nil, "Connection refused", "unavailable" end
        return eval(script, nkeys, ...)
      end,
    }
    _G.metrics = { inc = function(name) if name == "sgw_ratelimit_fail_open_total" then counted = counted + 1 end end }
    _G.log = { warn = function(event, fields) logged[#logged + 1] = { event = event, fields = fields } end }
    _G.clock = { mono_ms = function() return mono end }
    _G.config = { get = function(k) return k == "redis.namespace" and "sgw" or nil end }
    _G.shared = require("fake_host").shared_store(function() return mono end)
    package.loaded.ratelimit = nil
    ratelimit = require("ratelimit")
  end)

  after_each(function()
    _G.redis, _G.metrics, _G.log, _G.clock, _G.config, _G.shared = nil, nil, nil, nil, nil, nil
  end)

  it("lets a fresh key spend its whole minute at once, then refuses", function()
    for i = 1, 5 do
      local r = ratelimit.check("client:cli_1", 5)
      assert.is_true(r.allowed)
      assert.equal(5 - i, r.remaining)
      assert.equal(12 * i, r.reset) -- one request comes back every 12 s
      assert.is_nil(r.retry_after)
    end
    local r = ratelimit.check("client:cli_1", 5)
    assert.is_false(r.allowed)
    assert.same({ allowed = false, limit = 5, remaining = 0, reset = 60, retry_after = 12, epoch = 0 }, r)
  end)

  it("refills one request per interval, and fully after a minute", function()
    for _ = 1, 5 do ratelimit.check("k", 5) end
    advance(11.9)
    local r = ratelimit.check("k", 5)
    assert.is_false(r.allowed)
    assert.equal(1, r.retry_after) -- 0.1 s rounded up, never 0
    advance(0.1)
    r = ratelimit.check("k", 5)
    assert.is_true(r.allowed)
    assert.equal(0, r.remaining)
    assert.is_false(ratelimit.check("k", 5).allowed)
    advance(60)
    r = ratelimit.check("k", 5)
    assert.equal(4, r.remaining)
    assert.equal(12, r.reset)
  end)

  it("does not charge refused requests", function()
    for _ = 1, 5 do ratelimit.check("k", 5) end
    for _ = 1, 50 do assert.is_false(ratelimit.check("k", 5).allowed) end
    advance(12)
    assert.is_true(ratelimit.check("k", 5).allowed)
  end)

  it("rounds retry_after and reset up to whole seconds", function()
    for _ = 1, 7 do assert.is_true(ratelimit.check("k", 7).allowed) end -- 8.57 s apart
    local r = ratelimit.check("k", 7)
    assert.is_false(r.allowed)
    assert.equal(9, r.retry_after)
    assert.equal(60, r.reset)
    advance(60)
    r = ratelimit.check("k", 7)
    assert.equal(6, r.remaining)
    assert.equal(9, r.reset)
  end)

  it("fakes Redis Cluster slots as Redis computes them (CRC16 reference value)", function()
    assert.equal(0x31C3, key_slot("123456789"))
  end)

  it("reads the epoch of the state key's own tag, in one script on one slot", function()
    ratelimit.check("client:a", 3, "credentials:epoch")
    local call = evals[#evals]
    assert.equal(2, call.nkeys)
    assert.equal(state_key("client:a"), call[1])
    assert.equal(call[1]:match("^(sgw:{rl%d+}:)") .. "credentials:epoch", call[2])
    assert.equal(key_slot(call[1]), key_slot(call[2]))
    -- every tag has its epoch copy
    local keys = ratelimit.epoch_keys("credentials:epoch")
    assert.equal(16, #keys)
    local found = false
    for _, k in ipairs(keys) do found = found or k == call[2] end
    assert.is_true(found)
  end)

  it("keeps keys apart and stores them under <namespace>:{rl<n>}: with an expiry", function()
    for _ = 1, 3 do ratelimit.check("client:a", 3) end
    assert.is_false(ratelimit.check("client:a", 3).allowed)
    assert.is_true(ratelimit.check("client:b", 3).allowed)
    assert.is_true(ratelimit.check("addr:127.0.0.1", 3).allowed)
    assert.truthy(store[state_key("client:a")])
    assert.truthy(store[state_key("addr:127.0.0.1")])
    -- The state expires when the bucket is full again: nothing is left behind.
    assert.equal(now_us + 60000000, store[state_key("client:a")].expires_us)
    advance(60)
    assert.is_false(fake_call("GET", state_key("client:a")))
  end)

  it("handles limits too large for a whole microsecond per request", function()
    local r = ratelimit.check("k", 1000000000)
    assert.is_true(r.allowed)
    assert.equal(1000000000, r.limit)
    assert.is_true(r.remaining > 0)
  end)

  it("reads the epoch key in the same call", function()
    local r = ratelimit.check("k", 5)
    assert.equal(0, r.epoch)
    assert.equal(1, evals[1].nkeys) -- no epoch key: Redis is not asked for one
    assert.equal(0, ratelimit.check("k", 5, "cred_epoch").epoch)
    local epoch_key = "sgw:{rl" .. key_slot("k") % 16 .. "}:cred_epoch"
    store[epoch_key] = { value = "42" }
    assert.equal(42, ratelimit.check("k", 5, "cred_epoch").epoch)
    assert.equal(2, evals[3].nkeys)
    assert.equal(epoch_key, evals[3][2])
    assert.equal(3, #evals) -- one round trip per check
  end)

  describe("blocks", function()
    local changes
    before_each(function()
      changes = 7
      _G.redis.invalidations = function() return changes end
    end)

    it("spend a busy client's requests in the instance, growing, and charge exactly what was sent", function()
      local limit = 100000 -- blocks of up to 100
      for i = 1, 1000 do
        local r = ratelimit.check("client:big", limit)
        assert.is_true(r.allowed)
        assert.equal(limit - i, r.remaining, "remaining after " .. i)
      end
      -- 1, 2, 4 .. 64 requests, then blocks of 100: a few dozen calls, not a thousand
      assert.is_true(#evals <= 20, #evals .. " calls to Redis")
      assert.is_true(#evals >= 10)
    end)

    it("are the instance's: every worker spends from the block one of them took", function()
      local limit = 100000
      for _ = 1, 8 do ratelimit.check("client:big", limit) end -- blocks of 1, 2, 4, then one of 8
      local calls = #evals
      -- Another worker: its own copy of the module, the same shared store.
      package.loaded.ratelimit = nil
      local other = require("ratelimit")
      for i = 1, 7 do
        local r = other.check("client:big", limit)
        assert.is_true(r.allowed)
        assert.equal(limit - 8 - i, r.remaining)
      end
      assert.equal(calls, #evals, "spent from the block the first worker took, without a call")
      other.check("client:big", limit)
      assert.equal(calls + 1, #evals, "the block is spent: the next request renews it")
    end)

    it("give back what an expired block did not spend", function()
      local limit = 100000 -- one request every 600 us
      -- blocks of 1, 2, 4 .. 64 (127 requests), then one of 100 with 27 unspent
      for _ = 1, 200 do ratelimit.check("client:big", limit) end
      mono = mono + 51 -- the instance's block expires; Redis's clock stands still
      local r = ratelimit.check("client:big", limit)
      local call = evals[#evals] -- state key, limit, want, give back
      assert.same({ state_key("client:big"), limit, 73, 27 }, { call[1], call[2], call[3], call[4] })
      assert.equal(limit - 201, r.remaining)
      -- Redis holds what was sent plus the instance's new block of 73 (72 unspent).
      local tat = tonumber(store[state_key("client:big")].value)
      assert.equal(limit - 201 - 72, (60000000 - (tat - now_us)) // 600)
    end)

    it("end at once when a credential changes anywhere", function()
      local limit = 100000
      for _ = 1, 50 do ratelimit.check("client:big", limit) end
      local before = #evals
      ratelimit.check("client:big", limit)
      assert.equal(before, #evals) -- still inside a block
      changes = 8
      ratelimit.check("client:big", limit)
      assert.equal(before + 1, #evals)
    end)

    it("are not used for small limits, nor without news of credential changes", function()
      for _ = 1, 20 do ratelimit.check("client:small", 1999) end
      assert.equal(20, #evals)
      _G.redis.invalidations = function() return nil end
      for _ = 1, 20 do ratelimit.check("client:big", 100000) end
      assert.equal(40, #evals)
    end)

    -- The host's waits: a request's call yields until Redis answers, and
    -- other requests run meanwhile.
    describe("renewed while requests keep arriving", function()
      local waiting, sent

      before_each(function()
        waiting, sent = {}, 0
        _G.redis.eval_cached = function(script, nkeys, ...)
          sent = sent + 1
          return coroutine.yield({ script = script, args = { nkeys, ... } })
        end
      end)

      -- Starts request `who`: true when it waits for its call's reply (the
      -- call is on its way), else false and its answer.
      local function start(who, limit)
        local co = coroutine.create(function() return ratelimit.check("client:busy", limit) end)
        local ok, r = coroutine.resume(co)
        assert(ok, r)
        if coroutine.status(co) == "suspended" then
          waiting[who] = { co = co, call = r }
          return true
        end
        return false, r
      end

      -- Redis answers who's call: the request goes on; returns its answer.
      local function answer(who)
        local w = assert(waiting[who], "no call on its way for " .. who)
        waiting[who] = nil
        local ok, r = coroutine.resume(w.co, eval(w.call.script, table.unpack(w.call.args)))
        assert(ok, r)
        return r
      end

      local function spent_in_redis(limit)
        local tat = tonumber(store[state_key("client:busy")].value)
        return limit - (60000000 - (tat - now_us)) // (60000000 // limit)
      end

      it("lends from the renewal on its way: one call to Redis, not one per request", function()
        local limit = 100000 -- one request every 600 us, blocks of up to 100
        assert.is_true(start("r1", limit))
        assert.is_true(answer("r1").allowed) -- a block of 1, spent
        assert.is_true(start("r2", limit))   -- asks for 2
        local waits, r = start("lend", limit)
        assert.is_false(waits, "lent from the renewal on its way")
        assert.is_true(r.allowed)
        assert.is_true(start("beside", limit), "the credit is spent: this one asks alone")
        assert.is_true(answer("r2").allowed)
        assert.is_true(answer("beside").allowed)
        assert.equal(3, sent)
        -- Charged exactly: 4 requests sent, the renewal's 2 both spent.
        assert.equal(4, spent_in_redis(limit))
      end)

      it("gives an expired block's rest back once, however many requests find it expired", function()
        local limit = 100000
        local total = 0
        local function send(who)
          total = total + 1
          if start(who, limit) then return answer(who) end
        end
        -- Blocks of 1, 2, 4, 8, 16 run out in time; 5 of the next block of 32.
        for i = 1, 36 do send("grow" .. i) end
        mono = mono + 51 -- that block expires with 27 requests left in it
        assert.is_true(start("renew", limit))
        total = total + 1
        assert.same({ 5, 27 }, { waiting.renew.call.args[4], waiting.renew.call.args[5] }) -- want what was used, give the rest
        for i = 1, 4 do
          assert.is_false((start("meanwhile" .. i, limit)), "lent from the renewal")
          total = total + 1
        end
        assert.is_true(answer("renew").allowed)
        -- Once more, so that everything this worker held goes back.
        mono = mono + 51
        assert.is_true(start("final", limit))
        total = total + 1
        local final_want = waiting.final.call.args[4]
        assert.is_true(answer("final").allowed)
        -- Redis holds what was sent plus the final block's unspent part:
        -- nothing given back twice, nothing lost.
        assert.equal(total + final_want - 1, spent_in_redis(limit))
      end)

      it("forgets a renewal whose reply never came", function()
        local limit = 100000
        assert.is_true(start("lost", limit)) -- Redis never answers it
        mono = mono + 101
        assert.is_true(start("next", limit), "a new renewal, not credit from the lost one")
        assert.is_true(answer("next").allowed)
      end)
    end)

    it("share the one budget: a block never takes more than is left", function()
      local limit = 4000 -- blocks of up to 4
      for _ = 1, 3990 do assert.is_true(ratelimit.check("client:edge", limit).allowed) end
      local allowed = 0
      for _ = 1, 50 do
        if ratelimit.check("client:edge", limit).allowed then allowed = allowed + 1 end
      end
      assert.equal(10, allowed)
      local r = ratelimit.check("client:edge", limit)
      assert.is_false(r.allowed)
      assert.equal(0, r.remaining)
    end)
  end)

  describe("headers", function()
    it("carries the limit, remaining and reset as integers (the host writes them out)", function()
      local h = ratelimit.headers(ratelimit.check("k", 5))
      assert.same({ ["X-RateLimit-Limit"] = 5, ["X-RateLimit-Remaining"] = 4, ["X-RateLimit-Reset"] = 12 }, h)
      for _, v in pairs(h) do assert.equal("integer", math.type(v)) end
    end)

    it("adds Retry-After when refused", function()
      for _ = 1, 2 do ratelimit.check("k", 2) end
      assert.same({ ["X-RateLimit-Limit"] = 2, ["X-RateLimit-Remaining"] = 0,
        ["X-RateLimit-Reset"] = 60, ["Retry-After"] = 30 }, ratelimit.headers(ratelimit.check("k", 2)))
    end)
  end)

  describe("when Redis fails", function()
    it("fails open, counts every request and logs at most every 10 s", function()
      down = true
      for _ = 1, 3 do
        local r = ratelimit.check("k", 5, "sgw:cred_epoch")
        assert.same({ allowed = true, limit = 5, remaining = 5, reset = 60, failed_open = true }, r)
        assert.is_nil(r.epoch) -- unknown: the caller must not trust its caches
      end
      assert.equal(3, counted)
      assert.equal(1, #logged)
      assert.equal("ratelimit_fail_open", logged[1].event)
      assert.equal("Connection refused", logged[1].fields.error)
      assert.equal("unavailable", logged[1].fields.class)
      mono = mono + 9999
      ratelimit.check("k", 5)
      assert.equal(1, #logged)
      mono = mono + 1
      ratelimit.check("k", 5)
      assert.equal(2, #logged)
      assert.same({ ["X-RateLimit-Limit"] = 5, ["X-RateLimit-Remaining"] = 5, ["X-RateLimit-Reset"] = 60 },
        ratelimit.headers(ratelimit.check("k", 5)))
    end)

    it("fails open on an error reply too", function()
      _G.redis.eval_cached = function() return nil, "OOM command not allowed" end
      assert.is_true(ratelimit.check("k", 1).allowed)
      assert.is_true(ratelimit.check("k", 1).failed_open)
      assert.equal(2, counted)
    end)

    it("applies limits again once Redis is back", function()
      down = true
      for _ = 1, 10 do assert.is_true(ratelimit.check("k", 2).allowed) end
      down = false
      assert.is_true(ratelimit.check("k", 2).allowed)
      assert.is_true(ratelimit.check("k", 2).allowed)
      local r = ratelimit.check("k", 2)
      assert.is_false(r.allowed)
      assert.is_nil(r.failed_open)
    end)
  end)
end)

-- A fake of the host's globals for unit specs of lib/ and handlers/: config
-- from config/sgw.conf (with overrides), a settable clock, a silent log, the
-- shared store, and the few crypto functions pure code needs. Anything else
-- is left out on purpose, so a unit under test that reaches for I/O fails
-- loudly.
local M = {}

local function read_defaults()
  local values = {}
  for line in io.lines("config/sgw.conf") do
    local k, v = line:match("^%s*([%w._]+)%s*=%s*(.-)%s*$")
    if k then
      if v == "true" then v = true
      elseif v == "false" then v = false
      elseif tonumber(v) then v = tonumber(v) end
      values[k] = v
    end
  end
  return values
end

-- A fake of the process's shared store (unbounded), its times to live on
-- now_ms(), a function giving the time in milliseconds.
function M.shared_store(now_ms)
  local store = {}
  local function live(key)
    local e = store[key]
    if e and e.expires and e.expires <= now_ms() then store[key], e = nil, nil end
    return e
  end
  local function put(key, value, ttl_ms)
    store[key] = { value = value, expires = (ttl_ms or 0) > 0 and now_ms() + ttl_ms or nil }
    return true
  end
  return {
    get = function(key) local e = live(key) return e and e.value end,
    set = put,
    add = function(key, value, ttl_ms)
      if live(key) then return false, "exists" end
      return put(key, value, ttl_ms)
    end,
    replace = function(key, value, ttl_ms)
      if not live(key) then return false, "not found" end
      return put(key, value, ttl_ms)
    end,
    incr = function(key, delta, init, init_ttl_ms)
      local e = live(key)
      if not e then
        if init == nil then return nil, "not found" end
        put(key, init, init_ttl_ms)
        e = store[key]
      end
      assert(type(e.value) == "number", "shared.incr: the value of this key is not a number")
      e.value = e.value + delta
      return e.value
    end,
    delete = function(key) local e = live(key) store[key] = nil return e ~= nil end,
    ttl = function(key)
      local e = live(key)
      if not e then return nil, "not found" end
      return e.expires and e.expires - now_ms() or 0
    end,
  }
end

-- What db.read_result gives, made from rows as db.query gives them (a
-- recording db's answer): #res, res:get(row, column), res:json(view, first,
-- last) written in Lua as host/json.c writes it (as text: the fake host has
-- no raw JSON for encode), res:close().
function M.result(rows)
  local json = require "json"
  local methods = {}
  function methods.get(_, i, column) return assert(rows[i], "no such row")[column] end
  function methods.json(_, view, first, last)
    local out = {}
    for i = first or 1, last or #rows do
      out[#out + 1] = view[1]
      for p = 2, #view - 1, 3 do
        local v = rows[i][view[p]]
        out[#out + 1] = (v == nil and view[p + 1] or json.encode(v)) .. view[p + 2]
      end
      out[#out + 1] = ","
    end
    if #out > 0 then out[#out] = nil end
    return "[" .. table.concat(out) .. "]"
  end
  function methods.close() end
  return setmetatable({}, { __index = methods, __len = function() return #rows end, __close = function() end })
end

function M.install(overrides)
  local values = read_defaults()
  for k, v in pairs(overrides or {}) do values[k] = v end
  local now = 1700000000
  _G.config = { get = function(k) return values[k] end }
  _G.log = { debug = function() end, info = function() end, warn = function() end, error = function() end }
  _G.clock = {
    now = function() return now end,
    mono_ms = function() return now * 1000 end,
    set = function(t) now = t end,
    iso = function(t) return os.date("!%Y-%m-%dT%H:%M:%S.000Z", math.floor(t or now)) end,
  }
  _G.metrics = { inc = function() end, set = function() end }
  -- Code under a unit spec runs outside a worker's loop: no coroutine may
  -- wait on another (as in the CLI), so lib/coalesce.lua calls through.
  _G.sched = {
    waitable = function() return false end,
    later = function() end,
    event = function()
      local set = false
      return {
        set = function() set = true end,
        is_set = function() return set end,
        wait = function() if not set then error("sched: this coroutine cannot wait here", 2) end end,
      }
    end,
  }
  -- The process's shared store, its times to live on the clock above.
  _G.shared = M.shared_store(function() return now * 1000 end)
  -- Files of the checkout, as the host's asset() gives those of the loaded code.
  _G.asset = function(path)
    local f = io.open(path, "rb")
    if not f then return nil end
    local text = f:read("a")
    f:close()
    return text
  end
  _G.crypto = {
    random_token = function(n)
      local chars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
      local t = {}
      for i = 1, n do
        local j = math.random(1, #chars)
        t[i] = chars:sub(j, j)
      end
      return table.concat(t)
    end,
    constant_eq = function(a, b) return a == b end,
  }
  return values
end

return M

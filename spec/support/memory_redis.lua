-- An in-memory `redis` global for unit specs of Lua that keeps a little state
-- in Redis: GET, SET (with PX), MGET and DEL on strings, expiry read from the
-- spec's clock (clock.now()), and MGET refusing keys of different hash
-- slots as a cluster does. Not a model of Redis: just enough of those.
local M = {}

function M.install()
  local store = {}
  local function live(k)
    local e = store[k]
    if e and e.expires and clock.now() >= e.expires then store[k], e = nil, nil end
    return e
  end
  local commands = {
    GET = function(k) local e = live(k); return e and e.value or redis.null end,
    SET = function(k, v, px, ms)
      store[k] = { value = tostring(v), expires = px == "PX" and clock.now() + tonumber(ms) / 1000 or nil }
      return "OK"
    end,
    MGET = function(...)
      -- As on a Redis Cluster: the keys of one call must share a hash slot
      -- (here: the same {tag}, or the same key).
      local slot
      for _, k in ipairs({ ... }) do
        local tagged = k:match("{([^}]+)}") or k
        assert(slot == nil or slot == tagged, "CROSSSLOT Keys in request don't hash to the same slot")
        slot = tagged
      end
      local out = {}
      for i, k in ipairs({ ... }) do local e = live(k); out[i] = e and e.value or redis.null end
      return out
    end,
    DEL = function(...)
      local n = 0
      for _, k in ipairs({ ... }) do if live(k) then store[k], n = nil, n + 1 end end
      return n
    end,
  }
  _G.redis = {
    null = setmetatable({}, { __tostring = function() return "redis.null" end }),
    call = function(cmd, ...)
      local f = assert(commands[cmd:upper()], "memory_redis does not do " .. cmd)
      return f(...)
    end,
  }
  return store
end

return M

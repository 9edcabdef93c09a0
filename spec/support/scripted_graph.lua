-- A scripted `http` for the adapter specs (lib/platforms/): each expected
-- Graph call in order, with what it answers. Every call made is recorded in
-- `calls`; a call nobody expected fails the spec.
local cjson = require "cjson"
local form = require "form"
local memory_redis = require "memory_redis"
local assert = require "luassert"

local M = {
  BASE = "https://graph.test/v21.0",
  TOKEN = "EAAB-page-token-secret",
  calls = {},
  script = {},
}

local function clear(t)
  for k in pairs(t) do t[k] = nil end
end

-- One scripted answer: expect "METHOD path", answer {status, body, headers}
-- or fail = kind.
function M.on(expect, answer)
  answer = answer or {}
  answer.expect = expect
  M.script[#M.script + 1] = answer
end

function M.ok(body, headers)
  return { status = 200, body = cjson.encode(body), headers = headers or {} }
end

function M.graph_error(status, err)
  return { status = status, body = cjson.encode({ error = err }), headers = {} }
end

--- Empties calls and script and installs the scripted `http` as a global.
--- opts.strip_token: record parameters without access_token.
function M.install(opts)
  clear(M.calls)
  clear(M.script)
  _G.http = {
    request = function(req)
      local url, query = req.url:match("^([^?]*)%??(.*)$")
      assert.equal(M.BASE, url:sub(1, #M.BASE))
      local params = assert(form.parse(req.method == "POST" and req.body or query))
      if opts and opts.strip_token then params.access_token = nil end
      local call = { method = req.method, path = url:sub(#M.BASE + 2), params = params, timeout = req.timeout }
      M.calls[#M.calls + 1] = call
      local step = assert(table.remove(M.script, 1), "unexpected Graph call " .. call.method .. " " .. call.path)
      assert.equal(step.expect, call.method .. " " .. call.path)
      if step.fail then return nil, "scripted " .. step.fail, step.fail end
      return { status = step.status, headers = step.headers or {}, body = step.body }
    end,
  }
  -- Throttles remembered by platforms.graph_pause, fresh for every spec. The
  -- digest only has to tell tokens apart here (the host's is SHA-256).
  M.redis = memory_redis.install()
  crypto.sha256_hex = crypto.sha256_hex or function(s)
    return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
  end
  for _, m in ipairs { "platforms.graph", "platforms.graph_pause", "platforms.facebook", "platforms.instagram" } do
    package.loaded[m] = nil
  end
end

return M

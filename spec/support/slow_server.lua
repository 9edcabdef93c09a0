-- Starts spec/support/slow_server (built into the build directory): an HTTP
-- server that answers after delay_ms and reports the most requests it held
-- at once (GET /stats), which shows whether a client really runs its calls
-- concurrently. Returns { url, port, pid, stats(), reset(), stop() }.
local stack = require("stack")
local cjson = require("cjson")

local q = stack.shell_quote

local M = {}

function M.start(delay_ms)
  local bin = stack.build_dir() .. "/slow_server"
  local out = os.tmpname()
  -- `timeout` bounds its life should the spec die before its teardown.
  local code, pid = stack.sh("timeout 900 " .. q(bin) .. " 0 " .. delay_ms .. " > " .. q(out)
    .. " 2>&1 & echo $!")
  assert(code == 0, pid)
  local server = { pid = tonumber(pid:match("%d+")) }
  stack.eventually(function()
    local f = io.open(out, "r")
    local text = f and f:read("a") or ""
    if f then f:close() end
    server.port = tonumber(text:match("port (%d+)"))
    return server.port
  end, 10, 0.05, "slow_server did not start")
  os.remove(out)
  server.url = "http://127.0.0.1:" .. server.port
  function server.stats()
    local status, body = stack.request("GET", server.url .. "/stats", { timeout = 5 })
    assert(status == 200, "slow_server /stats answered " .. tostring(status))
    return cjson.decode(body)
  end
  function server.reset()
    stack.request("POST", server.url .. "/reset")
  end
  function server.stop()
    os.execute("kill " .. server.pid .. " 2>/dev/null")
  end
  return server
end

return M

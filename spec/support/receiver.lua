-- spec/support/receiver.lua — client webhook receivers for the specs
-- (spec/support/webhook_receiver.py, which checks Standard Webhooks
-- signatures with its own code): start one, configure it, read what it got.
local stack = require "stack"
local cjson = require "cjson.safe"

local q = stack.shell_quote

local M = {}

local receivers = {}

--- Starts a receiver; returns { pid, url, hook, config(t), deliveries(), events(type) }.
function M.start()
  local port = stack.free_port()
  local logs = stack.build_dir() .. "/test-logs"
  os.execute("mkdir -p " .. q(logs))
  -- $PPID is this Lua process: the receiver exits once it is gone.
  local code, out = stack.sh("python3 " .. q(stack.repo_root() .. "/spec/support/webhook_receiver.py")
    .. " --port " .. port .. " --owner $PPID >> " .. q(logs .. "/webhook-receiver-" .. port .. ".log")
    .. " 2>&1 < /dev/null & echo $!")
  assert(code == 0, out)
  local r = { pid = tonumber(out:match("%d+")), url = "http://127.0.0.1:" .. port }
  r.hook = r.url .. "/hook"
  receivers[#receivers + 1] = r
  function r.config(t)
    local status = stack.json("POST", r.url .. "/_control/config", { body = t })
    assert(status == 200, "receiver config failed")
  end
  function r.deliveries()
    local _, body = stack.json("GET", r.url .. "/_control/deliveries")
    return body.data
  end
  --- The verified events of this type received so far (decoded bodies).
  function r.events(type)
    local out = {}
    for _, d in ipairs(r.deliveries()) do
      local ev = cjson.decode(d.body or "")
      if d.verified and ev and ev.type == type then out[#out + 1] = ev end
    end
    return out
  end
  stack.eventually(function() return stack.request("GET", r.url .. "/_control/health", { timeout = 1 }) == 200 end,
    10, 0.05, "webhook receiver to start")
  return r
end

function M.stop_all()
  for _, r in ipairs(receivers) do os.execute("kill " .. r.pid .. " 2>/dev/null") end
  receivers = {}
end

return M

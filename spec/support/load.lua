-- spec/support/load.lua — wrk in the background, for specs that need traffic
-- flowing while they do something else (reload, stop). The load runs until
-- the spec stops it, not for a fixed time: a spec waits on what it checks,
-- and wrk is not left spinning on a server that is gone.
local stack = require "stack"

local q = stack.shell_quote

local M = {}

local running = {}

-- Exited, also when not reaped yet (its parent, the shell that started it,
-- is gone, and a zombie waits for whoever adopted it).
local function gone(pid)
  local f = io.open("/proc/" .. pid .. "/stat", "r")
  if not f then return true end
  local stat = f:read("a") or ""
  f:close()
  return stat:match("^%d+ %b() (%a)") == "Z"
end

--- Starts wrk against URL. opts: threads, connections, timeout (seconds),
--- script (path of a wrk Lua script), out (file for what wrk prints; its
--- done() function runs on stop). Returns { pid, stop() }.
function M.start(url, opts)
  opts = opts or {}
  -- The duration only bounds a load whose spec died before stopping it.
  local cmd = "wrk -t" .. (opts.threads or 2) .. " -c" .. (opts.connections or 16) .. " -d120s"
    .. " --timeout " .. (opts.timeout or 5) .. "s"
    .. (opts.script and (" -s " .. q(opts.script)) or "") .. " " .. q(url)
  local code, out = stack.sh(cmd .. " > " .. q(opts.out or "/dev/null") .. " 2>&1 < /dev/null & echo $!")
  local pid = code == 0 and tonumber(out:match("(%d+)%s*$"))
  assert(pid, "wrk did not start: " .. out)
  local load = { pid = pid }
  running[pid] = true
  --- Interrupts wrk (it then prints its summary) and waits until it exited;
  --- once stopped, stopping again does nothing. wrk ignores SIGINT until its
  --- threads are made, so the signal is sent again while it runs, and after
  --- 10 s it is killed (without a summary).
  function load.stop()
    if not running[pid] then return end
    local stopped = pcall(stack.eventually, function()
      if gone(pid) then return true end
      os.execute("kill -INT " .. pid .. " 2>/dev/null")
    end, 10, 0.05)
    if not stopped then os.execute("kill -KILL " .. pid .. " 2>/dev/null") end
    running[pid] = nil
  end
  return load
end

--- Stops every load still running (for a teardown).
function M.stop_all()
  for pid in pairs(running) do os.execute("kill -KILL " .. pid .. " 2>/dev/null") end
  running = {}
end

return M

-- spec/support/own_services.lua — a PostgreSQL or a Redis of a spec's own,
-- for specs that stop and start them (the shared test services must never
-- go down under the other specs).
--
--   local own = require("own_services")
--   local pg = own.postgres("outage", "sgw_outage")  -- started
--   ... pg.url ... pg.stop() ... pg.start() ... pg.purge()
--   local r = own.redis()                            -- not started
--   r.start() ... r.kill() (a crash) ... r.stop() (SHUTDOWN) ... r.start()
local stack = require("stack")

local M = {}

local q = stack.shell_quote

--- A PostgreSQL (spec/support/services, without Redis) on a free port with
--- database `database`, started. Returns { port, url, start(), stop()
--- (pg_ctl -m fast), purge() (stops it and deletes its data) }.
function M.postgres(name, database)
  local dir = stack.build_dir() .. "/test-services/" .. stack.slug(name) .. "-pg-" .. stack.free_port()
  local port = stack.free_port()
  local pg = { port = port, url = "postgresql://postgres@127.0.0.1:" .. port .. "/" .. database }
  function pg.start()
    local code, out = stack.sh("bash spec/support/services start " .. q(dir) .. " --without-redis --pg-port "
      .. port .. " --database " .. q(database))
    assert(code == 0, out)
  end
  function pg.stop()
    local code, out = stack.sh("bash spec/support/services stop " .. q(dir))
    assert(code == 0, out)
  end
  function pg.purge()
    stack.sh("bash spec/support/services stop " .. q(dir) .. " --purge")
  end
  pg.start()
  return pg
end

--- A redis-server on a free port, not started yet. Returns { port, url,
--- start(), kill() (SIGKILL, like a crash), stop() (SHUTDOWN NOSAVE) }; both
--- wait until the process is gone, start() until it answers PING.
function M.redis()
  local port = stack.free_port()
  local dir = stack.build_dir() .. "/test-logs/own-redis-" .. port
  local r = { port = port, url = "redis://127.0.0.1:" .. port }
  local function gone()
    stack.eventually(function() return stack.sh("kill -0 " .. r.pid) ~= 0 end, 10, 0.05, "redis gone")
    r.pid = nil
  end
  function r.start()
    os.execute("mkdir -p " .. q(dir))
    local code, out = stack.sh("redis-server --port " .. port .. " --bind 127.0.0.1 --daemonize yes"
      .. " --pidfile " .. q(dir .. "/redis.pid") .. " --logfile " .. q(dir .. "/redis.log")
      .. " --dir " .. q(dir) .. " --save '' --appendonly no")
    assert(code == 0, "redis-server did not start: " .. out)
    stack.eventually(function()
      local _, pong = stack.sh("redis-cli -p " .. port .. " ping")
      return pong:match("PONG")
    end, 10, 0.05, "redis answers PING")
    local f = assert(io.open(dir .. "/redis.pid"))
    r.pid = tonumber(f:read("a"):match("%d+"))
    f:close()
  end
  function r.kill()
    if not r.pid then return end
    os.execute("kill -KILL " .. r.pid)
    gone()
  end
  function r.stop()
    if not r.pid then return end
    stack.sh("redis-cli -p " .. port .. " shutdown nosave")
    gone()
  end
  return r
end

return M

-- A private Redis Cluster for specs, on free ports: redis_cluster.start {
-- masters = 3, replicas = 0|1 } starts the servers, joins them
-- (redis-cli --cluster create) and waits until every node says
-- cluster_state:ok. Returns { urls = "redis://...,...", nodes = { {port, pid}
-- ... }, cli(port, args...), master_of(slot), slot_of(key), kill(node), stop() }.
local stack = require "stack"

local q = stack.shell_quote
local M = {}

local function cli(port, ...)
  local args = {}
  for i, a in ipairs { ... } do args[i] = q(tostring(a)) end
  local code, out = stack.sh("redis-cli -p " .. port .. " " .. table.concat(args, " "))
  assert(code == 0, "redis-cli " .. table.concat(args, " ") .. ": " .. out)
  return (out:gsub("%s+$", ""))
end

local function start_node(dir)
  local port, bus = stack.free_port(), stack.free_port()
  local node_dir = dir .. "/" .. port
  os.execute("mkdir -p " .. q(node_dir))
  local code, out = stack.sh("redis-server --port " .. port .. " --cluster-port " .. bus
    .. " --bind 127.0.0.1 --daemonize yes --cluster-enabled yes --cluster-node-timeout 1000"
    .. " --cluster-config-file " .. q(node_dir .. "/nodes.conf")
    .. " --pidfile " .. q(node_dir .. "/redis.pid") .. " --logfile " .. q(node_dir .. "/redis.log")
    .. " --dir " .. q(node_dir) .. " --save '' --appendonly no")
  assert(code == 0, "redis-server did not start: " .. out)
  stack.eventually(function()
    local _, pong = stack.sh("redis-cli -p " .. port .. " ping")
    return pong:match("PONG")
  end, 10, 0.05, "cluster node answers PING")
  local f = assert(io.open(node_dir .. "/redis.pid"))
  local pid = tonumber(f:read("a"):match("%d+"))
  f:close()
  return { port = port, pid = pid }
end

function M.start(opts)
  opts = opts or {}
  local masters, replicas = opts.masters or 3, opts.replicas or 0
  local dir = stack.build_dir() .. "/test-logs/redis-cluster-" .. stack.free_port()
  local c = { nodes = {} }
  local addrs, urls = {}, {}
  for i = 1, masters * (1 + replicas) do
    c.nodes[i] = start_node(dir)
    addrs[i] = "127.0.0.1:" .. c.nodes[i].port
    urls[i] = "redis://" .. addrs[i]
  end
  local code, out = stack.sh("redis-cli --cluster create " .. table.concat(addrs, " ")
    .. " --cluster-replicas " .. replicas .. " --cluster-yes")
  assert(code == 0, "redis-cli --cluster create: " .. out)
  c.urls = table.concat(urls, ",", 1, masters) -- masters as seeds: the replicas are found

  c.cli = cli
  function c.alive()
    local list = {}
    for _, n in ipairs(c.nodes) do if n.pid then list[#list + 1] = n end end
    return list
  end
  function c.wait_ok(message)
    stack.eventually(function()
      for _, n in ipairs(c.alive()) do
        if not cli(n.port, "cluster", "info"):find("cluster_state:ok", 1, true) then return false end
      end
      return true
    end, 20, 0.05, message or "cluster_state:ok on every node")
  end
  function c.slot_of(key)
    return tonumber(cli(c.nodes[1].port, "cluster", "keyslot", key))
  end
  -- The node serving a slot now, as the first live node sees it: { port, pid, id }.
  function c.master_of(slot)
    local _, out = stack.sh("redis-cli -p " .. c.alive()[1].port .. " cluster nodes")
    for line in out:gmatch("[^\n]+") do
      local f = {}
      for w in line:gmatch("%S+") do f[#f + 1] = w end
      if f[3] and f[3]:find("master", 1, true) and not f[3]:find("fail", 1, true) then
        for i = 9, #f do
          local from, to = f[i]:match("^(%d+)%-(%d+)$")
          from = tonumber(from or f[i]:match("^(%d+)$"))
          to = tonumber(to) or from
          if from and slot >= from and slot <= to then
            local port = tonumber(f[2]:match(":(%d+)@"))
            for _, m in ipairs(c.nodes) do
              if m.port == port then return { port = port, pid = m.pid, id = f[1] } end
            end
          end
        end
      end
    end
  end
  function c.node_id(port)
    return cli(port, "cluster", "myid")
  end
  function c.kill(node)
    for _, n in ipairs(c.nodes) do
      if n.port == node.port and n.pid then
        os.execute("kill -KILL " .. n.pid)
        local pid = n.pid
        stack.eventually(function() return stack.sh("kill -0 " .. pid) ~= 0 end, 10, 0.05, "node gone")
        n.pid = nil
      end
    end
  end
  function c.stop()
    for _, n in ipairs(c.nodes) do c.kill(n) end
  end
  c.wait_ok()
  -- A replica that has not synced with its master yet cannot take over
  -- from it: a spec that kills a master right after the start would wait
  -- for a failover that never comes.
  stack.eventually(function()
    for _, n in ipairs(c.alive()) do
      local info = cli(n.port, "info", "replication")
      if info:find("role:slave", 1, true) and not info:find("master_link_status:up", 1, true) then return false end
    end
    return true
  end, 20, 0.05, "every replica in sync with its master")
  return c
end

return M

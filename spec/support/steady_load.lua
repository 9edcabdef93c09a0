-- spec/support/steady_load.lua — a steady mix of API requests from several
-- connections at once, each a lua5.4 process of its own (this file run as a
-- script) that sends its requests one after another and writes down every
-- answer, until the spec says stop.
--
--   local steady_load = require("steady_load")
--   local load = steady_load.start(sgw.base_url, { clients = 4, requests = {
--     { name = "create", method = "POST", path = "/api/v1/posts", headers = { ["X-Api-Key"] = key },
--       body = { content = { type = "text", message = "{key}" }, ... }, idempotent = true },
--     { name = "list", method = "GET", path = "/api/v1/posts", headers = { ["X-Api-Key"] = key } },
--   } })
--   load.wait_for(function(answers) return #answers > 50 end, 20, "fifty answers")
--   local answers = load.stop()
--
-- Each client goes round the requests in order. A request marked idempotent
-- gets Idempotency-Key <prefix>-<client>-<n>, and "{key}" in its body
-- becomes that key (so a post's message names its key). An answer:
--   { client, n, name, key, status (nil when the connection failed), error,
--     retry_after, content_type, code (a problem's), problem_status, id (the
--     resource's id of a 2xx), started, ended (seconds, this machine's clock) }
-- Request bodies are kept (answer.request) so that a spec can send one again.
local M = {}

local function script_path()
  return debug.getinfo(1, "S").source:sub(2)
end

-- ------------------------------------------------------------------ client
-- Run as `lua5.4 steady_load.lua PLAN CLIENT OUT STOP MAX_SECONDS`.
local function run_client(plan_path, client, out_path, stop_path, max_seconds)
  local cjson = require("cjson")
  local cjson_safe = require("cjson.safe")
  local http = require("socket.http")
  local ltn12 = require("ltn12")
  local socket = require("socket")

  local f = assert(io.open(plan_path, "rb"))
  local plan = cjson.decode(f:read("a"))
  f:close()
  local out = assert(io.open(out_path, "ab"))
  out:setvbuf("line")
  http.TIMEOUT = plan.timeout or 10
  local stop_at = socket.gettime() + max_seconds

  local function stopped()
    local s = io.open(stop_path, "rb")
    if s then s:close() end
    return s ~= nil or socket.gettime() > stop_at
  end

  local n = 0
  while not stopped() do
    for _, r in ipairs(plan.requests) do
      n = n + 1
      local headers = {}
      for k, v in pairs(r.headers or {}) do headers[k:lower()] = v end
      local key
      if r.idempotent then
        key = plan.prefix .. "-" .. client .. "-" .. n
        headers["idempotency-key"] = key
      end
      local body
      if r.body ~= nil then
        body = cjson.encode(r.body):gsub("{key}", key or "")
        headers["content-type"] = "application/json"
        headers["content-length"] = tostring(#body)
      end
      local chunks = {}
      local started = socket.gettime()
      local ok, status, resp_headers = http.request({ url = plan.base_url .. r.path, method = r.method,
        headers = headers, source = body and ltn12.source.string(body) or nil, sink = ltn12.sink.table(chunks),
        redirect = false })
      local answer = { client = client, n = n, name = r.name, key = key, request = body, started = started,
        ended = socket.gettime() }
      if ok then
        answer.status = status
        local h = {}
        for k, v in pairs(resp_headers or {}) do h[k:lower()] = v end
        answer.retry_after, answer.content_type = h["retry-after"], h["content-type"]
        local value = cjson_safe.decode(table.concat(chunks))
        if type(value) == "table" then
          if status >= 400 then
            answer.code, answer.problem_status = value.code, value.status
          elseif type(value.resource) == "table" then
            answer.id = value.resource.postId or value.resource.id
          else
            answer.id = value.id
          end
        end
      else
        answer.error = tostring(status)
      end
      out:write(cjson.encode(answer), "\n")
      if stopped() then break end
    end
    -- A steady load, not as much as the machine can send.
    if plan.pause > 0 then socket.sleep(plan.pause) end
  end
  out:close()
  local done = assert(io.open(out_path .. ".done", "wb"))
  done:close()
end

if (...) ~= "steady_load" and arg and arg[0] and arg[0]:match("steady_load%.lua$") then
  run_client(arg[1], tonumber(arg[2]), arg[3], arg[4], tonumber(arg[5]))
  return
end

-- ------------------------------------------------------------------ spec side
local stack = require("stack")
local cjson = require("cjson")
local cjson_safe = require("cjson.safe")

local q = stack.shell_quote
local running = {}

--- Starts opts.clients (default 4) clients sending opts.requests to base_url
--- (see above); opts.prefix names the idempotency keys (default: a unique
--- name), opts.timeout is each request's (default 10 s), opts.pause the
--- pause of each client after each round (default 0.05 s), opts.max_seconds
--- how long a client runs at most, stopped or not (default 120). Loads still
--- running are stopped by stop_all(), when this module is collected.
--- Returns { answers(), wait_for(fn, timeout, what), stop() }.
function M.start(base_url, opts)
  local dir = stack.build_dir() .. "/test-roots/" .. stack.unique_name("steady_load")
  assert(stack.sh("mkdir -p " .. q(dir)) == 0)
  local n = opts.clients or 4
  local plan = { base_url = base_url, requests = opts.requests, prefix = opts.prefix or stack.unique_name("load"),
    timeout = opts.timeout or 10, pause = opts.pause or 0.05 }
  local f = assert(io.open(dir .. "/plan.json", "wb"))
  f:write(cjson.encode(plan))
  f:close()
  local stop_path = dir .. "/stop"
  for i = 1, n do
    local code, out = stack.sh("(lua5.4 " .. q(script_path()) .. " " .. q(dir .. "/plan.json") .. " " .. i .. " "
      .. q(dir .. "/answers-" .. i) .. " " .. q(stop_path) .. " " .. (opts.max_seconds or 120)
      .. " > " .. q(dir .. "/client-" .. i .. ".log") .. " 2>&1 &)")
    assert(code == 0, out)
  end

  local load = { prefix = plan.prefix }
  running[load] = true

  --- Every answer so far, in each client's order, client after client.
  function load.answers()
    local all = {}
    for i = 1, n do
      local a = io.open(dir .. "/answers-" .. i, "rb")
      if a then
        for line in a:lines() do
          -- A line being written is not whole yet: skip it.
          local value = cjson_safe.decode(line)
          if value then
            value.client, value.n = math.tointeger(value.client), math.tointeger(value.n)
            all[#all + 1] = value
          end
        end
        a:close()
      end
    end
    return all
  end

  --- Waits until fn(answers so far) is true; raises naming `what` after timeout s.
  function load.wait_for(fn, timeout, what)
    stack.eventually(function() return fn(load.answers()) end, timeout, 0.1, what)
  end

  --- Tells the clients to stop, waits until they have (each finishes its
  --- request under way) and returns every answer.
  function load.stop()
    running[load] = nil
    local s = assert(io.open(stop_path, "wb"))
    s:close()
    stack.eventually(function()
      for i = 1, n do
        local d = io.open(dir .. "/answers-" .. i .. ".done", "rb")
        if not d then
          local log = io.open(dir .. "/client-" .. i .. ".log", "rb")
          local text = log and log:read("a") or ""
          if log then log:close() end
          return false, "client " .. i .. " still running " .. text
        end
        d:close()
      end
      return true
    end, (opts.timeout or 10) + 10, 0.05, "the load clients to stop")
    return load.answers()
  end

  return load
end

--- Stops every load still running (a spec's teardown, should it fail before load.stop()).
function M.stop_all()
  for load in pairs(running) do pcall(load.stop) end
end

M._sentinel = setmetatable({}, { __gc = function() M.stop_all() end })

--- Sends n GETs of path to inst at once, each from a curl of its own in the
--- background; returns a function that waits (timeout seconds) until all
--- have answered and gives their statuses (strings, "000" for no answer) and
--- how long each took (seconds), in the order they answered.
function M.burst(inst, n, path)
  local dir = stack.build_dir() .. "/test-roots/" .. stack.unique_name("burst")
  assert(stack.sh("mkdir -p " .. q(dir)) == 0)
  local codes, done = dir .. "/codes", dir .. "/done"
  local url = inst.base_url .. path
  assert(stack.sh("((for i in $(seq " .. n .. "); do curl -s -m 60 -o /dev/null -w '%{http_code} %{time_total}\\n' "
    .. q(url) .. " >> " .. q(codes) .. " & done; wait; touch " .. q(done) .. ") > /dev/null 2>&1 &)") == 0)
  return function(timeout)
    stack.eventually(function()
      local f = io.open(done)
      if f then f:close() end
      return f ~= nil
    end, timeout, 0.1, n .. " requests to " .. path .. " to answer")
    local statuses, seconds = {}, {}
    for line in io.lines(codes) do
      local status, took = line:match("^(%d+) ([%d.]+)$")
      statuses[#statuses + 1], seconds[#seconds + 1] = status or line, tonumber(took)
    end
    stack.sh("rm -rf " .. q(dir))
    return statuses, seconds
  end
end

return M

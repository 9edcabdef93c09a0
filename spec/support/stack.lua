-- spec/support/stack.lua — the real stack for integration specs: the test
-- services (PostgreSQL, Redis), fresh databases, sgw instances, HTTP calls.
--
--   local stack = require("stack")
--   describe("posts", function()
--     local sgw
--     setup(function() sgw = stack.start_sgw({ set = { ["log.level"] = "debug" } }) end)
--     teardown(stack.cleanup)
--     it("answers", function()
--       local status, body, headers = stack.request("GET", sgw.base_url .. "/api/v1/posts")
--       assert.equal(401, status)
--     end)
--   end)
--
-- Runs under ctest (see spec/tests.cmake), which starts the services and sets
-- SGW_TEST_DATABASE_URL, SGW_TEST_REDIS_URL and SGW_BUILD_DIR. Every sgw
-- instance started here is stopped by stack.cleanup(), when this module is
-- collected (end of the spec file or of busted), and — should busted itself
-- die — by a watchdog that kills it once the busted process is gone.
local http = require("socket.http")
local ltn12 = require("ltn12")
local socket = require("socket")
local lfs = require("lfs")
local cjson = require("cjson")
local cjson_safe = require("cjson.safe")

local M = {}

local instances = {}    -- started by start_sgw, not yet cleaned up
local ports_given = {}  -- free_port() never hands out the same port twice
local counter = 0

-- ------------------------------------------------------------------ helpers

--- Quotes s for a POSIX shell.
function M.shell_quote(s)
  s = tostring(s)
  if s:match("^[%w%._/:=@%-+,]+$") then
    return s
  end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end
local q = M.shell_quote

-- psql, by its path. Debian's /usr/bin/psql is a Perl wrapper that picks a
-- version first, which takes three times as long as the query; the specs
-- call psql in their waits.
M.PSQL = (function()
  local p = io.popen("ls -d /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -n 1")
  local path = p and p:read("l")
  if p then p:close() end
  return path and path ~= "" and q(path) or "psql"
end)()

--- Runs a shell command; returns its exit code (128+n for a signal) and its
--- output (stdout and stderr).
function M.sh(cmd)
  local p = assert(io.popen("{ " .. cmd .. "\n} 2>&1", "r"))
  local out = p:read("a")
  local _, how, code = p:close()
  if how == "signal" then
    code = 128 + code
  end
  return code or 0, out
end

function M.sleep(seconds)
  socket.sleep(seconds)
end

function M.now()
  return socket.gettime()
end

--- t (seconds since the epoch, as M.now gives) as an RFC 3339 UTC timestamp
--- with milliseconds.
function M.iso(t)
  local whole = math.floor(t)
  return os.date("!%Y-%m-%dT%H:%M:%S", whole) .. string.format(".%03dZ", math.floor((t - whole) * 1000))
end

--- Calls fn until it returns a truthy value (returned) or timeout seconds pass
--- (then raises with message, or with fn's second return value).
function M.eventually(fn, timeout, interval, message)
  local deadline = M.now() + (timeout or 10)
  while true do
    local v, why = fn()
    if v then
      return v
    end
    if M.now() >= deadline then
      error((message or "condition not met") .. " within " .. (timeout or 10) .. " s"
        .. (why and (": " .. tostring(why)) or ""), 2)
    end
    M.sleep(interval or 0.1)
  end
end

--- Waits (default 10 s) until something accepts TCP connections on
--- 127.0.0.1:port; raises naming `what` when nothing does in time.
function M.wait_port(port, what, timeout)
  return M.eventually(function()
    local c = socket.tcp()
    c:settimeout(0.5)
    local ok = c:connect("127.0.0.1", port)
    c:close()
    return ok
  end, timeout or 10, 0.02, (what or "a server") .. " to listen on port " .. port)
end

local OPERATION_ENDED = { succeeded = true, failed = true, cancelled = true }

--- Waits (default 30 s) until the operation has ended, asking with
--- get(path) -> status, body; returns the operation.
function M.wait_operation(get, op_id, timeout)
  return M.eventually(function()
    local _, op = get("/api/v1/operations/" .. op_id)
    return type(op) == "table" and OPERATION_ENDED[op.status] and op
  end, timeout or 30, 0.05, "operation " .. op_id .. " to end")
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then
    return nil
  end
  local s = f:read("a")
  f:close()
  return s
end

local function tail(text, lines)
  local all = {}
  for line in (text or ""):gmatch("[^\n]*") do
    all[#all + 1] = line
  end
  return table.concat(all, "\n", math.max(1, #all - (lines or 40)))
end

local cwd
local function absolute(path)
  if path:sub(1, 1) == "/" then
    return path
  end
  if not cwd then
    local p = assert(io.popen("pwd"))
    cwd = p:read("l")
    p:close()
  end
  return cwd .. "/" .. path
end

function M.repo_root()
  return absolute(os.getenv("SGW_REPO_ROOT") or ".")
end

function M.build_dir()
  return absolute(os.getenv("SGW_BUILD_DIR") or (M.repo_root() .. "/build"))
end

--- A name part safe for identifiers and file names: lower-case [a-z0-9_].
function M.slug(s, max)
  s = tostring(s or "t"):lower():gsub("[^%w]+", "_"):gsub("^_+", ""):gsub("_+$", "")
  if s == "" then
    s = "t"
  end
  return s:sub(1, max or 24)
end

--- A name nobody else uses: prefix_<time>_<random>_<n>.
function M.unique_name(prefix)
  counter = counter + 1
  return string.format("%s_%d_%06d_%d", M.slug(prefix), os.time(), math.random(0, 999999), counter)
end

--- The URL (or keyword conninfo) of the same server with another database.
function M.url_with_database(url, dbname)
  local head, rest = url:match("^(postgres[%w]*://[^/?]*)(.*)$")
  if head then
    local query = rest:match("(%?.*)$") or ""
    return head .. "/" .. dbname .. query
  end
  if url:match("dbname=") then
    return (url:gsub("dbname=%S+", "dbname=" .. dbname))
  end
  return url .. " dbname=" .. dbname
end

-- ------------------------------------------------------------------ services

--- The test services: { database_url = ..., redis_url = ... }.
function M.services()
  local db, redis = os.getenv("SGW_TEST_DATABASE_URL"), os.getenv("SGW_TEST_REDIS_URL")
  if not db or db == "" or not redis or redis == "" then
    error("SGW_TEST_DATABASE_URL / SGW_TEST_REDIS_URL are not set: run integration specs "
      .. "through ctest (the 'services' fixture starts PostgreSQL and Redis), or by hand with "
      .. "spec/support/run-integration ENV_FILE busted ...", 2)
  end
  return { database_url = db, redis_url = redis }
end

-- The databases this spec file created, dropped when it ends (the sentinel
-- below), so that a developer's test PostgreSQL does not fill up with them.
local created_databases = {}

-- The shell command that runs one statement as the services' PostgreSQL
-- administrator (CREATE, ALTER and DROP DATABASE).
local function admin_command(sql)
  return M.PSQL .. " " .. q(M.services().database_url) .. " -X -q -v ON_ERROR_STOP=1 -c " .. q(sql)
end

local function drop_created_databases()
  for _, name in ipairs(created_databases) do
    M.sh(admin_command('DROP DATABASE IF EXISTS "' .. name .. '" WITH (FORCE)'))
  end
  created_databases = {}
end

--- Creates a new empty database on the test PostgreSQL; returns its URL.
--- It is dropped when the spec file ends.
function M.fresh_database(prefix)
  local admin = M.services().database_url
  local name = M.unique_name(prefix or "sgw")
  local code, out = M.sh(admin_command('CREATE DATABASE "' .. name .. '"'))
  if code ~= 0 then
    error("could not create database " .. name .. ": " .. out, 2)
  end
  created_databases[#created_databases + 1] = name
  return M.url_with_database(admin, name), name
end

-- Migrated templates, by the directory their migrations came from.
local templates = {}

--- The name of a database that every migration under ROOT has been applied
--- to, made once per set of migrations and shared by every process of a run
--- (under a file lock): copying it is quicker than migrating a new database,
--- which every instance of every spec would otherwise do.
local function migrated_template(root)
  if templates[root] then return templates[root] end
  -- Names and contents: a renamed migration is another set.
  local code, sums = M.sh("cd " .. q(root .. "/migrations") .. " && sha256sum -- *.sql")
  assert(code == 0, "cannot read the migrations under " .. root .. ": " .. sums)
  local sum
  code, sum = M.sh("printf '%s' " .. q(sums) .. " | sha256sum")
  assert(code == 0, sum)
  local name = "sgw_template_" .. sum:sub(1, 16)
  local admin = M.services().database_url
  local building = M.url_with_database(admin, name .. "_new")
  local lock_dir = os.getenv("SGW_TEST_SERVICES_DIR")
  if not lock_dir or lock_dir == "" then lock_dir = M.build_dir() end
  local exists = M.PSQL .. " " .. q(admin) .. " -X -A -t -c " .. q("SELECT 1 FROM pg_database WHERE datname = '" .. name .. "'")
  -- Built under another name and renamed once migrated: a template that
  -- exists is complete, also when a process that built one died half-way.
  local build = "if " .. exists .. " | grep -q 1; then exit 0; fi\n" .. table.concat({
    admin_command('DROP DATABASE IF EXISTS "' .. name .. '_new"'),
    admin_command('CREATE DATABASE "' .. name .. '_new"'),
    "cd " .. q(root) .. " && " .. q(M.build_dir() .. "/sgw") .. " migrate --set database.url=" .. q(building)
      .. " --set redis.url=",
    admin_command('ALTER DATABASE "' .. name .. '_new" RENAME TO "' .. name .. '"'),
  }, " && \n")
  local out
  code, out = M.sh("flock " .. q(lock_dir .. "/migrated-template.lock") .. " sh -ec " .. q(build))
  if code ~= 0 then error("could not make the migrated template database " .. name .. ": " .. out, 2) end
  templates[root] = name
  return name
end

--- A new database with every migration under ROOT (default: the
--- repository's) already applied; returns its URL and name.
function M.migrated_database(prefix, root)
  local template = migrated_template(root or M.repo_root())
  local name = M.unique_name(prefix or "sgw")
  local code, out = M.sh(admin_command('CREATE DATABASE "' .. name .. '" TEMPLATE "' .. template .. '" STRATEGY FILE_COPY'))
  if code ~= 0 then
    error("could not create database " .. name .. " from " .. template .. ": " .. out, 2)
  end
  created_databases[#created_databases + 1] = name
  return M.url_with_database(M.services().database_url, name), name
end

--- A new database as an earlier version left it: migrated with the
--- migrations whose names sort before `version` ("0018"). Returns its URL
--- and the output of `sgw migrate`.
function M.database_before(prefix, version)
  local db = M.fresh_database(prefix)
  local old_root = M.build_dir() .. "/test-roots/" .. M.unique_name("old-migrations")
  local repo = M.repo_root()
  local code, out = M.sh("mkdir -p " .. q(old_root .. "/migrations") .. " && cp -r " .. q(repo .. "/config") .. " "
    .. q(old_root) .. "/ && for f in " .. q(repo .. "/migrations") .. "/*.sql; do n=$(basename \"$f\"); [ \"$n\" \\< "
    .. version .. " ] && cp \"$f\" " .. q(old_root .. "/migrations") .. "/; done; cd " .. q(old_root)
    .. " && SGW_ROOT=" .. q(old_root) .. " " .. q(M.build_dir() .. "/sgw") .. " migrate --set database.url=" .. q(db))
  if code ~= 0 then error("sgw migrate failed: " .. out, 2) end
  return db, out
end

--- Runs SQL with psql against url; returns the output (unaligned, tuples
--- only) or raises.
function M.psql(url, sql)
  local code, out = M.sh(M.PSQL .. " " .. q(url) .. " -X -q -A -t -v ON_ERROR_STOP=1 -c " .. q(sql))
  if code ~= 0 then
    error("psql failed: " .. out, 2)
  end
  return (out:gsub("\n$", ""))
end

--- A TCP port on 127.0.0.1 that was free a moment ago.
-- Ports come from below the kernel's ephemeral range: a port taken from that
-- range (bind to port 0) can be handed, between our check and the server's
-- own bind, to an outgoing connection of any process (sgw's own connections
-- to PostgreSQL or Redis), and the server then fails to start.
-- ctest runs specs in several processes at once: a port given out is also
-- marked in the test services' directory (shared by every process of one
-- run), so that two processes never get the same one.
local function claimed_across_processes(port)
  local dir = os.getenv("SGW_TEST_SERVICES_DIR")
  if not dir or dir == "" then return true end
  lfs.mkdir(dir .. "/ports")
  return lfs.mkdir(dir .. "/ports/" .. port) ~= nil
end

local function listen_port_range()
  local low = 32768
  local f = io.open("/proc/sys/net/ipv4/ip_local_port_range", "r")
  if f then
    low = tonumber((f:read("a") or ""):match("^%s*(%d+)")) or low
    f:close()
  end
  local top = math.min(low, 65536) - 1
  if top < 1024 + 1000 then return 20000, 30000 end -- an ephemeral range from the bottom: no room below it
  return math.max(1024, top - 12000), top
end

local function random_below(n)
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(4)
  if f then f:close() end
  if not bytes or #bytes < 4 then return math.random(0, n - 1) end
  return string.unpack("<I4", bytes) % n
end

local function bindable(port)
  local s = socket.tcp()
  local ok = s:bind("127.0.0.1", port)
  s:close()
  return ok ~= nil
end

function M.free_port()
  local low, high = listen_port_range()
  for _ = 1, 200 do
    local port = low + random_below(high - low + 1)
    if not ports_given[port] and bindable(port) then
      ports_given[port] = true
      if claimed_across_processes(port) then return port end
    end
  end
  error("no free port found between " .. low .. " and " .. high)
end

-- ------------------------------------------------------------------ HTTP

--- HTTP request. opts: headers (table), body (string, or table sent as JSON),
--- timeout (seconds, default 30). Returns status, body, headers (lower-case
--- names), or nil and an error message when the connection failed.
function M.request(method, url, opts)
  opts = opts or {}
  local headers = {}
  for k, v in pairs(opts.headers or {}) do
    headers[k:lower()] = v
  end
  local body = opts.body
  if type(body) == "table" then
    body = cjson.encode(body)
    headers["content-type"] = headers["content-type"] or "application/json"
  end
  if body then
    headers["content-length"] = tostring(#body)
  end
  local chunks = {}
  -- The time-out is LuaSocket's module-wide setting: set it for this request
  -- only, so that a short poll does not shorten a spec's own requests.
  local previous_timeout = http.TIMEOUT
  http.TIMEOUT = opts.timeout or 30
  local ok, status, resp_headers = http.request({
    url = url,
    method = method,
    headers = headers,
    source = body and ltn12.source.string(body) or nil,
    sink = ltn12.sink.table(chunks),
    redirect = false,
  })
  http.TIMEOUT = previous_timeout
  if not ok then
    return nil, status
  end
  local lower = {}
  for k, v in pairs(resp_headers or {}) do
    lower[k:lower()] = v
  end
  local resp_body = table.concat(chunks)
  M.record(method, url, status, lower, resp_body)
  return status, resp_body, lower
end

-- ------------------------------------------------------------------ OpenAPI check

-- Every answer of an sgw instance's public listener (not its admin listener)
-- is recorded, and when the spec file ends spec/support/openapi_check.py
-- checks them all against lib/openapi.json (one process per spec file): an
-- undocumented status or media type, or a body its schema refuses, fails the
-- spec file that saw it. Which paths count as API is the checker's rule.
local public_listeners = {}  -- "http://127.0.0.1:port" -> true
local records_path, spec_name

local function spec_file_name()
  for level = 2, 40 do
    local info = debug.getinfo(level, "S")
    if not info then
      break
    end
    local name = info.source:match("([%w_%-]+)_spec%.lua$")
    if name then
      return name
    end
  end
  return "spec"
end

--- Records one answer for the OpenAPI check when url is an sgw instance's
--- public listener. For specs that reach sgw without request() (curl in the
--- background): headers with lower-case names.
function M.record(method, url, status, headers, body)
  local origin, path = url:match("^(https?://[^/]+)(/[^?#]*)")
  if not (origin and public_listeners[origin] and records_path) then
    return
  end
  local f = io.open(records_path, "ab")
  if f then
    f:write(cjson.encode({ method = method, path = path, status = status,
      contentType = headers["content-type"] or "", body = body or "" }), "\n")
    f:close()
  end
end

local function check_records()
  local f = records_path and io.open(records_path, "rb")
  if not f then
    return
  end
  f:close()
  local code, out = M.sh("/usr/bin/python3 " .. q(M.repo_root() .. "/spec/support/openapi_check.py") .. " "
    .. q(M.repo_root() .. "/lib/openapi.json") .. " " .. q(records_path))
  if code ~= 0 then
    error("OpenAPI check of " .. spec_name .. "_spec.lua (answers in " .. records_path .. "):\n" .. out, 0)
  end
end

--- Like request, but decodes the body as JSON: status, value (nil when the
--- body is empty or not JSON), headers, raw body.
function M.json(method, url, opts)
  local status, body, headers = M.request(method, url, opts)
  if not status then
    return nil, body
  end
  local value = nil
  if body ~= "" then
    value = cjson_safe.decode(body)
  end
  return status, value, headers, body
end

-- ------------------------------------------------------------------ sgw

--- The `--config F --set k=v ...` arguments (a list) for settings: an array
--- of {key, value} pairs, then opts.set (a table, applied in key order, so it
--- overrides the pairs).
function M.sgw_args(pairs_list, opts)
  opts = opts or {}
  local args = {}
  if opts.config then
    args[#args + 1] = "--config"
    args[#args + 1] = opts.config
  end
  local function add(k, v)
    args[#args + 1] = "--set"
    args[#args + 1] = k .. "=" .. tostring(v)
  end
  for _, kv in ipairs(pairs_list) do
    add(kv[1], kv[2])
  end
  local keys = {}
  for k in pairs(opts.set or {}) do
    keys[#keys + 1] = k
  end
  table.sort(keys)
  for _, k in ipairs(keys) do
    add(k, opts.set[k])
  end
  return args
end

local function command_line(list)
  local out = {}
  for i, a in ipairs(list) do
    out[i] = q(a)
  end
  return table.concat(out, " ")
end

local function env_prefix(env)
  local keys = {}
  for k in pairs(env or {}) do
    keys[#keys + 1] = k
  end
  if #keys == 0 then
    return ""
  end
  table.sort(keys)
  local parts = { "env" }
  for _, k in ipairs(keys) do
    parts[#parts + 1] = q(k .. "=" .. tostring(env[k]))
  end
  return table.concat(parts, " ") .. " "
end

local Instance = {}
Instance.__index = Instance

--- Exit code once the process has ended, else nil.
function Instance:exit_code()
  local s = read_file(self.status_path)
  return s and tonumber(s:match("%d+")) or nil
end

function Instance:alive()
  return self:exit_code() == nil
end

--- Waits up to timeout seconds for the process to end; its exit code or nil.
function Instance:wait(timeout)
  local ok, code = pcall(M.eventually, function() return self:exit_code() end, timeout or 30, 0.02)
  return ok and code or self:exit_code()
end

function Instance:signal(name)
  if self:alive() then
    os.execute("kill -" .. name .. " " .. self.pid .. " 2>/dev/null")
  end
end

--- SIGTERM, then waits (default 30 s); returns the exit code. If it has not
--- exited by then: SIGKILL, and returns nil, message.
function Instance:stop(timeout)
  self:signal("TERM")
  local code = self:wait(timeout or 30)
  if code then
    return code
  end
  self:signal("KILL")
  self:wait(10)
  return nil, "sgw (pid " .. self.pid .. ") did not exit within " .. (timeout or 30) .. " s of SIGTERM; killed"
end

--- SIGKILL; returns the exit code (137).
function Instance:kill()
  self:signal("KILL")
  return self:wait(10)
end

--- `sgw reload` with this instance's flags; returns exit code, output.
function Instance:reload()
  return M.sh("cd " .. q(self.root) .. " && " .. env_prefix(self.env) .. q(self.binary)
    .. " reload " .. command_line(self.args))
end

--- Runs another sgw command (e.g. {"company", "create", "--name", "X"}) with
--- this instance's flags; returns exit code, output.
-- Runs `sgw <argv>` with the instance's settings; `overrides` (optional,
-- e.g. { "--set", "redis.url=..." }) come after them, so they win.
function Instance:command(argv, overrides)
  return M.sh("cd " .. q(self.root) .. " && " .. env_prefix(self.env) .. q(self.binary)
    .. " " .. command_line(argv) .. " " .. command_line(self.args) .. " " .. command_line(overrides or {}))
end

--- The whole log (stdout and stderr) so far.
function Instance:log()
  return read_file(self.log_path) or ""
end

function Instance:request(method, path, opts)
  return M.request(method, self.base_url .. path, opts)
end

function Instance:json(method, path, opts)
  return M.json(method, self.base_url .. path, opts)
end

function Instance:admin(method, path, opts)
  return M.request(method, self.admin_url .. path, opts)
end

-- Lua 5.4 method-call sugar also works as plain fields: inst.stop() etc.
local function bind_methods(inst)
  for name, fn in pairs(Instance) do
    if type(fn) == "function" and name ~= "__index" then
      inst[name] = function(first, ...)
        if first == inst then
          return fn(inst, ...)
        end
        return fn(inst, first, ...)
      end
    end
  end
  return inst
end

-- Starts `binary serve args...` in the background. A small sh supervisor
-- writes the pid, waits for the process and writes its exit status; a
-- watchdog stops it when the Lua process that started it is gone.
local function spawn(inst)
  local pidfile, status = inst.pid_path, inst.status_path
  os.remove(pidfile)
  os.remove(status)
  local script = table.concat({
    "owner=$PPID",
    "cd " .. q(inst.root) .. " || exit 1",
    "(",
    "  " .. env_prefix(inst.env) .. q(inst.binary) .. " serve " .. command_line(inst.args)
      .. " >> " .. q(inst.log_path) .. " 2>&1 < /dev/null &",
    "  pid=$!",
    "  echo $pid > " .. q(pidfile .. ".tmp") .. " && mv " .. q(pidfile .. ".tmp") .. " " .. q(pidfile),
    "  (",
    "    trap 'kill $s 2>/dev/null; wait $s 2>/dev/null; exit 0' TERM",
    "    while kill -0 $owner 2>/dev/null; do sleep 1 & s=$!; wait $s; done",
    "    trap - TERM",
    "    kill -TERM $pid 2>/dev/null",
    "    n=0; while kill -0 $pid 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done",
    "    kill -KILL $pid 2>/dev/null",
    "  ) &",
    "  wd=$!",
    "  wait $pid",
    "  echo $? > " .. q(status .. ".tmp") .. " && mv " .. q(status .. ".tmp") .. " " .. q(status),
    "  kill $wd 2>/dev/null",
    ") > /dev/null 2>&1 < /dev/null &",
  }, "\n")
  local code, out = M.sh(script)
  if code ~= 0 then
    error("could not start sgw: " .. out)
  end
  local deadline = M.now() + 10
  while M.now() < deadline do
    local pid = read_file(pidfile)
    if pid and pid:match("%d+") then
      return tonumber(pid:match("%d+"))
    end
    M.sleep(0.02)
  end
  error("sgw did not start (no pid after 10 s)")
end

--- Starts an sgw instance (migrate, then serve) and waits until it answers.
--- opts:
---   set            table of config key -> value (--set, applied last)
---   config         a config file (--config)
---   database_url   else a fresh database, or the services' own database
---                  when shared_database is true
---   redis_url      else the services' Redis; false: no Redis
---   env            extra environment variables for the sgw process
---   binary, root   another sgw binary, and the working directory it runs in
---   name           a label for the log file name
---   migrate        false: skip `sgw migrate`
---   wait_for       "healthz" (default), "readyz", or false (do not wait)
---   start_timeout  seconds (default 15, or SGW_TEST_START_TIMEOUT)
--- Returns an instance: base_url, admin_url, http_port, admin_port, pid,
--- log_path, database_url, redis_url, and stop(), kill(), reload(), log(),
--- alive(), wait(), command(argv), request(m, path, o), json(m, path, o),
--- admin(m, path, o).
function M.start_sgw(opts)
  opts = opts or {}
  local svc = M.services()
  local database_url = opts.database_url
  if not database_url then
    if opts.shared_database then
      database_url = svc.database_url
    elseif opts.migrate == false then
      database_url = M.fresh_database(opts.name or "sgw")
    else
      database_url = M.migrated_database(opts.name or "sgw", opts.root)
    end
  end
  local redis_url = opts.redis_url
  if redis_url == nil then
    redis_url = svc.redis_url
  elseif redis_url == false then
    redis_url = ""
  end

  local http_port, admin_port = M.free_port(), M.free_port()
  local inst = setmetatable({
    root = opts.root or M.repo_root(),
    binary = opts.binary or (M.build_dir() .. "/sgw"),
    env = opts.env,
    http_port = http_port,
    admin_port = admin_port,
    base_url = "http://127.0.0.1:" .. http_port,
    admin_url = "http://127.0.0.1:" .. admin_port,
    database_url = database_url,
    redis_url = redis_url,
  }, Instance)
  inst.args = M.sgw_args({
    { "database.url", database_url },
    { "redis.url", redis_url },
    { "http.listen", "127.0.0.1:" .. http_port },
    { "admin.listen", "127.0.0.1:" .. admin_port },
    { "public_base_url", inst.base_url },
    -- Instances on one database are one deployment: they share Redis keys,
    -- and nothing else running on the test Redis does.
    { "redis.namespace", "t_" .. (database_url:match("([%w_]+)[^/]*$") or "sgw") },
  }, opts)

  local logs = M.build_dir() .. "/test-logs"
  os.execute("mkdir -p " .. q(logs))
  local base = logs .. "/" .. M.slug(opts.name or "sgw") .. "-" .. http_port
  inst.log_path, inst.pid_path, inst.status_path = base .. ".log", base .. ".pid", base .. ".status"

  local f = io.open(inst.binary, "rb")
  if not f then
    error("sgw binary not found at " .. inst.binary .. " (build it: cmake --build build; "
      .. "set SGW_BUILD_DIR to the build directory)", 2)
  end
  f:close()

  if opts.migrate ~= false then
    local code, out = M.sh("cd " .. q(inst.root) .. " && " .. env_prefix(inst.env) .. q(inst.binary)
      .. " migrate " .. command_line(inst.args))
    local lf = io.open(inst.log_path, "ab")
    if lf then
      lf:write("--- sgw migrate (exit ", tostring(code), ")\n", out, "--- sgw serve\n")
      lf:close()
    end
    if code ~= 0 then
      error("sgw migrate failed (exit " .. code .. "):\n" .. out, 2)
    end
  end

  inst.pid = spawn(inst)
  instances[#instances + 1] = inst
  public_listeners[inst.base_url] = true
  bind_methods(inst)

  local wait_for = opts.wait_for
  if wait_for == nil then
    wait_for = "healthz"
  end
  if wait_for then
    local timeout = opts.start_timeout or tonumber(os.getenv("SGW_TEST_START_TIMEOUT") or "") or 15
    local exited
    local answered = pcall(M.eventually, function()
      exited = inst:exit_code()
      return exited or M.request("GET", inst.admin_url .. "/" .. wait_for, { timeout = 1 }) == 200
    end, timeout, 0.02)
    if exited then
      error("sgw exited (code " .. exited .. ") while starting; log " .. inst.log_path .. ":\n"
        .. tail(inst:log()), 2)
    end
    if not answered then
      inst:stop(5)
      error("sgw did not answer 200 on /" .. wait_for .. " within " .. timeout .. " s; log "
        .. inst.log_path .. ":\n" .. tail(inst:log()), 2)
    end
  end
  return inst
end

--- A fixed crypto.encryption_key for test instances (never a real deployment's).
M.ENCRYPTION_KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

--- Runs an operator command (e.g. {"company", "create", "--name", "X"}) on an
--- instance and returns the one JSON object it prints; raises when it fails.
function M.cli(inst, argv)
  local code, out = inst:command(argv)
  if code ~= 0 then
    error(table.concat(argv, " ") .. " failed (exit " .. code .. "): " .. out, 2)
  end
  local value = cjson_safe.decode(out:match("(%b{})%s*$") or "")
  if type(value) ~= "table" then error(table.concat(argv, " ") .. " printed no JSON object: " .. out, 2) end
  return value
end

--- Stops every instance started here (SIGTERM, then SIGKILL after 10 s).
--- Call it from teardown.
function M.cleanup()
  local list = instances
  instances = {}
  for _, inst in ipairs(list) do
    if inst:alive() then
      inst:stop(10)
    end
  end
end

-- The spec file that requires this module gets the OpenAPI check as its
-- last teardown.
do
  spec_name = spec_file_name()
  local dir = M.build_dir() .. "/openapi-answers"
  os.execute("mkdir -p " .. q(dir))
  records_path = dir .. "/" .. spec_name .. ".jsonl"
  os.remove(records_path)
  local ok, busted = pcall(require, "busted")
  if not (ok and type(busted) == "table" and busted.teardown and pcall(busted.teardown, check_records)) then
    records_path = nil
  end
end

-- When busted drops this module (end of an insulated spec file) or exits,
-- stop whatever is still running and drop the file's databases.
M._sentinel = setmetatable({}, {
  __gc = function()
    pcall(M.cleanup)
    pcall(drop_created_databases)
  end,
})

return M

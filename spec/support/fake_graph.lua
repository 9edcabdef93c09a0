-- spec/support/fake_graph.lua — the fake Graph API (spec/support/fake_graph.py)
-- for busted specs: starts it on a free port, drives its control API.
--
--   local fake_graph = require("fake_graph")
--   local fake = fake_graph.start({ latency_ms = 0 })
--   local page = fake.add_page({ name = "Shop", instagram_business_account = true })
--   -- point sgw at it: meta.graph_base_url = fake.graph_url
--   fake.fail({ match = { method = "POST", path = "/{page}/feed" }, preset = "rate_limited" })
--   ... fake.published().counts[page.id] ...
--   fake.stop()
--
-- Every fake started here is stopped by fake_graph.stop_all(), when this
-- module is collected (end of the spec file or of busted), and — should busted
-- itself die — by a watchdog that kills it once the busted process is gone.
-- Methods work with `.` and `:` alike.
local stack = require("stack")
local cjson = require("cjson")

local M = {}

M.version = "v21.0"

--- The fake's Meta app (fake_graph_oauth.py's defaults): meta.app_id and
--- meta.app_secret of an sgw that talks to it.
M.APP_ID, M.APP_SECRET = "100000000000123", "fake-app-secret"

local q = stack.shell_quote
local running = {}

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then
    return nil
  end
  local s = f:read("a")
  f:close()
  return s
end

local function url_encode(s)
  return (tostring(s):gsub("[^%w%-%._~]", function(c)
    return string.format("%%%02X", c:byte())
  end))
end

--- application/x-www-form-urlencoded from a table (keys sorted, so the
--- request log is predictable).
function M.form(params)
  local keys = {}
  for k in pairs(params or {}) do
    keys[#keys + 1] = k
  end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = url_encode(k) .. "=" .. url_encode(params[k])
  end
  return table.concat(parts, "&")
end

-- Starts the fake like stack.lua starts sgw: a small sh supervisor writes
-- the pid, waits for the process and writes its exit status; a watchdog
-- stops it when the Lua process that started it ($PPID of the shell) is gone.
local function spawn(fake, argv)
  os.remove(fake.pid_path)
  os.remove(fake.status_path)
  local cmd = {}
  for i, a in ipairs(argv) do
    cmd[i] = q(a)
  end
  local script = table.concat({
    "owner=$PPID",
    "(",
    "  " .. table.concat(cmd, " ") .. " >> " .. q(fake.log_path) .. " 2>&1 < /dev/null &",
    "  pid=$!",
    "  echo $pid > " .. q(fake.pid_path .. ".tmp") .. " && mv " .. q(fake.pid_path .. ".tmp") .. " " .. q(fake.pid_path),
    "  (",
    "    trap 'kill $s 2>/dev/null; wait $s 2>/dev/null; exit 0' TERM",
    "    while kill -0 $owner 2>/dev/null; do sleep 1 & s=$!; wait $s; done",
    "    trap - TERM",
    "    kill -TERM $pid 2>/dev/null",
    "    n=0; while kill -0 $pid 2>/dev/null && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done",
    "    kill -KILL $pid 2>/dev/null",
    "  ) &",
    "  wd=$!",
    "  wait $pid",
    "  echo $? > " .. q(fake.status_path .. ".tmp") .. " && mv " .. q(fake.status_path .. ".tmp") .. " " .. q(fake.status_path),
    "  kill $wd 2>/dev/null",
    ") > /dev/null 2>&1 < /dev/null &",
  }, "\n")
  local code, out = stack.sh(script)
  if code ~= 0 then
    error("could not start the fake Graph API: " .. out)
  end
  local deadline = stack.now() + 10
  while stack.now() < deadline do
    local pid = read_file(fake.pid_path)
    if pid and pid:match("%d+") then
      return tonumber(pid:match("%d+"))
    end
    stack.sleep(0.02)
  end
  error("the fake Graph API did not start (no pid after 10 s)")
end

local Fake = {}
Fake.__index = Fake

function Fake:exit_code()
  local s = read_file(self.status_path)
  return s and tonumber(s:match("%d+")) or nil
end

function Fake:alive()
  return self:exit_code() == nil
end

function Fake:log()
  return read_file(self.log_path) or ""
end

--- SIGTERM, then SIGKILL after 5 s; returns the exit code.
function Fake:stop()
  if self:alive() then
    os.execute("kill -TERM " .. self.pid .. " 2>/dev/null")
    local deadline = stack.now() + 5
    while self:alive() and stack.now() < deadline do
      stack.sleep(0.05)
    end
    if self:alive() then
      os.execute("kill -KILL " .. self.pid .. " 2>/dev/null")
      stack.sleep(0.2)
    end
  end
  for i, f in ipairs(running) do
    if f == self then
      table.remove(running, i)
      break
    end
  end
  return self:exit_code()
end

--- A control call: method, path under /_fake/, body (a table, sent as
--- JSON). Returns the decoded answer; raises unless the status is 200.
function Fake:control(method, path, body)
  if method ~= "GET" then
    body = body or {}
  end
  local status, value, _, raw = stack.json(method, self.url .. "/_fake/" .. path, { body = body, timeout = 10 })
  if status ~= 200 then
    error(string.format("fake Graph API: %s /_fake/%s -> %s %s", method, path, tostring(status),
      tostring(raw or value)), 2)
  end
  return value
end

--- Forgets everything: pages, tokens, posts, failures, request log, config.
function Fake:reset()
  return self:control("POST", "reset")
end

--- Creates a Page. t: id, name, access_token (each generated when left out),
--- instagram_business_account = true or { id, username }. Returns
--- { id, name, access_token, instagram_business_account = { id, username } }.
function Fake:add_page(t)
  return self:control("POST", "pages", t or {})
end

--- Marks a token expired (190/463 from then on); expire_token(tok, false) revives it.
function Fake:expire_token(token, expired)
  return self:control("POST", "tokens/expire", { access_token = token, expired = expired ~= false })
end

--- Takes a permission from a Page token (calls needing it answer code, 200
--- by default, or 10); revoke_permission(tok, p, code, false) gives it back.
function Fake:revoke_permission(token, permission, code, revoked)
  return self:control("POST", "tokens/revoke", { access_token = token, permission = permission, code = code,
    revoked = revoked ~= false })
end

--- Sets a Page token's expires_at / data_access_expires_at (unix seconds, 0 =
--- never) or user_id (fake_graph_tokens.py); returns its debug_token data.
function Fake:update_token(token, t)
  local body = { access_token = token }
  for k, v in pairs(t) do body[k] = v end
  return self:control("POST", "tokens/update", body)
end

--- A signed_request as Meta makes it (fake_graph_tokens.py): t.user_id,
--- issued_at, algorithm, secret (default: the fake app's), payload (raw JSON).
function Fake:signed_request(t)
  return self:control("POST", "signed_request", t).signed_request
end

--- Scripts a failure (see fake_graph.py, POST /_fake/failures); returns it with its id.
function Fake:fail(spec)
  return self:control("POST", "failures", spec)
end

--- The failures still queued.
function Fake:failures()
  return self:control("GET", "failures").data
end

function Fake:clear_failures()
  return self:control("DELETE", "failures")
end

--- Changes settings (latency_ms, container_ready_ms, ig_quota, ...); returns all of them.
function Fake:config(t)
  if t == nil then
    return self:control("GET", "config")
  end
  return self:control("POST", "config", t)
end

--- What was really created: { data = {...}, counts = { [account] = n }, total = n }.
function Fake:published(account)
  return self:control("GET", "published" .. (account and ("?account=" .. url_encode(account)) or ""))
end

--- The Graph calls received (tokens left out), oldest first. filter: since
--- (a seq), path (without version, e.g. "/123/feed"), method.
function Fake:requests(filter)
  local query = M.form(filter or {})
  return self:control("GET", "requests" .. (query ~= "" and ("?" .. query) or "")).data
end

--- A Graph API call: params go in the query string for GET and DELETE, as a
--- form body otherwise; token as the access_token parameter (opts.bearer:
--- in an Authorization header). opts.timeout, opts.json (send params as JSON).
--- Returns status, decoded JSON (or nil), headers, raw body — or nil, error.
function Fake:graph(method, path, params, token, opts)
  opts = opts or {}
  params = params or {}
  local p = {}
  for k, v in pairs(params) do
    p[k] = v
  end
  local headers = {}
  if token and opts.bearer then
    headers["authorization"] = "Bearer " .. token
  elseif token then
    p.access_token = token
  end
  local url = self.graph_url .. path
  local body
  if method == "GET" or method == "DELETE" then
    local query = M.form(p)
    if query ~= "" then
      url = url .. (url:find("?", 1, true) and "&" or "?") .. query
    end
  elseif opts.json then
    body = cjson.encode(p)
    headers["content-type"] = "application/json"
  else
    body = M.form(p)
    headers["content-type"] = "application/x-www-form-urlencoded"
  end
  return stack.json(method, url, { headers = headers, body = body, timeout = opts.timeout })
end

--- Webhook subscriptions: { app = {...}, pages = { [page] = { [app] = fields } }, handshakes = {...} }.
function Fake:subscriptions()
  return self:control("GET", "subscriptions")
end

--- The Page loses the app's subscription (its admin removed the app).
function Fake:drop_subscription(page_id)
  return self:control("POST", "subscribed_apps/drop", { page_id = page_id })
end

--- The URL of one of the fake's own images (tiny.jpg, tiny.png, wide.jpg,
--- large.jpg, huge.jpg, image.jpg?w=..&h=..&bytes=.., not-an-image.txt).
function Fake:asset(name)
  return self.url .. "/_fake/assets/" .. name
end

--- The same image over https (the fake's TLS port, fake_graph_tls.py); sgw
--- trusts it when started with ["http.ca_file"] = fake.ca_file.
function Fake:https_asset(name)
  return self.https_url .. "/_fake/assets/" .. name
end

--- An image Instagram accepts (JPEG, 640x640), over https.
function Fake:instagram_image()
  return self:https_asset("image.jpg?w=640&h=640")
end

--- The settings sgw needs to fetch the fake's https assets: trust its
--- certificate and let it reach loopback.
function Fake:https_settings(set)
  set = set or {}
  set["http.ca_file"] = self.ca_file
  set["posts.allow_private_image_urls"] = true
  return set
end

--- {connections, requests = {path, ...}} seen on the TLS port since start or
--- the last clear_tls().
function Fake:tls()
  local _, body = stack.json("GET", self.url .. "/_fake/tls")
  return body
end

function Fake:clear_tls()
  stack.json("DELETE", self.url .. "/_fake/tls")
end

local function bind_methods(fake)
  for name, fn in pairs(Fake) do
    if type(fn) == "function" and name ~= "__index" then
      fake[name] = function(first, ...)
        if first == fake then
          return fn(fake, ...)
        end
        return fn(fake, first, ...)
      end
    end
  end
  return fake
end

--- Starts a fake Graph API. opts: latency_ms, container_ready_ms, ig_quota,
--- version (default "v21.0"), verbose (log every request), port, config (a
--- table as fake:config takes, kept across resets: e.g.
--- { require_appsecret_proof = true } for "Require App Secret").
--- Returns { url, graph_url, port, pid, log_path, version, https_url, https_port,
--- ca_file } with the methods above.
function M.start(opts)
  opts = opts or {}
  local port = opts.port or stack.free_port()
  local version = opts.version or M.version
  local logs = stack.build_dir() .. "/test-logs"
  os.execute("mkdir -p " .. q(logs))
  local base = logs .. "/fake-graph-" .. port
  local fake = setmetatable({
    port = port,
    version = version,
    url = "http://127.0.0.1:" .. port,
    log_path = base .. ".log",
    pid_path = base .. ".pid",
    status_path = base .. ".status",
  }, Fake)
  fake.graph_url = fake.url .. "/" .. version

  local argv = { "python3", stack.repo_root() .. "/spec/support/fake_graph.py",
    "--port", tostring(port), "--version", version, "--https-port", "0", "--tls-dir", base .. "-tls" }
  local function opt(flag, value)
    if value ~= nil then
      argv[#argv + 1] = flag
      argv[#argv + 1] = tostring(math.tointeger(value) or value)
    end
  end
  opt("--latency-ms", opts.latency_ms)
  opt("--container-ready-ms", opts.container_ready_ms)
  opt("--ig-quota", opts.ig_quota)
  if opts.verbose then
    argv[#argv + 1] = "--verbose"
  end
  if opts.config then
    argv[#argv + 1] = "--config"
    argv[#argv + 1] = cjson.encode(opts.config)
  end

  fake.pid = spawn(fake, argv)
  running[#running + 1] = fake
  bind_methods(fake)

  local deadline = stack.now() + 10
  while true do
    local code = fake:exit_code()
    if code then
      error("the fake Graph API exited (code " .. code .. ") while starting; log " .. fake.log_path
        .. ":\n" .. fake:log(), 2)
    end
    if stack.request("GET", fake.url .. "/_fake/health", { timeout = 1 }) == 200 then
      break
    end
    if stack.now() >= deadline then
      fake:stop()
      error("the fake Graph API did not answer within 10 s; log " .. fake.log_path .. ":\n" .. fake:log(), 2)
    end
    stack.sleep(0.05)
  end
  local tls = fake:tls()
  fake.https_port, fake.ca_file = math.tointeger(tls.https_port), tls.ca_file
  fake.https_url = "https://127.0.0.1:" .. fake.https_port
  return fake
end

--- Stops every fake started here.
function M.stop_all()
  local list = running
  running = {}
  for _, fake in ipairs(list) do
    pcall(fake.stop)
  end
end

M._sentinel = setmetatable({}, {
  __gc = function()
    pcall(M.stop_all)
  end,
})

return M

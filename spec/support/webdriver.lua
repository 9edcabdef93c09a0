-- spec/support/webdriver.lua — a small W3C WebDriver client for browser
-- specs: starts chromedriver, opens headless Chromium sessions, and drives
-- them over HTTP (luasocket + cjson).
--
--   local webdriver = require("webdriver")
--   local driver = webdriver.start()
--   local b = driver:session()                 -- a fresh profile each time
--   b:go(sgw.base_url .. "/workspace/login")
--   b:type("#email", "a@example.com")
--   b:click("#sign-in")
--   assert(b:text("h1"))
--   b:screenshot("/path/login.png", { full = true })
--   b:quit(); driver:stop()                   -- or webdriver.stop_all()
--
-- The browser and the driver are Debian's `chromium` and `chromium-driver`
-- (scripts/dev installs them); SGW_CHROMIUM and SGW_CHROMEDRIVER name others.
-- Every driver started here is stopped by stop_all(), when this module is
-- collected, and — should busted itself die — by a watchdog.
local stack = require("stack")
local cjson = require("cjson")
local cjson_safe = require("cjson.safe")

local M = {}

M.ELEMENT = "element-6066-11e4-a52e-4f735466cecf"

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

-- Standard base64 (screenshots arrive so), in plain Lua.
local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64_INDEX = {}
for i = 1, #B64 do
  B64_INDEX[B64:byte(i)] = i - 1
end

function M.base64_decode(s)
  s = s:gsub("[^%w%+/]", "")
  local out, bits, nbits = {}, 0, 0
  for i = 1, #s do
    bits = (bits << 6) | B64_INDEX[s:byte(i)]
    nbits = nbits + 6
    if nbits >= 8 then
      nbits = nbits - 8
      out[#out + 1] = string.char((bits >> nbits) & 0xFF)
    end
  end
  return table.concat(out)
end

-- ------------------------------------------------------------------ driver

local Driver = {}
Driver.__index = Driver

local Session = {}
Session.__index = Session

-- One WebDriver command (body: a table, or JSON text). Returns the value;
-- raises with the driver's error and message otherwise.
local function command(base, method, path, body)
  if type(body) == "table" then
    body = cjson.encode(body)
  end
  local status, raw = stack.request(method, base .. path, {
    body = body or (method == "POST" and "{}" or nil),
    headers = { ["content-type"] = "application/json; charset=utf-8" },
    timeout = 60,
  })
  if not status then
    error("webdriver: " .. method .. " " .. path .. ": " .. tostring(raw), 3)
  end
  local decoded = cjson_safe.decode(raw or "") or {}
  local value = decoded.value
  if status >= 400 or (type(value) == "table" and value.error) then
    local e = type(value) == "table" and value or {}
    error(string.format("webdriver: %s %s -> %d %s: %s", method, path, status, tostring(e.error),
      tostring(e.message):sub(1, 500)), 3)
  end
  return value
end

local function spawn(argv, paths)
  os.remove(paths.pid)
  os.remove(paths.status)
  local cmd = {}
  for i, a in ipairs(argv) do
    cmd[i] = q(a)
  end
  local script = table.concat({
    "owner=$PPID",
    "(",
    "  " .. table.concat(cmd, " ") .. " >> " .. q(paths.log) .. " 2>&1 < /dev/null &",
    "  pid=$!",
    "  echo $pid > " .. q(paths.pid .. ".tmp") .. " && mv " .. q(paths.pid .. ".tmp") .. " " .. q(paths.pid),
    "  (",
    "    trap 'kill $s 2>/dev/null; wait $s 2>/dev/null; exit 0' TERM",
    "    while kill -0 $owner 2>/dev/null; do sleep 1 & s=$!; wait $s; done",
    "    trap - TERM",
    "    kill -TERM $pid 2>/dev/null",
    "  ) &",
    "  wd=$!",
    "  wait $pid",
    "  echo $? > " .. q(paths.status .. ".tmp") .. " && mv " .. q(paths.status .. ".tmp") .. " " .. q(paths.status),
    "  kill $wd 2>/dev/null",
    ") > /dev/null 2>&1 < /dev/null &",
  }, "\n")
  local code, out = stack.sh(script)
  if code ~= 0 then
    error("could not start chromedriver: " .. out)
  end
  local deadline = stack.now() + 10
  while stack.now() < deadline do
    local pid = read_file(paths.pid)
    if pid and pid:match("%d+") then
      return tonumber(pid:match("%d+"))
    end
    stack.sleep(0.02)
  end
  error("chromedriver did not start (no pid after 10 s)")
end

-- Starts chromedriver on a free port and waits for it to be ready; nil and
-- the log when it exited because that port was taken meanwhile (it binds the
-- port on IPv6 too, where another socket may hold the number: seen in CI).
local function start_on_free_port(binary)
  local port = stack.free_port()
  local logs = stack.build_dir() .. "/test-logs"
  os.execute("mkdir -p " .. q(logs))
  local base = logs .. "/chromedriver-" .. port
  local d = setmetatable({
    port = port,
    url = "http://127.0.0.1:" .. port,
    paths = { log = base .. ".log", pid = base .. ".pid", status = base .. ".status" },
    sessions = {},
  }, Driver)
  d.log_path = d.paths.log
  d.pid = spawn({ binary, "--port=" .. port, "--allowed-ips=127.0.0.1" }, d.paths)
  running[#running + 1] = d
  local deadline = stack.now() + 15
  while true do
    local status, raw = stack.request("GET", d.url .. "/status", { timeout = 2 })
    local v = status == 200 and cjson_safe.decode(raw)
    if v and v.value and v.value.ready then
      return d
    end
    if read_file(d.paths.status) or stack.now() > deadline then
      d:stop()
      local log = read_file(d.paths.log) or ""
      if log:find("Address already in use", 1, true) then return nil, log end
      error("chromedriver did not become ready; log " .. d.paths.log .. ":\n" .. log, 3)
    end
    stack.sleep(0.1)
  end
end

--- Starts chromedriver on a free port; returns a driver.
function M.start()
  local binary = os.getenv("SGW_CHROMEDRIVER") or "chromedriver"
  local code = stack.sh("command -v " .. q(binary))
  if code ~= 0 then
    error("chromedriver not found: install Debian's chromium and chromium-driver (scripts/dev installs them), "
      .. "or set SGW_CHROMEDRIVER", 2)
  end
  local log
  for _ = 1, 5 do
    local d
    d, log = start_on_free_port(binary)
    if d then return d end
  end
  error("chromedriver found no free port in 5 tries; the last log:\n" .. log, 2)
end

--- A new browser session with a fresh profile. opts.width, opts.height.
function Driver:session(opts)
  opts = opts or {}
  local profile = stack.build_dir() .. "/test-chromium/" .. stack.unique_name("profile")
  os.execute("mkdir -p " .. q(profile))
  local value = command(self.url, "POST", "/session", {
    capabilities = { alwaysMatch = {
      browserName = "chrome",
      ["goog:chromeOptions"] = {
        binary = os.getenv("SGW_CHROMIUM") or "/usr/bin/chromium",
        args = {
          "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
          "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--no-proxy-server", "--hide-scrollbars", "--user-data-dir=" .. profile,
          "--window-size=" .. (opts.width or 1280) .. "," .. (opts.height or 900),
        },
      },
    } },
  })
  local s = setmetatable({ driver = self, id = value.sessionId, profile = profile }, Session)
  s.base = self.url .. "/session/" .. s.id
  self.sessions[#self.sessions + 1] = s
  return s
end

function Driver:stop()
  for _, s in ipairs(self.sessions) do
    pcall(s.quit, s)
  end
  self.sessions = {}
  if not read_file(self.paths.status) then
    os.execute("kill -TERM " .. self.pid .. " 2>/dev/null")
    local deadline = stack.now() + 5
    while not read_file(self.paths.status) and stack.now() < deadline do
      stack.sleep(0.05)
    end
  end
  for i, d in ipairs(running) do
    if d == self then
      table.remove(running, i)
      break
    end
  end
end

function M.stop_all()
  local list = running
  running = {}
  for _, d in ipairs(list) do
    pcall(d.stop, d)
  end
end

-- ------------------------------------------------------------------ session

function Session:cmd(method, path, body)
  return command(self.base, method, path, body)
end

function Session:quit()
  if self.id then
    pcall(command, self.driver.url, "DELETE", "/session/" .. self.id)
    self.id = nil
  end
end

function Session:go(url)
  self:cmd("POST", "/url", { url = url })
end

function Session:url()
  return self:cmd("GET", "/url")
end

function Session:title()
  return self:cmd("GET", "/title")
end

function Session:source()
  return self:cmd("GET", "/source")
end

function Session:back()
  self:cmd("POST", "/back")
end

function Session:refresh()
  self:cmd("POST", "/refresh")
end

--- Runs JavaScript (a function body: use `return`); returns its value.
function Session:execute(script, args)
  -- By hand: cjson 2.1 would encode an empty args table as {}.
  local list = args and #args > 0 and cjson.encode(args) or "[]"
  return self:cmd("POST", "/execute/sync", '{"script":' .. cjson.encode(script) .. ',"args":' .. list .. "}")
end

function Session:set_size(width, height)
  self:cmd("POST", "/window/rect", { width = width, height = height })
end

-- Elements are tables { id = "<the driver's element id>" }; every method
-- that takes one also takes a CSS selector (then waits for a match).
local function element(v)
  return { id = v[M.ELEMENT] }
end

--- The first element matching a CSS selector, or raises.
function Session:find(css)
  return element(self:cmd("POST", "/element", { using = "css selector", value = css }))
end

--- Every element matching a CSS selector (a list).
function Session:find_all(css)
  local out = {}
  for i, v in ipairs(self:cmd("POST", "/elements", { using = "css selector", value = css })) do
    out[i] = element(v)
  end
  return out
end

function Session:exists(css)
  return #self:find_all(css) > 0
end

--- Waits (default 10 s) for an element matching css; returns it.
function Session:wait_for(css, timeout)
  return stack.eventually(function()
    local found = self:find_all(css)
    return found[1]
  end, timeout or 10, 0.1, "no element matches " .. css)
end

--- Waits until the page's URL matches a Lua pattern; returns the URL.
function Session:wait_url(pattern, timeout)
  return stack.eventually(function()
    local url = self:url()
    return url:match(pattern) and url, url
  end, timeout or 10, 0.1, "the URL never matched " .. pattern)
end

local function el(self, target)
  if type(target) == "table" then
    return target.id
  end
  return self:wait_for(target).id
end

-- Whether clicking the element loads a new page: a form's submit button or
-- a link. Marks the current document, so the new one can be told from it.
local LEAVES_PAGE = [[
  var e = arguments[0];
  var leaves = (e.type === 'submit' && !!e.form) || (e.tagName === 'A' && !!e.href && e.href.indexOf('#') < 0);
  if (leaves) window.__sgwOldPage = true;
  return leaves;
]]

--- Clicks an element (or the one a CSS selector finds). A click that loads a
--- new page returns once that page has loaded, so what is read next is never
--- read from the page being left.
function Session:click(target)
  local id = el(self, target)
  local ref = { [M.ELEMENT] = id }
  local leaves = self:execute(LEAVES_PAGE, { ref })
  self:cmd("POST", "/element/" .. id .. "/click")
  if leaves == true then
    stack.eventually(function()
      return self:execute("return !window.__sgwOldPage && document.readyState === 'complete'") == true
    end, 10, 0.05, "the page after the click never loaded")
  end
end

--- Types text into an input (after clearing it unless opts.append).
function Session:type(target, text, opts)
  local id = el(self, target)
  if not (opts and opts.append) then
    self:cmd("POST", "/element/" .. id .. "/clear")
  end
  if text ~= "" then
    self:cmd("POST", "/element/" .. id .. "/value", { text = text })
  end
end

-- A page that swaps a fragment in (a row that updates itself) may replace the
-- element between finding and reading it: by selector, find it again.
local function by_selector(self, target, read)
  if type(target) ~= "string" then return read(el(self, target)) end
  for _ = 1, 5 do
    local ok, value = pcall(read, el(self, target))
    if ok then return value end
    if not tostring(value):find("stale element", 1, true) then error(value, 0) end
  end
  return read(el(self, target))
end

function Session:text(target)
  return by_selector(self, target, function(id) return self:cmd("GET", "/element/" .. id .. "/text") end)
end

function Session:attribute(target, name)
  local v = by_selector(self, target, function(id) return self:cmd("GET", "/element/" .. id .. "/attribute/" .. name) end)
  return v ~= cjson.null and v or nil
end

function Session:selected(target)
  return self:cmd("GET", "/element/" .. el(self, target) .. "/selected")
end

--- Every cookie of the current page, HttpOnly ones included.
function Session:cookies()
  return self:cmd("GET", "/cookie")
end

function Session:cookie(name)
  for _, c in ipairs(self:cookies()) do
    if c.name == name then
      return c
    end
  end
  return nil
end

function Session:delete_cookies()
  self:cmd("DELETE", "/cookie")
end

--- Saves a PNG of the page. opts.full: the whole page, not just the window.
function Session:screenshot(path, opts)
  local data
  if opts and opts.full then
    local size = self:execute("return [document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
    local ok, v = pcall(self.cmd, self, "POST", "/goog/cdp/execute", { cmd = "Page.captureScreenshot", params = {
      format = "png", captureBeyondViewport = true,
      clip = { x = 0, y = 0, width = size[1], height = size[2], scale = 1 },
    } })
    data = ok and v and v.data
  end
  data = data or self:cmd("GET", "/screenshot")
  local f = assert(io.open(path, "wb"))
  f:write(M.base64_decode(data))
  f:close()
  return path
end

M._sentinel = setmetatable({}, {
  __gc = function()
    pcall(M.stop_all)
  end,
})

return M

-- An operator's first deploy: the installed tree runs without flags from any
-- directory, the systemd notification protocol is spoken in order, every
-- command and subcommand has --help and refuses a bad word in one line, and
-- `sgw doctor` passes a good configuration and names each problem of a bad one.
local stack = require "stack"
local cjson = require "cjson.safe"
local q = stack.shell_quote

-- Runs a shell command; exit code, stdout, stderr (kept apart).
local function run(cmd)
  local err_path = os.tmpname()
  local p = assert(io.popen("{ " .. cmd .. "\n} 2>" .. q(err_path), "r"))
  local out = p:read("a")
  local _, _, code = p:close()
  local f = io.open(err_path, "rb")
  local err = f and f:read("a") or ""
  if f then f:close() end
  os.remove(err_path)
  return code, out, err
end

local function tempdir()
  local code, out = stack.sh("mktemp -d")
  assert.are.equal(0, code, out)
  return (out:gsub("%s+$", ""))
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

local SGW = stack.build_dir() .. "/sgw"
-- Every check that a clean environment passes needs these (test values only).
local GOOD = {
  ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
  ["public_base_url"] = "https://sgw.example.com",
  ["http.trusted_proxies"] = "127.0.0.1",
  ["meta.app_id"] = "1234",
  ["meta.app_secret"] = "doctor-secret-value",
  ["meta.webhook_verify_token"] = "doctor-verify-value",
}

local function sets(t)
  local words = {}
  for _, kv in ipairs(stack.sgw_args({}, { set = t })) do words[#words + 1] = q(kv) end
  return table.concat(words, " ")
end

describe("deploy", function()
  teardown(function() stack.cleanup() end)

  describe("installed tree", function()
    local prefix, database_url

    setup(function()
      prefix = tempdir()
      local code, out = stack.sh("cmake --install " .. q(stack.build_dir()) .. " --prefix " .. q(prefix))
      assert.are.equal(0, code, out)
      database_url = stack.fresh_database("deploy")
    end)

    teardown(function() os.execute("rm -rf " .. q(prefix)) end)

    it("has the conventional layout", function()
      for _, path in ipairs { "bin/sgw", "share/sgw/config/sgw.conf", "share/sgw/handlers/routes.lua",
        "share/sgw/lib/cli.lua", "share/sgw/migrations", "etc/sgw/sgw.conf", "lib/systemd/system/sgw.service" } do
        assert.are.equal(0, (stack.sh("test -e " .. q(prefix .. "/" .. path))), path .. " is installed")
      end
    end)

    it("loads its own handlers from any directory, without flags or SGW_ROOT", function()
      local code, out, err = run("cd / && env -u SGW_ROOT " .. q(prefix .. "/bin/sgw") .. " check")
      assert.are.equal(0, code, err)
      assert.are.equal("ok", cjson.decode(out).status)
      assert.are.equal("sgw 0.1.0\n", select(2, run("cd / && env -u SGW_ROOT " .. q(prefix .. "/bin/sgw") .. " --version")))
      -- What it loads is the installed tree: broken there, check says so.
      local routes = prefix .. "/share/sgw/handlers/routes.lua"
      local saved = read(routes)
      local f = assert(io.open(routes, "wb")); f:write("return {"); f:close()
      code, _, err = run("cd / && env -u SGW_ROOT " .. q(prefix .. "/bin/sgw") .. " check")
      f = assert(io.open(routes, "wb")); f:write(saved); f:close()
      assert.are.equal(1, code)
      assert.matches("handlers do not load", err)
    end)

    it("reads <prefix>/etc/sgw/sgw.conf over the defaults", function()
      local f = assert(io.open(prefix .. "/etc/sgw/sgw.conf", "ab"))
      f:write("public_base_url = https://installed.example\n")
      f:close()
      local code, out = run("cd / && env -u SGW_ROOT " .. q(prefix .. "/bin/sgw") .. " doctor --json")
      assert.are.equal(1, code) -- no database: it fails, but the URL check shows what it read
      for _, c in ipairs(cjson.decode(out).checks) do
        if c.name == "public-url" then assert.are.equal("ok", c.status, c.message) end
      end
    end)

    it("migrates and serves with --set database.url", function()
      local code, out, err = run("cd / && env -u SGW_ROOT " .. q(prefix .. "/bin/sgw") .. " migrate --set "
        .. q("database.url=" .. database_url))
      assert.are.equal(0, code, out .. err)
      local sgw = stack.start_sgw { name = "installed", binary = prefix .. "/bin/sgw", root = "/",
        database_url = database_url, migrate = false, env = { SGW_ROOT = "" } }
      local status, body = sgw:admin("GET", "/healthz")
      assert.are.equal(200, status, body)
      assert.are.equal(0, sgw:stop(30))
    end)
  end)

  describe("systemd notification", function()
    it("says READY, RELOADING then READY, pings the watchdog, and STOPPING, in order", function()
      local dir = tempdir()
      local sock, out = dir .. "/notify.sock", dir .. "/notify.log"
      os.execute("/usr/bin/python3 " .. q(stack.repo_root() .. "/spec/support/notify_listener.py") .. " "
        .. q(sock) .. " " .. q(out) .. " >/dev/null 2>&1 &")
      stack.eventually(function() return read(out):match("LISTENING") end, 10, 0.05, "the listener to bind")
      local function lines()
        local list = {}
        for l in read(out):gmatch("[^\n]+") do
          if l ~= "LISTENING" then list[#list + 1] = l end
        end
        return list
      end
      local function without_pings()
        local list = {}
        for _, l in ipairs(lines()) do
          if l ~= "WATCHDOG=1" then list[#list + 1] = l end
        end
        return list
      end

      local sgw = stack.start_sgw { name = "notify", env = { NOTIFY_SOCKET = sock, WATCHDOG_USEC = "200000" } }
      -- start_sgw waited for /healthz: READY=1 is there by now.
      local first = stack.eventually(function() return without_pings()[1] end, 5, 0.05, "READY=1")
      assert.matches("^READY=1 | STATUS=serving", first)

      stack.eventually(function()
        local n = 0
        for _, l in ipairs(lines()) do if l == "WATCHDOG=1" then n = n + 1 end end
        return n >= 3
      end, 10, 0.05, "three watchdog pings (every 100 ms)")

      sgw:signal("HUP")
      local after = stack.eventually(function()
        local l = without_pings()
        return #l >= 3 and l
      end, 10, 0.05, "RELOADING=1 and READY=1 after SIGHUP")
      assert.matches("^RELOADING=1 | STATUS=reloading handlers | MONOTONIC_USEC=%d+$", after[2])
      assert.matches("^READY=1", after[3])

      assert.are.equal(0, sgw:stop(30))
      local all = stack.eventually(function()
        local l = without_pings()
        return #l >= 4 and l
      end, 10, 0.05, "STOPPING=1 after SIGTERM")
      assert.matches("^STOPPING=1", all[4])
      assert.are.equal(4, #all)
      os.execute("rm -rf " .. q(dir))
    end)

    it("holds READY back, and /readyz says why, until the database is migrated", function()
      local dir = tempdir()
      local sock, out = dir .. "/notify.sock", dir .. "/notify.log"
      os.execute("/usr/bin/python3 " .. q(stack.repo_root() .. "/spec/support/notify_listener.py") .. " "
        .. q(sock) .. " " .. q(out) .. " >/dev/null 2>&1 &")
      stack.eventually(function() return read(out):match("LISTENING") end, 10, 0.05, "the listener to bind")
      local database_url = stack.fresh_database("unmigrated")
      local sgw = stack.start_sgw { name = "unmigrated", database_url = database_url, migrate = false,
        env = { NOTIFY_SOCKET = sock } }
      local status_line = stack.eventually(function() return read(out):match("STATUS=waiting for migrations[^\n]*") end,
        10, 0.05, "a STATUS line naming the missing migrations")
      assert.matches("run sgw migrate", status_line)
      assert.is_nil(read(out):match("READY=1"))
      local status, body = sgw:admin("GET", "/readyz")
      assert.are.equal(503, status, body)
      assert.matches('"migrations":"pending"', body)
      assert.matches("lacks %d+ migration%(s%) this sgw ships, from 0001_", sgw:log())

      local code, mout, merr = run(q(SGW) .. " migrate --set " .. q("database.url=" .. database_url))
      assert.are.equal(0, code, mout .. merr)
      stack.eventually(function() return read(out):match("READY=1") end, 10, 0.05, "READY=1 once migrated")
      status, body = sgw:admin("GET", "/readyz")
      assert.are.equal(200, status, body)
      assert.matches('"migrations":"ok"', body)
      assert.are.equal(0, sgw:stop(30))
      os.execute("rm -rf " .. q(dir))
    end)

    it("is silent without NOTIFY_SOCKET, and ignores a watchdog meant for another process", function()
      local sgw = stack.start_sgw { name = "no-notify", env = { WATCHDOG_USEC = "100000", WATCHDOG_PID = "1" } }
      assert.are.equal(0, sgw:stop(30))
      assert.is_nil(sgw:log():match("notify"))
    end)
  end)

  describe("--help", function()
    local function help(words)
      local code, out, err = run(q(SGW) .. " " .. words)
      assert.are.equal(0, code, words .. ": " .. err)
      assert.are.equal("", err, words)
      return out
    end

    local function refuses(words)
      local code, out, err = run(q(SGW) .. " " .. words)
      assert.are.equal(2, code, words)
      assert.are.equal("", out, words)
      assert.matches("^sgw: [^\n]+%-%-help\n$", err, words)
    end

    it("lists every command, and each command and subcommand explains itself", function()
      local top = help("--help")
      assert.are.equal(top, help("help"))
      local function names(section)
        local list = {}
        for line in (section or ""):gmatch("[^\n]+") do list[#list + 1] = line:match("^  (%S+)") end
        return list
      end
      local commands = names(top:match("commands:\n(.-)\n\n"))
      assert.are.same({ "serve", "migrate", "reload", "check", "version", "doctor", "company", "client",
        "account", "user", "meta", "sandbox", "jobs" }, commands)
      local subcommands = 0
      for _, name in ipairs(commands) do
        local text = help(name .. " --help")
        assert.matches("^usage: sgw " .. name, text)
        assert.matches("%-%-config FILE", text)
        assert.are.equal(text, help("help " .. name))
        refuses(name .. " --no-such-flag")
        for _, sub in ipairs(names(text:match("subcommands[^\n]*\n(.-)\n\n"))) do
          subcommands = subcommands + 1
          local sub_text = help(name .. " " .. sub .. " -h")
          assert.are.equal("usage: sgw " .. name .. " " .. sub .. " ", sub_text:sub(1, #name + #sub + 13))
          assert.matches("options:\n  %-%-", sub_text)
          refuses(name .. " " .. sub .. " --no-such-flag")
        end
        if text:match("subcommands") then refuses(name .. " no-such-subcommand") end
      end
      assert.are.equal(11, subcommands) -- company 1, client 4, account, user, meta, sandbox 1 each, jobs 2
    end)

    it("refuses an unknown command or option in one line", function()
      refuses("no-such-command")
      refuses("--no-such-option")
      refuses("client create --company")
    end)
  end)

  describe("doctor", function()
    local database_url

    setup(function()
      database_url = stack.fresh_database("doctor")
      local code, out = stack.sh(q(SGW) .. " migrate --set " .. q("database.url=" .. database_url))
      assert.are.equal(0, code, out)
    end)

    local function doctor(settings, json)
      local code, out, err = run(q(SGW) .. " doctor" .. (json and " --json" or "") .. " " .. sets(settings))
      return code, out, err
    end

    local function with(over)
      local t = { ["database.url"] = database_url, ["redis.url"] = stack.services().redis_url }
      for k, v in pairs(GOOD) do t[k] = v end
      for k, v in pairs(over or {}) do t[k] = v end
      return t
    end

    it("passes a good configuration against the test services", function()
      local code, out, err = doctor(with())
      assert.are.equal(0, code, out .. err)
      for line in out:gmatch("[^\n]+") do assert.matches("^ok  ", line) end
      assert.matches("database%s+reachable, all %d+ migrations applied", out)
      assert.matches("redis%s+reachable %(Redis %d", out)
    end)

    it("names each problem, one line each, exits 1 and prints no secret", function()
      local code, out = doctor(with {
        ["crypto.encryption_key"] = "",
        ["public_base_url"] = "http://sgw.example.com",
        ["redis.url"] = "redis://127.0.0.1:" .. stack.free_port(),
      }, true)
      assert.are.equal(1, code, out)
      local report = assert(cjson.decode(out))
      assert.is_false(report.ok)
      local status = {}
      for _, c in ipairs(report.checks) do status[c.name] = c.status end
      assert.are.same({ config = "ok", database = "ok", redis = "fail", ["encryption-key"] = "fail",
        ["public-url"] = "fail", meta = "ok", ["graph-version"] = "ok", admin = "ok", ["job-lease"] = "ok",
        ["client-address"] = "ok" }, status)
      assert.is_nil(out:find("doctor-secret-value", 1, true))
      assert.is_nil(out:find("doctor-verify-value", 1, true))
    end)

    it("warns when a TLS proxy is in front and may not name the client", function()
      local code, out = doctor(with { ["public_base_url"] = "https://sgw.example.com", ["http.trusted_proxies"] = "" })
      assert.are.equal(0, code, out)
      assert.matches("warn  client%-address%s+public_base_url is https, so a TLS proxy is in front, and "
        .. "http.trusted_proxies is empty", out)
      code, out = doctor(with { ["public_base_url"] = "https://sgw.example.com", ["http.trusted_proxies"] = "10.0.0.5" })
      assert.matches("ok    client%-address%s+http.trusted_proxies names the proxies", out)
    end)

    it("warns of a job lease too short for the calls jobs make", function()
      local code, out = doctor(with { ["jobs.lease_seconds"] = 30 })
      assert.are.equal(0, code, out)
      assert.matches("warn  job%-lease%s+jobs.lease_seconds is 30, under 1.5 x %(the longest call a job makes, 30 s, %+ 1 s%)", out)
      assert.truthy(out:find("set it to 46.5 or more", 1, true), out)
    end)

    it("says a database without the schema needs sgw migrate", function()
      local code, out = doctor(with { ["database.url"] = stack.fresh_database("doctor_empty") })
      assert.are.equal(1, code)
      assert.matches("fail  database%s+reachable but not migrated: run sgw migrate", out)
    end)

    it("fails an admin listener off loopback without a token", function()
      local code, out = doctor(with { ["admin.listen"] = "0.0.0.0:9090" })
      assert.are.equal(1, code)
      assert.matches("fail  admin%s+admin.listen is not on loopback and admin.token is empty", out)
    end)
  end)
end)

-- The newcomer's first minutes: `scripts/dev run` leaves a ready sandbox (a
-- company, an API key, a Facebook and an Instagram test page, a workspace
-- login) and prints commands that work when pasted as they are. This spec
-- runs it against the test services and pastes them.
local stack = require "stack"
local cjson = require "cjson.safe"

local q = stack.shell_quote

describe("scripts/dev run", function()
  local pid, dir, log_path

  local function log()
    local f = io.open(log_path)
    local text = f and f:read("a") or ""
    if f then f:close() end
    return text
  end

  setup(function()
    dir = stack.build_dir() .. "/test-roots/" .. stack.unique_name("demo")
    assert(stack.sh("mkdir -p " .. q(dir)) == 0)
    log_path = dir .. "/run.log"
    local services = stack.services()
    local db = stack.fresh_database("demo")
    local port, admin = stack.free_port(), stack.free_port()
    local code, out = stack.sh("cd " .. q(stack.repo_root()) .. " && SGW_DEV_STATE=" .. q(dir .. "/state")
      .. " SGW_DATABASE_URL=" .. q(db) .. " SGW_REDIS_URL=" .. q(services.redis_url)
      .. " setsid scripts/dev run --set http.listen=127.0.0.1:" .. port .. " --set admin.listen=127.0.0.1:" .. admin
      .. " --set redis.namespace=" .. stack.unique_name("demo") .. " > " .. q(log_path) .. " 2>&1 < /dev/null & echo $!")
    assert(code == 0, out)
    pid = tonumber(out:match("%d+"))
    stack.eventually(function() return log():find("Stop with Ctrl-C", 1, true) end, 120, 0.1,
      "scripts/dev run to print its summary")
    stack.wait_port(port, "sgw started by scripts/dev run")
  end)

  teardown(function()
    if pid then os.execute("kill -TERM " .. pid .. " 2>/dev/null") end
  end)

  it("prints a workspace login once, and commands that upload, post to both test pages and read comments", function()
    local text = log()
    assert.matches("Workspace +http://[^ ]+/workspace +demo@sgw%.example / %S+ +%(shown this once%)", text)
    local block = text:match("Try it: paste these into a shell[^\n]*\n(.-)\n    Then ")
    assert.is_string(block, text)
    local script = dir .. "/pasted.sh"
    local f = assert(io.open(script, "w"))
    f:write(block, "\n", 'printf "\\nPOST=%s\\n" "$POST"\n')
    f:close()
    local code, out = stack.sh("bash " .. q(script))
    assert.are.equal(0, code, out)
    -- The third command's answer: the post's comments (none yet), then its id.
    local listing, post = out:match("^(%b{})%s*\nPOST=(post_%w+)")
    assert.is_string(post, out)
    assert.are.same({ data = {}, nextCursor = cjson.null }, cjson.decode(listing))
    -- The post reaches both test pages through the simulator.
    local key = block:match("KEY=(sgk_test_%w+)")
    local base = block:match("(http://[%d%.:]+)/api/v1/uploads")
    stack.eventually(function()
      local status, body = stack.json("GET", base .. "/api/v1/posts/" .. post, { headers = { ["X-Api-Key"] = key } })
      return status == 200 and body.status == "published" and #body.targets == 2
    end, 30, 0.1, "the demo post to be published on both test pages")
  end)
end)

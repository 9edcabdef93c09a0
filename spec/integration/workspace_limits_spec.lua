-- Sign-in and sign-up limits of the web workspace over plain HTTP (the form's
-- cookie and CSRF token, as a browser sends them), from two client
-- addresses (127.0.0.1 and 127.0.0.2, both loopback): wrong passwords make
-- one (email, address) wait longer and longer while the owner signs in from
-- elsewhere; sign-up answers the same whether the email is taken or not, and
-- has its own limit per address. And a confirm page acts only on a POST with
-- its token: a HEAD, which the GET route serves, changes nothing.
local stack = require "stack"
local client = require("workspace_http").client

local PASSWORD = "correct horse battery"

describe("workspace limits", function()
  local sgw

  setup(function()
    sgw = stack.start_sgw {
      name = "workspace-limits",
      set = {
        ["workspace.rate_limit_per_minute"] = 100000,
        ["workspace.login.free_failures"] = 2,
        ["workspace.login.delay_base_seconds"] = 30,
        ["workspace.login.max_delay_seconds"] = 100,
        ["workspace.login.max_attempts_per_address"] = 1000,
        ["workspace.signup.max_per_address"] = 4,
        ["api.rate_limit.anonymous_per_minute"] = 100000,
        ["sandbox.max_test_pages"] = 2,
      },
    }
  end)

  teardown(stack.cleanup)

  local function sign_up(c, company, email)
    return c.submit("/workspace/signup", { company = company, email = email, password = PASSWORD })
  end

  it("answers a sign-up the same whether the email is taken or not, and changes nothing for a taken one", function()
    local a = client(sgw, "127.0.0.1")
    local status, body, h = sign_up(a, "Owner Co", "owner@limits.test")
    assert.are.equal(303, status, body)
    assert.are.equal("/workspace/login?notice=signed_up", h["location"])
    -- Not signed in by it: that needs the password, as for anyone.
    local page_status, _, page_h = a.request("GET", "/workspace/connections")
    assert.are.equal(303, page_status)
    assert.matches("^/workspace/login", page_h["location"])
    local again_status, again_body, again_h = sign_up(client(sgw, "127.0.0.1"), "Intruder Co", "Owner@Limits.test")
    assert.are.equal(status, again_status)
    assert.are.equal(body, again_body)
    assert.are.equal(h["location"], again_h["location"])

    -- Nothing was created for the taken email, and its password is unchanged.
    assert.are.equal("1", stack.psql(sgw.database_url, "SELECT count(*) FROM users WHERE email = 'owner@limits.test'"))
    assert.are.equal("0", stack.psql(sgw.database_url, "SELECT count(*) FROM companies WHERE name = 'Intruder Co'"))
    local _, notice = a.request("GET", "/workspace/login?notice=signed_up")
    assert.matches("Sign%-up received", notice)
    local s, _, sh = a.sign_in("owner@limits.test", PASSWORD)
    assert.are.equal(303, s)
    assert.matches("^/workspace", sh["location"])
  end)

  it("makes one (email, address) wait longer and longer, never the owner elsewhere", function()
    local attacker, owner = client(sgw, "127.0.0.2"), client(sgw, "127.0.0.1")
    for _ = 1, 2 do -- free failures
      assert.are.equal(401, (attacker.sign_in("owner@limits.test", "wrong password guess")))
    end
    -- The third failure imposes a wait; the right password is refused meanwhile.
    assert.are.equal(401, (attacker.sign_in("owner@limits.test", "wrong password guess")))
    local status, body, h = attacker.sign_in("owner@limits.test", PASSWORD)
    assert.are.equal(429, status)
    assert.matches("Too many sign%-in attempts", body)
    local first = tonumber(h["retry-after"])
    assert.is_true(first > 0 and first <= 30, tostring(first))

    -- From another address the owner signs in at once.
    status, _, h = owner.sign_in("owner@limits.test", PASSWORD)
    assert.are.equal(303, status)
    assert.matches("^/workspace", h["location"])
    -- Another email from the attacker's address is not held up either.
    assert.are.equal(401, (attacker.sign_in("someone-else@limits.test", "wrong password guess")))

    -- The next failure, once the wait is over, waits twice as long (the
    -- wait is made to end now instead of sleeping through it).
    local function end_wait()
      local code, out = stack.sh("redis-cli -u " .. stack.shell_quote(stack.services().redis_url)
        .. " --scan --pattern '*:workspace:login:wait:*' | while read k; do redis-cli -u "
        .. stack.shell_quote(stack.services().redis_url) .. " DEL \"$k\"; done")
      assert.are.equal(0, code, out)
    end
    end_wait()
    assert.are.equal(401, (attacker.sign_in("owner@limits.test", "wrong password guess")))
    status, _, h = attacker.sign_in("owner@limits.test", PASSWORD)
    assert.are.equal(429, status)
    local second = tonumber(h["retry-after"])
    assert.is_true(second > 30 and second <= 60, tostring(second))
    end_wait()
    assert.are.equal(401, (attacker.sign_in("owner@limits.test", "wrong password guess")))
    status, _, h = attacker.sign_in("owner@limits.test", PASSWORD)
    assert.is_true(tonumber(h["retry-after"]) > 60 and tonumber(h["retry-after"]) <= 100, h["retry-after"])

    -- A success clears the count for that address.
    end_wait()
    assert.are.equal(303, (attacker.sign_in("owner@limits.test", PASSWORD)))
    attacker.cookie = nil -- a signed-out browser again
    assert.are.equal(401, (attacker.sign_in("owner@limits.test", "wrong password guess")))
    assert.are.equal(401, (attacker.sign_in("owner@limits.test", "wrong password guess")))
  end)

  it("lets no more than the free failures and one through when guesses come all at once", function()
    local attacker = client(sgw, "127.0.0.3")
    local status, page = attacker.request("GET", "/workspace/login")
    assert.are.equal(200, status)
    local csrf = assert(page:match('name="csrf" value="([^"]+)"'))
    local body = "csrf=" .. csrf:gsub("[^%w%-%._~]", function(ch) return ("%%%02X"):format(ch:byte()) end)
      .. "&email=parallel%40limits.test&password=wrong+password+guess"
    -- Eight guesses sent at once, each on a connection of its own.
    local q = stack.shell_quote
    local one = "curl -s -o /dev/null -w '%{http_code}\\n' --interface 127.0.0.3 -H " .. q("Cookie: " .. attacker.cookie)
      .. " --data " .. q(body) .. " " .. q(sgw.base_url .. "/workspace/login")
    local code, out = stack.sh("for i in 1 2 3 4 5 6 7 8; do " .. one .. " & done; wait")
    assert.are.equal(0, code, out)
    local answers = {}
    for s in out:gmatch("%d%d%d") do answers[s] = (answers[s] or 0) + 1 end
    -- Two free failures, and the one that makes the wait; the others wait.
    assert.are.same({ ["401"] = 3, ["429"] = 5 }, answers, out)
  end)

  it("limits sign-ups per address", function()
    local c = client(sgw, "127.0.0.2")
    local limited
    for i = 1, 6 do
      local status, body, h = sign_up(c, "Co " .. i, "many" .. i .. "@limits.test")
      if status == 429 then
        limited = i
        assert.matches("Too many sign%-ups", body)
        assert.is_true(tonumber(h["retry-after"]) > 0)
        break
      end
      assert.are.equal(303, status)
    end
    assert.are.equal(5, limited)
    assert.are.equal("0", stack.psql(sgw.database_url, "SELECT count(*) FROM users WHERE email = 'many5@limits.test'"))
    -- Another address may still sign up.
    assert.are.equal(303, (sign_up(client(sgw, "127.0.0.1"), "Other Co", "other@limits.test")))
  end)

  it("acts on a confirm page only for a POST with its token: a HEAD of it revokes and disconnects nothing", function()
    local c = client(sgw, "127.0.0.3")
    assert.are.equal(303, (sign_up(c, "Head Co", "head@limits.test")))
    assert.are.equal(303, (c.sign_in("head@limits.test", PASSWORD)))
    assert.are.equal(201, (c.submit("/workspace/clients", { name = "Head app", environment = "test",
      ["scope:posts:read"] = "on" }, "/workspace/clients/new")))
    assert.are.equal(303, (c.submit("/workspace/connections/test-pages", { name = "Head page",
      platform = "facebook" }, "/workspace/connections?env=test")))
    local db = sgw.database_url
    local client_id = stack.psql(db, "SELECT id FROM api_clients WHERE name = 'Head app'")
    local account_id = stack.psql(db, "SELECT id FROM social_accounts WHERE name = 'Head page'")
    local function state()
      return stack.psql(db, "SELECT (SELECT coalesce(revoked_at::text, 'active') FROM api_clients WHERE id = '"
        .. client_id .. "') || ' ' || (SELECT status FROM social_accounts WHERE id = '" .. account_id .. "')")
    end
    assert.are.equal("active active", state())

    local revoke = "/workspace/clients/" .. client_id .. "/revoke"
    local disconnect = "/workspace/connections/" .. account_id .. "/disconnect"
    for _, path in ipairs({ revoke, disconnect }) do
      -- The confirm page itself, without its body: nothing happens.
      local status, body, h = c.request("HEAD", path)
      assert.are.equal(200, status, path)
      assert.are.equal("", body)
      assert.is_nil(h["location"])
      -- A POST without the token is refused.
      assert.are.equal(403, (c.request("POST", path, "confirm=1")), path)
    end
    assert.are.equal("active active", state())

    -- With the confirm page's token, each acts.
    local status, _, h = c.submit(revoke, {})
    assert.are.equal(303, status)
    assert.are.equal("/workspace/clients?notice=client_revoked", h["location"])
    status, _, h = c.submit(disconnect, {})
    assert.are.equal(303, status)
    assert.matches("notice=account_disconnected", h["location"])
    assert.matches("^%d.* disconnected$", state())
  end)

  it("holds a company to sandbox.max_test_pages test pages, however they are made, until one is disconnected", function()
    local c = client(sgw, "127.0.0.4")
    assert.are.equal(303, (sign_up(c, "Pages Co", "pages@limits.test")))
    assert.are.equal(303, (c.sign_in("pages@limits.test", PASSWORD)))
    local function add_in_workspace(name)
      return c.submit("/workspace/connections/test-pages", { name = name, platform = "facebook" },
        "/workspace/connections?env=test")
    end
    assert.are.equal(303, (add_in_workspace("Page one")))
    assert.are.equal(303, (add_in_workspace("Page two")))
    local db = sgw.database_url
    local company = stack.psql(db, "SELECT company_id FROM social_accounts WHERE name = 'Page one'")
    local function pages()
      return stack.psql(db, "SELECT count(*) FROM social_accounts WHERE company_id = '" .. company
        .. "' AND status <> 'disconnected'")
    end

    -- The workspace says why, on the form.
    local status, body = add_in_workspace("Page three")
    assert.are.equal(409, status)
    assert.truthy(body:find("already has 2 test pages, as many as it may have", 1, true), body)
    -- The API: 409 limit_reached, a problem document.
    local key = stack.cli(sgw, { "client", "create", "--company", company, "--environment", "test",
      "--scopes", "sandbox:write accounts:read" }).apiKey
    local api_status, problem, headers = sgw:json("POST", "/api/v1/sandbox/accounts",
      { body = { platform = "instagram", name = "Page three" }, headers = { ["X-Api-Key"] = key } })
    assert.are.equal(409, api_status)
    assert.are.equal("application/problem+json", headers["content-type"])
    assert.are.equal("limit_reached", problem.code)
    assert.are.equal("/docs/errors#limit_reached", problem.type)
    assert.are.equal("Limit reached", problem.title)
    assert.matches("already has 2 test pages", problem.detail, 1, true)
    -- The operator command too.
    local code, out = sgw:command({ "sandbox", "add-page", "--company", company, "--platform", "facebook",
      "--name", "Page three" })
    assert.are_not.equal(0, code)
    assert.truthy(out:find("already has 2 test pages", 1, true), out)
    assert.are.equal("2", pages())

    -- Another company is not held to this one's pages.
    local other = stack.cli(sgw, { "company", "create", "--name", "Other Pages Co" }).companyId
    assert.truthy(stack.cli(sgw, { "sandbox", "add-page", "--company", other, "--platform", "facebook",
      "--name", "Theirs" }).accountId)

    -- Once one is disconnected, there is room for one more.
    local first = stack.psql(db, "SELECT id FROM social_accounts WHERE name = 'Page one'")
    assert.are.equal(303, (c.submit("/workspace/connections/" .. first .. "/disconnect", {})))
    api_status = sgw:json("POST", "/api/v1/sandbox/accounts",
      { body = { platform = "instagram", name = "Page three" }, headers = { ["X-Api-Key"] = key } })
    assert.are.equal(201, api_status)
    assert.are.equal("2", pages())
  end)
end)

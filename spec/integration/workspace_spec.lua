-- The web workspace (/workspace) in a real browser: headless Chromium
-- driven through WebDriver (spec/support/webdriver.lua) against the real
-- stack and the fake Graph API. Sign-up and sign-in, Connections (test
-- pages, Connect with Facebook through the fake dialog, disconnect), API
-- clients (create, the secrets shown once and working against the API,
-- rotate, revoke, deliveries), tenancy, CSRF, sign-out, sign-in limits, and
-- `sgw user create`. Screenshots of every screen, desktop and phone width,
-- go to <build>/test-artifacts/workspace/.
local stack = require "stack"
local fixture_root = require "fixture_root"
local fake_graph = require "fake_graph"
local webdriver = require "webdriver"
local workspace_http = require "workspace_http"
local cjson = require "cjson.safe"

local ENCRYPTION_KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
local APP_ID, APP_SECRET = "100000000000123", "fake-app-secret" -- the fake's defaults
local PASSWORD = "correct horse battery"

-- test only: `sgw user create` as the host runs it, with a console whose
-- read_secret answers what standard input would.
local USER_CLI = [[
return function(req)
  local args = {}
  for i, a in ipairs(req.json.argv) do args[i] = a end
  local console = { read_secret = function() return req.json.stdin end }
  local code, out, err = require("handlers.cli.user")(args, console)
  return 200, { code = code, out = out, err = err }
end
]]

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- A private project root (SGW_ROOT): config, migrations, handlers, lib.
local function make_root()
  local root = fixture_root.create("workspace")
  local repo = stack.repo_root()
  local code, out = stack.sh("cp -r " .. stack.shell_quote(repo .. "/config") .. " "
    .. stack.shell_quote(repo .. "/migrations") .. " " .. stack.shell_quote(root) .. "/")
  assert(code == 0, out)
  fixture_root.write(root .. "/handlers/test/workspace_user_cli.lua", USER_CLI)
  local path = root .. "/handlers/routes.lua"
  local text = read(path)
  local add = 'routes[#routes + 1] = { method = "POST", path = "/test/workspace/user-cli", handler = "test/workspace_user_cli", auth = false }\n'
  local patched, n = text:gsub("\nreturn routes%s*$", function() return "\n" .. add .. "return routes\n" end)
  assert(n == 1, "handlers/routes.lua no longer ends with 'return routes'")
  fixture_root.write(path, patched)
  return root
end

local function url_encode(s)
  return (tostring(s):gsub("[^%w%-%._~]", function(c) return string.format("%%%02X", c:byte()) end))
end

local function form(t)
  local parts = {}
  for k, v in pairs(t) do parts[#parts + 1] = url_encode(k) .. "=" .. url_encode(v) end
  table.sort(parts)
  return table.concat(parts, "&")
end

describe("the workspace", function()
  local sgw, fake, driver, b, root, artifacts
  local a = {} -- what the first company made: key, client id, account ids

  local function page(path) b:go(sgw.base_url .. path) end

  local function text(css) return b:text(css or "main") end

  -- Saves <name>-desktop.png and <name>-phone.png of the current page.
  local function shot(name)
    b:set_size(1280, 900)
    b:screenshot(artifacts .. "/" .. name .. "-desktop.png", { full = true })
    b:set_size(390, 844)
    b:screenshot(artifacts .. "/" .. name .. "-phone.png", { full = true })
    b:set_size(1280, 900)
  end

  local function api(key, method, path, opts)
    opts = opts or {}
    opts.headers = opts.headers or {}
    opts.headers["X-Api-Key"] = key
    return sgw:json(method or "GET", path or "/api/v1/social-accounts", opts)
  end

  local function cli(argv)
    local code, out = sgw:command(argv)
    assert(code == 0, table.concat(argv, " ") .. " failed (" .. code .. "): " .. out)
    return assert(cjson.decode(out:match("(%b{})%s*$")), out)
  end

  local function sign_up(company, email, password)
    page("/workspace/signup")
    b:type("#company", company)
    b:type("#email", email)
    b:type("#password", password or PASSWORD)
    b:click("#sign-up")
    -- Sign-up never signs in (its answer must not tell whether the email
    -- was taken): the sign-in page follows, with a notice.
    b:wait_url("/workspace/login%?notice=signed_up")
    assert.matches("Sign%-up received", b:text("#notice"))
    b:type("#email", email)
    b:type("#password", password or PASSWORD)
    b:click("#sign-in")
    b:wait_url("/workspace/connections")
  end

  local function sign_in(email, password)
    page("/workspace/login")
    b:type("#email", email)
    b:type("#password", password)
    b:click("#sign-in")
  end

  -- The session cookie, for requests outside the browser.
  local function cookie_header()
    local c = assert(b:cookie("sgw_workspace"), "no session cookie")
    return "sgw_workspace=" .. c.value
  end

  local function csrf_of_page()
    return b:execute("return document.querySelector('input[name=csrf]').value")
  end

  setup(function()
    artifacts = stack.build_dir() .. "/test-artifacts/workspace"
    os.execute("rm -rf " .. stack.shell_quote(artifacts) .. " && mkdir -p " .. stack.shell_quote(artifacts))
    fake = fake_graph.start({ config = { require_appsecret_proof = true } })
    root = make_root()
    sgw = stack.start_sgw {
      name = "workspace",
      env = { SGW_ROOT = root },
      set = {
        ["lua.root"] = root,
        ["crypto.encryption_key"] = ENCRYPTION_KEY,
        ["meta.graph_base_url"] = fake.graph_url,
        ["meta.oauth_dialog_url"] = fake.graph_url .. "/dialog/oauth",
        ["meta.app_id"] = APP_ID,
        ["meta.app_secret"] = APP_SECRET,
        ["meta.request_ads_read"] = true,
        ["workspace.rate_limit_per_minute"] = 100000,
        ["workspace.login.free_failures"] = 2,
        ["workspace.login.delay_base_seconds"] = 600,
        ["workspace.login.max_attempts_per_address"] = 40,
        ["workspace.login.max_attempts_per_email"] = 12,
        ["api.rate_limit.anonymous_per_minute"] = 100000,
      },
    }
    driver = webdriver.start()
    b = driver:session()
  end)

  teardown(function()
    webdriver.stop_all()
    fake_graph.stop_all()
    stack.cleanup()
  end)

  it("sends visitors to sign in, and signs a company up", function()
    page("/workspace/clients")
    b:wait_url("/workspace/login%?next=/workspace/clients$")
    shot("login")
    b:click("a[href='/workspace/signup']")
    b:wait_for("#company")
    shot("signup")

    -- The server checks what the browser would: remove the browser's own checks first.
    b:execute([[document.querySelectorAll('input').forEach(function (i) {
      i.removeAttribute('required'); i.removeAttribute('minlength'); if (i.type === 'email') i.type = 'text'; });]])
    b:type("#company", "Acme")
    b:type("#email", "not-an-email")
    b:type("#password", "short")
    b:click("#sign-up")
    assert.matches("like name@example.com", b:text("#email-error"))
    assert.matches("at least 12 characters", b:text("#password-error"))
    assert.are.equal("Acme", b:attribute("#company", "value"))
    assert.are.equal("", b:execute("return document.getElementById('password').value"))
    shot("signup-errors")

    sign_up("Acme <Shop>", "owner@acme.test")
    assert.matches("Acme <Shop>", text(".who"))
    assert.matches("owner@acme.test", text(".who"))
    assert.matches("No live accounts yet", text("#empty"))
    shot("connections-live-empty")

    local hash = stack.psql(sgw.database_url, "SELECT password_hash FROM users WHERE email = 'owner@acme.test'")
    assert.matches("^%$argon2id%$", hash)
    a.company = stack.psql(sgw.database_url, "SELECT company_id FROM users WHERE email = 'owner@acme.test'")
  end)

  it("keeps the session in an HttpOnly, SameSite=Lax cookie, stored hashed", function()
    local c = b:cookie("sgw_workspace")
    assert.is_true(c.httpOnly)
    assert.are.equal("Lax", c.sameSite)
    assert.are.equal("/workspace", c.path)
    assert.is_false(c.secure) -- public_base_url is http here
    assert.are.equal("0", stack.psql(sgw.database_url, "SELECT count(*) FROM workspace_sessions WHERE id = '" .. c.value .. "'"))
    assert.are.equal("1", stack.psql(sgw.database_url, "SELECT count(*) FROM workspace_sessions WHERE id = encode(sha256('"
      .. c.value .. "'), 'hex')"))
    local status, body, headers = sgw:request("GET", "/workspace/connections", { headers = { Cookie = cookie_header() } })
    assert.are.equal(200, status)
    assert.matches("^text/html", headers["content-type"])
    assert.are.equal("no-store", headers["cache-control"])
    assert.are.equal("DENY", headers["x-frame-options"])
    assert.matches("frame%-ancestors 'none'", headers["content-security-policy"])
    assert.matches("Acme &lt;Shop&gt;", body) -- escaped
  end)

  it("adds a sandbox test page", function()
    page("/workspace/connections?env=test")
    assert.matches("No test pages yet", text("#empty"))
    shot("connections-sandbox-empty")
    b:type("#page-name", "Test Shop")
    b:click("#add-test-page-button")
    b:wait_for("#notice")
    assert.matches("Test page added", text("#notice"))
    local row = text("#accounts tbody tr")
    assert.matches("Test Shop", row)
    assert.matches("Facebook Page", row)
    assert.matches("active", row)
    shot("connections-sandbox")
  end)

  it("creates a sandbox API client whose secrets, shown once, work against the API", function()
    page("/workspace/clients")
    assert.matches("No API clients yet", text("#empty"))
    shot("clients-empty")
    b:click("#new-client")
    b:wait_for("#name")
    assert.is_true(b:selected("#env-test"))
    assert.is_true(b:selected("#scope-accounts-read"))
    assert.is_false(b:selected("#scope-sandbox-write"))
    shot("client-new")

    -- A mistake first: the form comes back with what was typed.
    b:execute("document.getElementById('webhook-url').type = 'text'")
    b:type("#name", "Shop backend")
    b:type("#webhook-url", "ftp://example.com/hook")
    b:click("#create-client")
    assert.matches("must be an absolute http", b:text("#webhook-error"))
    assert.are.equal("Shop backend", b:attribute("#name", "value"))

    b:type("#webhook-url", "http://0x7f000001:9/hooks") -- 127.0.0.1: refused unless allowed
    b:click("#create-client")
    assert.matches("private, loopback or reserved address", b:text("#webhook-error"))
    b:type("#webhook-url", "")
    b:click("#scope-sandbox-write")
    b:click("#create-client")
    b:wait_for("#secret-api-key")

    local key = b:text("#secret-api-key")
    local client_id = b:text("#secret-client-id")
    local secret = b:text("#secret-client-secret")
    assert.matches("^sgk_test_%w+$", key)
    assert.matches("^cli_%w+$", client_id)
    assert.matches("^sgs_test_%w+$", secret)
    assert.matches("you will not see them again", text("#shown-once"))
    b:click("button[data-copy='secret-api-key']")
    stack.eventually(function() return b:text("button[data-copy='secret-api-key']") == "Copied" end, 5)
    shot("client-created")
    a.key, a.client = key, client_id

    -- The key, read off the page, lists the test page.
    local status, body = api(key)
    assert.are.equal(200, status)
    assert.are.equal(1, #body.data)
    assert.are.equal("Test Shop", body.data[1].name)
    assert.are.equal("test", body.data[1].environment)
    a.test_page = body.data[1].id
    -- So do the OAuth client id and secret.
    local tstatus, token = sgw:json("POST", "/oauth/token", {
      headers = { ["Content-Type"] = "application/x-www-form-urlencoded" },
      body = form({ grant_type = "client_credentials", client_id = client_id, client_secret = secret }) })
    assert.are.equal(200, tstatus)
    assert.are.equal("Bearer", token.token_type)

    -- The list shows the prefix only, and that the key was used; never the key again.
    page("/workspace/clients")
    local row = text("#clients tbody tr")
    assert.matches("Shop backend", row)
    assert.matches("Sandbox", row)
    assert.matches("sandbox:write", row)
    assert.matches(key:sub(1, 13), row, 1, true)
    assert.not_matches("never", row)
    assert.is_nil(b:source():find(key, 1, true))
    shot("clients")
    page("/workspace/clients/" .. client_id)
    assert.is_nil(b:source():find(key, 1, true))
    assert.matches("No webhook URL", text("#no-deliveries"))
    shot("client")
  end)

  it("rotates the key: both keys work, and the page says until when", function()
    page("/workspace/clients/" .. a.client)
    b:click("#rotate-key")
    b:wait_for("#grace")
    local new_key = b:text("#secret-api-key")
    assert.matches("^sgk_test_%w+$", new_key)
    assert.are_not.equal(a.key, new_key)
    local expires = stack.psql(sgw.database_url, "SELECT to_char(max(expires_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') FROM api_keys WHERE client_id = '"
      .. a.client .. "'")
    assert.is_truthy(text("#grace"):find("keeps working until " .. expires .. " UTC (24 hours from now)", 1, true))
    shot("client-rotated")
    assert.are.equal(200, (api(a.key)))
    assert.are.equal(200, (api(new_key)))
    page("/workspace/clients/" .. a.client)
    assert.matches(new_key:sub(1, 13), b:text("#key-prefix"), 1, true)
    assert.matches("works until", text("#client-details"))
    a.old_key, a.key = a.key, new_key
  end)

  it("revokes a client after asking: its keys get 401 at once", function()
    page("/workspace/clients/" .. a.client)
    b:click("#revoke")
    b:wait_for("#confirm-revoke")
    assert.matches("stop working at once", text())
    shot("client-revoke")
    b:click("#confirm-revoke")
    b:wait_for("#notice")
    assert.matches("revoked", text("#notice"))
    assert.matches("Shop backend", text("#revoked-clients"))
    shot("clients-after-revoke")
    assert.are.equal(401, (api(a.key)))
    assert.are.equal(401, (api(a.old_key)))
  end)

  it("connects Facebook Pages and their Instagram accounts through the dialog", function()
    local fb = fake:add_page({ name = "Fake Shop", instagram_business_account = { username = "fakeshop" } })
    local other = fake:add_page({ name = "Other Page" })
    page("/workspace/connections?env=live")
    b:click("#connect-facebook")
    b:wait_url("^" .. fake.url:gsub("%p", "%%%0") .. "/")
    b:wait_for("#continue")
    assert.matches("Fake Shop", b:text("#pages"))
    shot("facebook-dialog")
    b:click("#continue")
    b:wait_for("#connect-selected")
    assert.matches("/workspace/facebook/callback%?code=", b:url())
    shot("facebook-pick")
    assert.is_true(b:selected("#page-" .. fb.id))
    assert.is_true(b:selected("#ig-" .. fb.instagram_business_account.id))
    b:click("#page-" .. other.id) -- not this one
    b:click("#connect-selected")
    b:wait_for("#notice")
    assert.matches("connected", text("#notice"))
    local rows = text("#accounts")
    assert.matches("Fake Shop", rows)
    assert.matches("fakeshop", rows)
    assert.matches("Instagram", rows)
    assert.not_matches("Other Page", rows)
    shot("connections-live")

    -- What the fake saw: the app's id and secret, our callback, each code once.
    local o = fake:control("GET", "oauth")
    assert.are.equal(sgw.base_url .. "/workspace/facebook/callback", o.dialogs[1].redirect_uri)
    assert.matches("pages_manage_posts", o.dialogs[1].scope)
    assert.matches("pages_read_user_engagement", o.dialogs[1].scope)
    assert.matches("business_management", o.dialogs[1].scope)
    assert.matches("ads_read", o.dialogs[1].scope)
    assert.are.equal(1, o.codes_used)
    local exchanges = fake:requests({ path = "/oauth/access_token" })
    assert.are.equal(2, #exchanges)
    assert.are.equal("fb_exchange_token", exchanges[2].params.grant_type)

    -- Live accounts with the Page's token, encrypted at rest.
    local rows_db = stack.psql(sgw.database_url, "SELECT platform || ' ' || platform_account_id || ' ' || (access_token_enc IS NOT NULL) "
      .. "FROM social_accounts WHERE company_id = '" .. a.company .. "' AND environment = 'live' ORDER BY platform")
    assert.are.equal("facebook " .. fb.id .. " true\ninstagram " .. fb.instagram_business_account.id .. " true", rows_db)
    local all = stack.psql(sgw.database_url, "SELECT string_agg(access_token_enc, ' ') FROM social_accounts")
    assert.is_nil(all:find(fb.access_token, 1, true))
    local live_key = cli({ "client", "create", "--company", a.company, "--environment", "live", "--scopes", "accounts:read" }).apiKey
    local status, body = api(live_key)
    assert.are.equal(200, status)
    assert.are.equal(2, #body.data)
    a.live_key = live_key
    for _, acc in ipairs(body.data) do
      if acc.platform == "instagram" then a.instagram = acc.id else a.facebook = acc.id end
      assert.is_true(acc.webhooksSubscribed)
    end

    -- The picked Page (which the Instagram account acts through) gets the
    -- app's webhooks, with its own token and a valid appsecret_proof; the
    -- other Page does not.
    local subs = fake:subscriptions().pages
    assert.are.same({ "feed" }, subs[fb.id][APP_ID])
    assert.is_nil(subs[other.id])
    for _, r in ipairs(fake:requests({ path = "/" .. fb.id .. "/subscribed_apps" })) do
      assert.are.equal("valid", r.params.appsecret_proof)
    end
    a.page = fb.id
    a.other_page = other.id
  end)

  it("says so when the dialog is cancelled, and refuses a callback used twice", function()
    fake:config({ oauth_auto = "deny" })
    page("/workspace/connections?env=live")
    b:click("#connect-facebook")
    b:wait_for("#error")
    assert.matches("Nothing was connected", text("#error"))
    assert.matches("Connect with Facebook again", text("#error"))
    shot("facebook-denied")
    b:refresh() -- the same callback again
    b:wait_for("#error")
    assert.matches("no longer valid", text("#error"))

    -- A connection through the dialog while one Graph call fails: the error shown.
    local function connect_failing(path, code, message)
      fake:fail({ match = { path = path }, error = { code = code, message = message } })
      page("/workspace/connections?env=live")
      b:click("#connect-facebook")
      b:wait_for("#error")
      assert.matches("Facebook did not complete the connection", text("#error"))
      return text("#error")
    end
    fake:config({ oauth_auto = "approve" })
    -- Facebook refuses the code exchange (e.g. a wrong meta.app_secret).
    local shown = connect_failing("/oauth/access_token", 1, "Error validating client secret.")
    assert.matches("Error validating client secret", shown)
    assert.matches("/workspace/facebook/callback is a valid OAuth redirect URI", shown)
    shot("facebook-failed")
    -- Facebook gives the Pages but not who is connecting them (GET /me fails).
    assert.matches("did not say who is connecting them", connect_failing("/me", 2, "Service temporarily unavailable"))
    fake:config({ oauth_auto = "none" })
  end)

  it("shows an account Meta refused, with why, and reconnects it through the dialog", function()
    -- As token health leaves an account whose token Meta refused (its path is
    -- the token_health spec's); here: what the person sees and does.
    -- A lost Page role (190/492) is for a Page admin to mend, not a reconnect.
    stack.psql(sgw.database_url, [[UPDATE social_accounts SET status = 'reconnect_required', status_since = now(),
        status_reason = '{"code":"token_expired","message":"The user is not an admin of the Page.","platformCode":"190/492"}'
      WHERE id = ']] .. a.facebook .. "'")
    page("/workspace/connections?env=live")
    assert.matches("A Page admin must give that role back", text("tr[data-account='" .. a.facebook .. "']"), 1, true)
    stack.psql(sgw.database_url, [[UPDATE social_accounts SET status = 'reconnect_required', status_since = now(),
        status_reason = '{"code":"token_expired","message":"Error validating access token: Session has expired.","platformCode":"190/463"}'
      WHERE id = ']] .. a.facebook .. "'")
    page("/workspace/connections?env=live")
    local row = text("tr[data-account='" .. a.facebook .. "']")
    assert.matches("reconnect_required", row)
    assert.matches("Session has expired", row)
    assert.matches("Connect it again to go on publishing", row, 1, true)
    shot("connections-reconnect")
    b:click("tr[data-account='" .. a.facebook .. "'] a.reconnect")
    b:wait_for("#continue")
    b:click("#continue")
    b:wait_for("#connect-selected")
    if b:selected("#page-" .. a.other_page) then b:click("#page-" .. a.other_page) end
    b:click("#connect-selected")
    b:wait_for("#notice")
    assert.not_matches("reconnect_required", text("tr[data-account='" .. a.facebook .. "']"))
    local _, body = api(a.live_key)
    assert.are.equal(2, #body.data)
    for _, acc in ipairs(body.data) do
      assert.are.equal("active", acc.status)
      assert.are.equal(cjson.null, acc.statusReason)
    end
  end)

  it("disconnects an account after asking; it leaves the API's list", function()
    page("/workspace/connections?env=live")
    b:click("tr[data-account='" .. a.instagram .. "'] a")
    b:wait_for("#confirm-disconnect")
    assert.matches("account_disconnected", text())
    shot("disconnect")
    b:click("#confirm-disconnect")
    b:wait_for("#notice")
    assert.matches("disconnected", text("tr[data-account='" .. a.instagram .. "']"))
    local _, body = api(a.live_key)
    assert.are.equal(1, #body.data)
    assert.are.equal("facebook", body.data[1].platform)
    shot("connections-live-disconnected")
    -- The Facebook account still gets the Page's webhooks: the app stays.
    assert.are.equal(0, #fake:requests({ path = "/" .. a.page .. "/subscribed_apps", method = "DELETE" }))
    assert.are.same({ "feed" }, fake:subscriptions().pages[a.page][APP_ID])

    -- The last account of the Page goes: the app leaves the Page.
    page("/workspace/connections?env=live")
    b:click("tr[data-account='" .. a.facebook .. "'] a")
    b:wait_for("#confirm-disconnect")
    b:click("#confirm-disconnect")
    b:wait_for("#notice")
    local deletes = fake:requests({ path = "/" .. a.page .. "/subscribed_apps", method = "DELETE" })
    assert.are.equal(1, #deletes)
    assert.are.equal("valid", deletes[1].params.appsecret_proof)
    assert.is_nil(fake:subscriptions().pages[a.page][APP_ID])
    _, body = api(a.live_key)
    assert.are.equal(0, #body.data)
  end)

  it("creates a live client with a webhook, and lists its recent deliveries", function()
    page("/workspace/clients/new")
    b:type("#name", "Live shop")
    b:click("#env-live")
    b:type("#webhook-url", "https://hooks.example.com/sgw")
    b:click("#create-client")
    b:wait_for("#secret-webhook")
    assert.matches("^sgk_live_", b:text("#secret-api-key"))
    assert.matches("^sgs_live_", b:text("#secret-client-secret"))
    assert.matches("^whsec_", b:text("#secret-webhook"))
    local client = b:text("#secret-client-id")
    b:click("#done")
    b:wait_for("#no-deliveries")
    assert.matches("No deliveries yet", text("#no-deliveries"))

    -- Two attempts of one event, as lib/webhooks.lua records them.
    stack.psql(sgw.database_url, string.format([[
      INSERT INTO events (id, company_id, environment, client_id, type, data)
        VALUES ('evt_ws1', '%s', 'live', '%s', 'social.post.published', '{}');
      INSERT INTO webhook_deliveries (event_id, client_id, company_id, environment, attempt, url, outcome,
          status_code, error, duration_ms, next_retry_at, created_at)
        VALUES ('evt_ws1', '%s', '%s', 'live', 1, 'https://hooks.example.com/sgw', 'failed', 503, NULL, 120,
                now() + interval '5 seconds', now() - interval '1 minute'),
               ('evt_ws1', '%s', '%s', 'live', 2, 'https://hooks.example.com/sgw', 'delivered', 200, NULL, 85, NULL, now())]],
      a.company, client, client, a.company, client, a.company))
    b:refresh()
    b:wait_for("#deliveries")
    local rows = b:find_all("#deliveries tbody tr")
    assert.are.equal(2, #rows)
    assert.matches("delivered", b:text(rows[1]))
    assert.matches("HTTP 200", b:text(rows[1]))
    assert.matches("failed", b:text(rows[2]))
    assert.matches("HTTP 503", b:text(rows[2]))
    assert.matches("social.post.published", b:text(rows[2]))
    shot("client-deliveries")
  end)

  it("refuses a POST without this session's CSRF token (403)", function()
    local cookie = cookie_header()
    page("/workspace/clients/new")
    local csrf = csrf_of_page()
    local function post(path, fields)
      return sgw:request("POST", path, { body = form(fields), headers = {
        Cookie = cookie, ["Content-Type"] = "application/x-www-form-urlencoded" } })
    end
    local fields = { name = "Sneaky", environment = "test", ["scope:posts:read"] = "on" }
    local status, body = post("/workspace/clients", fields)
    assert.are.equal(403, status)
    assert.matches("security token is missing or stale", body)
    -- Another first character (one in 64 tokens starts with "x" already).
    fields.csrf = (csrf:sub(1, 1) == "x" and "y" or "x") .. csrf:sub(2)
    assert.are.equal(403, (post("/workspace/clients", fields)))
    assert.are.equal(403, (post("/workspace/logout", {})))
    assert.are.equal(403, (post("/workspace/connections/" .. a.test_page .. "/disconnect", {})))
    assert.are.equal("0", stack.psql(sgw.database_url, "SELECT count(*) FROM api_clients WHERE name = 'Sneaky'"))
    assert.are.equal("active", stack.psql(sgw.database_url, "SELECT status FROM social_accounts WHERE id = '" .. a.test_page .. "'"))
    fields.csrf = csrf
    assert.are.equal(201, (post("/workspace/clients", fields)))

    -- And in the browser: a form whose token was taken out.
    page("/workspace/connections?env=test")
    b:execute("document.querySelector('#add-test-page input[name=csrf]').remove()")
    b:type("#page-name", "No token")
    b:click("#add-test-page-button")
    b:wait_for("#error")
    assert.matches("The form has expired", text("#error"))
    shot("csrf-refused")
  end)

  it("signs out: the session ends on the server too", function()
    page("/workspace/connections")
    local old = cookie_header()
    b:click("#sign-out")
    b:wait_url("/workspace/login")
    assert.matches("signed out", text("#notice"))
    page("/workspace/clients")
    b:wait_url("/workspace/login%?next=")
    local status, _, headers = sgw:request("GET", "/workspace/clients", { headers = { Cookie = old } })
    assert.are.equal(303, status)
    assert.matches("^/workspace/login", headers["location"])
  end)

  it("shows a second company nothing of the first, even at direct URLs (404)", function()
    sign_up("Beta", "boss@beta.test")
    assert.matches("No live accounts yet", text("#empty"))
    page("/workspace/connections?env=test")
    assert.matches("No test pages yet", text("#empty"))
    page("/workspace/clients")
    assert.matches("No API clients yet", text("#empty"))
    for _, path in ipairs({ "/workspace/clients/" .. a.client, "/workspace/clients/" .. a.client .. "/revoke",
      "/workspace/connections/" .. a.test_page .. "/disconnect" }) do
      local status, body = sgw:request("GET", path, { headers = { Cookie = cookie_header() } })
      assert.are.equal(404, status, path)
      assert.matches("belongs to another company", body)
    end
    page("/workspace/clients/" .. a.client)
    assert.matches("Not found", text("#error"))
    shot("not-found")
    -- POSTs with a valid token of this session are refused as well.
    page("/workspace/clients")
    local csrf = csrf_of_page()
    for _, path in ipairs({ "/workspace/connections/" .. a.test_page .. "/disconnect" }) do
      local status = sgw:request("POST", path, { body = "csrf=" .. csrf, headers = {
        Cookie = cookie_header(), ["Content-Type"] = "application/x-www-form-urlencoded" } })
      assert.are.equal(404, status, path)
    end
    assert.are.equal("active", stack.psql(sgw.database_url, "SELECT status FROM social_accounts WHERE id = '" .. a.test_page .. "'"))
    b:click("#sign-out")
    b:wait_url("/workspace/login")
  end)

  it("signs in with a generic refusal, and makes wrong passwords wait per email and address", function()
    sign_in("owner@acme.test", "wrong password here")
    assert.are.equal("The email or password is wrong.", b:text("#form-error"))
    sign_in("nobody@acme.test", PASSWORD)
    assert.are.equal("The email or password is wrong.", b:text("#form-error"))
    shot("login-wrong")
    sign_in("owner@acme.test", PASSWORD)
    b:wait_url("/workspace/connections")
    b:click("#sign-out")
    b:wait_url("/workspace/login")

    for _ = 1, 3 do
      sign_in("owner@acme.test", "wrong password again")
      assert.matches("wrong", b:text("#form-error"))
    end
    sign_in("owner@acme.test", PASSWORD) -- right, but this email waits at this address for now
    assert.matches("Too many sign%-in attempts", b:text("#form-error"))
    shot("login-limited")
    sign_in("boss@beta.test", PASSWORD) -- another email is not
    b:wait_url("/workspace/connections")
    b:click("#sign-out")
    b:wait_url("/workspace/login")
  end)

  it("creates users from the operator command, the password read from standard input", function()
    local function run(argv, stdin)
      local status, body = sgw:json("POST", "/test/workspace/user-cli", { body = { argv = argv, stdin = stdin } })
      assert.are.equal(200, status)
      return body
    end
    local ok = run({ "create", "--company", a.company, "--email", "Second@Acme.test" }, "another long password")
    assert.are.equal(0, ok.code)
    assert.matches('^{"userId":"usr_%w+"}$', ok.out)
    assert.are.equal(2, run({ "create", "--company", a.company, "--email", "x@acme.test" }, "short").code)
    assert.are.equal(2, run({ "create", "--company", a.company, "--email", "nope" }, "another long password").code)
    assert.are.equal(2, run({ "create", "--company", a.company, "--email", "y@acme.test" }).code)
    assert.are.equal(1, run({ "create", "--company", "cmp_nope", "--email", "z@acme.test" }, "another long password").code)
    local dup = run({ "create", "--company", a.company, "--email", "second@acme.test" }, "another long password")
    assert.are.equal(2, dup.code)
    assert.matches("already exists", dup.err)

    -- The command itself, the password piped in.
    local code, out = stack.sh("printf '%s\\n' 'third long password' | SGW_ROOT=" .. stack.shell_quote(root) .. " "
      .. stack.shell_quote(sgw.binary) .. " user create --company " .. a.company .. " --email third@acme.test "
      .. table.concat((function()
        local t = {}
        for i, v in ipairs(sgw.args) do t[i] = stack.shell_quote(v) end
        return t
      end)(), " "))
    assert.are.equal(0, code, out)
    assert.matches('"userId":"usr_', out)
    assert.is_nil(out:find("third long password", 1, true), "the password is not echoed")
  end)

  it("holds back one email guessed from many addresses, but not where its owner signed in", function()
    local email, password = "target@acme.test", "the target's long password"
    local status, made = sgw:json("POST", "/test/workspace/user-cli", { body = {
      argv = { "create", "--company", a.company, "--email", email }, stdin = password } })
    assert.are.equal(200, status)
    assert.are.equal(0, made.code, made.err)
    local function sign_in_from(address, pass)
      return workspace_http.client(sgw, address).sign_in(email, pass)
    end
    -- The owner's first sign-in there counts among the twelve (the address
    -- was not known yet); eleven guesses follow, each from an address of its
    -- own (within its free failures).
    assert.are.equal(303, (sign_in_from("127.0.0.50", password)))
    for i = 1, 11 do
      assert.are.equal(401, (sign_in_from("127.0.1." .. i, "not the password " .. i)))
    end
    -- The next new address is held back, the right password or not.
    local held, body, headers = sign_in_from("127.0.2.1", password)
    assert.are.equal(429, held)
    assert.truthy(body:find("Too many sign-in attempts", 1, true))
    assert.is_truthy(tonumber(headers["retry-after"]))
    -- Where the owner signed in before, they still can; other emails are not held back.
    assert.are.equal(303, (sign_in_from("127.0.0.50", password)))
    assert.are.equal(401, (workspace_http.client(sgw, "127.0.2.2").sign_in("someone-else@acme.test", "a wrong password")))
  end)

  it("limits sign-in attempts per address", function()
    local limited
    for i = 1, 45 do
      local status, body = sgw:request("POST", "/workspace/login", {
        body = "email=" .. url_encode("guess" .. i .. "@x.test") .. "&password=whatever-long-enough&csrf=",
        headers = { ["Content-Type"] = "application/x-www-form-urlencoded" } })
      if status == 429 then
        limited = body
        break
      end
      assert.are.equal(403, status) -- no cookie, no token: refused before counting
    end
    assert.is_nil(limited) -- forms without a token never reach the password check

    -- The browser signs in from 127.0.0.1 too: the attempts before the cap
    -- go over plain HTTP from there (forty through the browser take half a
    -- minute), the one past it through the browser.
    local same_address = workspace_http.client(sgw, "127.0.0.1")
    local seen
    for i = 1, 45 do
      local status, body = same_address.sign_in("guess" .. i .. "@x.test", "whatever long enough")
      if status == 429 then
        assert.truthy(body:find("Too many sign-in attempts", 1, true))
        seen = i
        break
      end
      assert.are.equal(401, status)
    end
    assert.is_truthy(seen, "never limited")
    assert.is_true(seen <= 41)
    page("/workspace/login")
    sign_in("guess-browser@x.test", "whatever long enough")
    assert.truthy(b:text("#form-error"):find("Too many sign-in attempts", 1, true))
    assert.is_true(seen <= 41)
  end)
end)

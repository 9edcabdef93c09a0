-- Meta in production (CONTRACT section 11) against the fake Graph API with
-- "Require App Secret" on and deliveries only to subscribed Pages: connecting
-- a live account subscribes its Page, a failed subscription keeps the account
-- and the periodic check mends it, the check restores a dropped Page, `sgw
-- meta subscribe-app` makes the app's subscriptions through Meta's handshake
-- with sgw, every call carries a valid appsecret_proof (none when
-- meta.appsecret_proof is false), and the Graph API version is on /metrics and
-- in the log when it nears its end.
local stack = require "stack"
local fake_graph = require "fake_graph"
local cjson = require "cjson.safe"

local VERSION = "v25.0"
local VERIFY_TOKEN = "verify-" .. math.random(1, 1e9)

describe("Meta webhook subscriptions", function()
  local fake, sgw, company, key
  local q = stack.shell_quote

  setup(function()
    fake = fake_graph.start({ version = VERSION,
      config = { require_appsecret_proof = true, webhooks_require_subscription = true } })
    sgw = stack.start_sgw { name = "meta-subs", set = {
      ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
      ["meta.graph_base_url"] = fake.graph_url,
      ["meta.app_id"] = fake_graph.APP_ID,
      ["meta.app_secret"] = fake_graph.APP_SECRET,
      ["meta.webhook_verify_token"] = VERIFY_TOKEN,
      ["meta.request_timeout_seconds"] = 5,
      ["jobs.poll_interval_ms"] = 100,
      ["clock.allow_control"] = true,
    } }
    fake.control("POST", "webhooks", { callback_url = sgw.base_url .. "/webhooks/meta", app_secret = fake_graph.APP_SECRET })
    company = stack.cli(sgw, { "company", "create", "--name", "Subs Co" }).companyId
    key = stack.cli(sgw, { "client", "create", "--company", company, "--environment", "live",
      "--scopes", "accounts:read" }).apiKey
  end)

  teardown(function()
    stack.cleanup()
    fake_graph.stop_all()
  end)

  local function sql(query) return stack.psql(sgw.database_url, query) end

  -- What Meta expects as appsecret_proof for a token of the fake's app.
  local function proof(token)
    local code, out = stack.sh("printf %s " .. q(token) .. " | openssl dgst -sha256 -hmac "
      .. q(fake_graph.APP_SECRET) .. " -r")
    assert(code == 0, out)
    return out:match("^(%x+)")
  end

  -- An operator command with some settings changed: exit code, output.
  local function command(argv, overrides)
    local args = {}
    for i, a in ipairs(sgw.args) do
      local k = sgw.args[i - 1] == "--set" and a:match("^([%w_.]+)=")
      args[#args + 1] = q(k and overrides[k] ~= nil and (k .. "=" .. overrides[k]) or a)
    end
    for k, v in pairs(overrides) do
      if not table.concat(sgw.args, " "):find(k .. "=", 1, true) then
        args[#args + 1] = "--set " .. q(k .. "=" .. v)
      end
    end
    local words = {}
    for i, a in ipairs(argv) do words[i] = q(a) end
    return stack.sh("cd " .. q(sgw.root) .. " && " .. q(sgw.binary) .. " " .. table.concat(words, " ")
      .. " " .. table.concat(args, " "))
  end

  local function add_account(platform, id, token, extra, overrides)
    local argv = { "account", "add", "--company", company, "--environment", "live", "--platform", platform,
      "--platform-account-id", id, "--name", platform .. " " .. id, "--access-token", token }
    for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
    local code, out = command(argv, overrides or {})
    assert.are.equal(0, code, out)
    return assert(cjson.decode(out:match('{"accountId":"[%w_]+"}') or ""), out).accountId, out
  end

  local function account(id)
    local status, body = sgw:json("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = key } })
    assert.are.equal(200, status)
    for _, a in ipairs(body.data) do
      if a.id == id then return a end
    end
    error("account " .. id .. " not listed")
  end

  local function page_fields(page_id)
    local apps = fake.subscriptions().pages[page_id] or {}
    return apps[fake_graph.APP_ID]
  end

  -- Runs the periodic check now, as its timer would, and waits for it.
  local function run_check()
    local id = assert(sql("WITH j AS (INSERT INTO jobs (kind, payload) VALUES ('meta_subscriptions_check', '{}') "
      .. "RETURNING id) SELECT id, pg_notify('sgw_jobs', '') FROM j"):match("%d+"))
    stack.eventually(function()
      local left = sql("SELECT coalesce(last_error, '-') FROM jobs WHERE id = " .. id)
      assert(left == "" or left == "-", "check failed: " .. left)
      return left == ""
    end, 30, 0.05, "the subscription check to finish")
  end

  local first_seq

  it("makes the app's subscriptions, after Meta's handshake with sgw's callback", function()
    first_seq = #fake.requests()
    local code, out = command({ "meta", "subscribe-app", "--allow-http" }, {})
    assert.are.equal(0, code, out)
    local printed = assert(cjson.decode(out:match("(%b{})%s*$")), out)
    local by_object = {}
    for _, s in ipairs(printed.subscriptions) do by_object[s.object] = s end
    assert.are.equal(sgw.base_url .. "/webhooks/meta", by_object.page.callback_url)
    assert.are.equal("feed", by_object.page.fields[1].name)
    assert.are.equal("comments", by_object.instagram.fields[1].name)
    assert.are.equal(VERSION, by_object.instagram.fields[1].version)
    local hs = fake.subscriptions().handshakes
    assert.are.equal(2, #hs)
    for _, h in ipairs(hs) do
      assert.are.equal(200, h.status)
      assert.is_true(h.ok) -- sgw echoed the challenge
    end
    local posts = fake.requests({ path = "/" .. fake_graph.APP_ID .. "/subscriptions", method = "POST" })
    assert.are.equal("true", posts[1].params.include_values)
    assert.are.equal(VERIFY_TOKEN, posts[1].params.verify_token)
  end)

  it("refuses subscribe-app clearly when something is missing, and says why Meta refused", function()
    local code, out = command({ "meta", "subscribe-app" }, {})
    assert.are.equal(1, code)
    assert.matches("public_base_url", out)
    assert.matches("https://", out)
    code, out = command({ "meta", "subscribe-app", "--allow-http" }, { ["meta.webhook_verify_token"] = "" })
    assert.are.equal(1, code)
    assert.matches("set meta.webhook_verify_token", out)
    code, out = command({ "meta", "subscribe-app", "--allow-http" }, { ["meta.app_secret"] = "" })
    assert.are.equal(1, code)
    assert.matches("set meta.app_id and meta.app_secret", out)
    -- A verify token the running sgw does not know: its callback answers 403.
    code, out = command({ "meta", "subscribe-app", "--allow-http" }, { ["meta.webhook_verify_token"] = "wrong" })
    assert.are.equal(1, code)
    assert.matches("Meta refused the page subscription", out)
    assert.matches("2200", out)
  end)

  local page, fb, ig

  it("subscribes the Page when a Facebook account and its Instagram account are added", function()
    page = fake.add_page({ name = "Subs page", instagram_business_account = true })
    fb = add_account("facebook", page.id, page.access_token)
    ig = add_account("instagram", page.instagram_business_account.id, page.access_token, { "--page-id", page.id })
    assert.are.same({ "feed" }, page_fields(page.id))
    assert.is_true(account(fb).webhooksSubscribed)
    assert.is_true(account(ig).webhooksSubscribed)
    assert.are.equal(page.id, sql("SELECT page_id FROM social_accounts WHERE id = '" .. ig .. "'"))
    assert.are.equal("feed", sql("SELECT webhooks_fields FROM social_accounts WHERE id = '" .. fb .. "'"))
    local subs = fake.requests({ path = "/" .. page.id .. "/subscribed_apps", method = "POST" })
    assert.are.equal(2, #subs)
    assert.are.equal("feed", subs[1].params.subscribed_fields)
  end)

  it("keeps an account whose subscription failed, and the check subscribes it later", function()
    local other = fake.add_page({ name = "Flaky page" })
    fake.fail({ match = { method = "POST", path = "/" .. other.id .. "/subscribed_apps" },
      error = { code = 2, message = "An unexpected error has occurred. Please retry your request later.",
        is_transient = true } })
    local id, out = add_account("facebook", other.id, other.access_token)
    assert.matches("not subscribed", out)
    local a = account(id)
    assert.are.equal("active", a.status)
    assert.is_false(a.webhooksSubscribed)
    assert.matches("unexpected error", sql("SELECT webhooks_error FROM social_accounts WHERE id = '" .. id .. "'"))
    assert.is_nil(page_fields(other.id))
    assert.matches('"meta_subscription_failed"', out)

    run_check()
    assert.are.same({ "feed" }, page_fields(other.id))
    assert.is_true(account(id).webhooksSubscribed)
    assert.are.equal("", sql("SELECT coalesce(webhooks_error, '') FROM social_accounts WHERE id = '" .. id .. "'"))
  end)

  it("re-subscribes a Page that lost its subscription, and deliveries resume", function()
    local _, media = fake.graph("POST", "/" .. page.id .. "/feed", { message = "for comments",
      appsecret_proof = proof(page.access_token) }, page.access_token)
    local comment = fake.control("POST", "comments", { post_id = media.id, message = "first" })
    assert.are.equal(200, comment.delivery.status)

    fake.drop_subscription(page.id)
    comment = fake.control("POST", "comments", { post_id = media.id, message = "while dropped" })
    assert.are.equal(cjson.null, comment.delivery) -- Meta sends nothing to an unsubscribed Page

    run_check()
    assert.are.same({ "feed" }, page_fields(page.id))
    assert.matches('"meta_subscription_lost"', sgw:log())
    comment = fake.control("POST", "comments", { post_id = media.id, message = "after the check" })
    assert.are.equal(200, comment.delivery.status)
  end)

  it("says in the log when the app's webhooks are at another Graph API version, until subscribe-app runs again", function()
    local function lines(event)
      local out = {}
      for line in sgw:log():gmatch("[^\n]+") do
        if line:find('"event":"' .. event .. '"', 1, true) then out[#out + 1] = cjson.decode(line) end
      end
      return out
    end
    local function last_check(n)
      return stack.eventually(function()
        local list = lines("meta_subscriptions_checked")
        return #list >= n and list[#list]
      end, 10, 0.05, "the check's summary in the log")
    end
    -- Checks before the first test's subscribe-app found the app's subscriptions missing.
    local checks, missing = #lines("meta_subscriptions_checked"), #lines("meta_app_subscription_missing")
    fake.control("POST", "subscriptions/version", { object = "instagram", field = "comments", version = "v21.0" })
    run_check()
    assert.are.equal(1, last_check(checks + 1).app_problems)
    local warned = lines("meta_webhook_version_behind")
    assert.are.equal(1, #warned)
    assert.are.same({ "instagram", "comments", "v21.0", VERSION, "run sgw meta subscribe-app" },
      { warned[1].object, warned[1].field, warned[1].version, warned[1].configured, warned[1].fix })

    local code, out = command({ "meta", "subscribe-app", "--allow-http" }, {})
    assert.are.equal(0, code, out)
    run_check()
    assert.are.equal(0, last_check(checks + 2).app_problems)
    assert.are.equal(1, #lines("meta_webhook_version_behind"))
    assert.are.equal(missing, #lines("meta_app_subscription_missing"))
  end)

  it("sends a valid appsecret_proof with every Page and user token call", function()
    local with_token = 0
    for i, r in ipairs(fake.requests()) do
      if i > first_seq and r.auth then
        with_token = with_token + 1
        assert.are.equal("valid", r.params.appsecret_proof, cjson.encode(r))
      end
    end
    assert.is_true(with_token >= 8)
  end)

  it("sends no appsecret_proof when meta.appsecret_proof is false (Require App Secret then refuses)", function()
    local other = fake.add_page({ name = "No proof page" })
    local id, out = add_account("facebook", other.id, other.access_token, nil, { ["meta.appsecret_proof"] = "false" })
    assert.matches("appsecret_proof", out)
    assert.is_false(account(id).webhooksSubscribed)
    local subs = fake.requests({ path = "/" .. other.id .. "/subscribed_apps" })
    assert.are.equal("missing", subs[#subs].params.appsecret_proof)
    assert.are.equal(400, subs[#subs].status)
  end)

  it("shows the Graph API version on /metrics and warns in the log as its end nears", function()
    local _, metrics = sgw:admin("GET", "/metrics")
    local line = metrics:match("sgw_meta_graph_version_info{[^}]*} 1")
    assert.is_not_nil(line, metrics)
    assert.matches('version="v25.0"', line)
    assert.matches('ends="2028%-07%-29"', line)
    assert.not_matches("meta_graph_version_ending", sgw:log())

    -- 30 days before v25.0 ends (2028-07-29T00:00:00Z + 1 day); the warning
    -- comes at the next start or reload.
    local advance = 1848441600 + 86400 - 30 * 86400 - os.time()
    assert.are.equal(200, (sgw:admin("POST", "/clock/advance?seconds=" .. advance)))
    sgw:reload()
    stack.eventually(function() return sgw:log():find('"meta_graph_version_ending"', 1, true) end,
      15, 0.1, "the version warning in the log")
  end)
end)

-- Token health and Meta's required callbacks against the fake Graph API
-- (CONTRACT 11): a 190 or a missing permission marks the account
-- reconnect_required and fails at once, the client's webhook hears it once,
-- nothing more goes to Meta for that account until it is connected again;
-- the debug_token sweep; the deauthorize and data-deletion callbacks with
-- Meta's signed_request, refusals and replays.
local stack = require "stack"
local cjson = require "cjson.safe"
local comment_stack = require "comment_stack"
local receiver = require "receiver"

local APP_ID = "100000000000123"
local FAKE_USER = "100000000000777"   -- the person every fake Page token belongs to (fake_graph_oauth)

describe("token health", function()
  local env, fake

  setup(function()
    env = comment_stack.start({ name = "token-health", set = {
      ["meta.app_id"] = APP_ID,
      ["webhooks.allow_private_targets"] = true,
      ["webhooks.retry.base_seconds"] = 0.2,
      ["webhooks.retry.max_seconds"] = 1,
    } })
    fake = env.fake
    -- The fake's app is sgw's: the app token {app-id}|{app-secret} and signed requests.
    fake.config({ oauth_app_id = APP_ID, oauth_app_secret = comment_stack.APP_SECRET })
  end)

  teardown(function()
    receiver.stop_all()
    comment_stack.stop()
  end)

  -- A live tenant whose company has a second client with a webhook URL and
  -- its own receiver (the social.account.* events go to every client with one).
  local function tenant(name, opts)
    local t = comment_stack.live_tenant(env, name, opts)
    t.receiver = receiver.start()
    local hooked = stack.cli(env.sgw, { "client", "create", "--company", t.company, "--environment", "live",
      "--scopes", "accounts:read", "--webhook-url", t.receiver.hook })
    t.receiver.config({ secret = hooked.webhookSecret })
    return t
  end

  local function account(t, id)
    local status, body = t.api("GET", "/api/v1/social-accounts")
    assert.are.equal(200, status, cjson.encode(body))
    for _, a in ipairs(body.data) do
      if a.id == id then return a end
    end
  end

  -- The events of a type about an account t's receiver got (waiting for n).
  local function events_about(t, type, account_id, n)
    local found
    stack.eventually(function()
      found = {}
      for _, ev in ipairs(t.receiver.events(type)) do
        if ev.data.account.id == account_id then found[#found + 1] = ev end
      end
      return #found >= (n or 1)
    end, 30, 0.05, type .. " about " .. account_id)
    return found
  end

  local function count_events(type, account_id)
    return env.count("SELECT count(*) FROM events WHERE type = '" .. type .. "' AND data->'account'->>'id' = '"
      .. account_id .. "'")
  end

  local function graph_calls()
    return #fake.requests({})
  end

  local function post_text(t, acc, message)
    local status, body = t.api("POST", "/api/v1/posts", { targets = { { socialAccountId = acc.id, platform = acc.platform } },
      content = { type = "text", message = message }, publishing = { mode = "immediate" } })
    return status, body
  end

  describe("an expired token", function()
    local t, target, comment

    setup(function()
      t = tenant("Expiring Co")
      local post
      post, target = t.publish_text("Before the token died")
      local made = t.fake_comment({ post_id = target.platformPostId, message = "Nice", from = { id = "5551", name = "Fan" } })
      comment = t.comment(post, made.comment.id)
    end)

    it("records the connecting Facebook user from debug_token when none is given", function()
      assert.are.equal(FAKE_USER, env.sql("SELECT connected_by_fb_user FROM social_accounts WHERE id = '" .. t.fb.id .. "'"))
    end)

    it("fails the target token_expired at once, marks the account and tells the clients once", function()
      fake.expire_token(t.page.access_token)
      local status, accepted = post_text(t, t.fb, "After the token died")
      assert.are.equal(202, status, cjson.encode(accepted))
      local op = t.wait(accepted.operationId)
      assert.are.equal("failed", op.status)
      local _, post = t.api("GET", "/api/v1/posts/" .. accepted.resource.postId)
      local tg = post.targets[1]
      assert.are.equal("failed", tg.status)
      assert.are.equal(1, tg.attempts)
      assert.are.equal("token_expired", tg.error.code)
      assert.are.equal("190/463", tg.error.platformCode)
      assert.is_false(tg.error.retryable)

      local acc = account(t, t.fb.id)
      assert.are.equal("reconnect_required", acc.status)
      assert.are.equal("token_expired", acc.statusReason.code)
      assert.are.equal("190/463", acc.statusReason.platformCode)
      assert.matches("Session has expired", acc.statusReason.message)
      assert.matches("^%d%d%d%d%-%d%d%-%d%dT", acc.statusReason.since)
      -- The Instagram account has the same token but has not failed yet: still active.
      assert.are.equal("active", account(t, t.ig.id).status)

      local evs = events_about(t, "social.account.reconnect_required", t.fb.id)
      assert.are.equal(1, #evs)
      assert.are.equal("reconnect_required", evs[1].data.account.status)
      assert.are.equal("token_expired", evs[1].data.account.statusReason.code)
      assert.are.equal("live", evs[1].environment)
    end)

    it("then fails retries and moderation at once without calling Meta, and refuses new posts", function()
      local before = graph_calls()
      -- The failed post again: its target fails with the stored reason.
      local _, list = t.api("GET", "/api/v1/posts?limit=1")
      local status, retried = t.api("POST", "/api/v1/posts/" .. list.data[1].id .. "/retry")
      assert.are.equal(202, status, cjson.encode(retried))
      local op = t.wait(retried.operationId)
      assert.are.equal("failed", op.status)
      assert.are.equal("token_expired", op.result.targets[1].error.code)
      assert.are.equal("190/463", op.result.targets[1].error.platformCode)
      local _, post = t.api("GET", "/api/v1/posts/" .. list.data[1].id)
      assert.are.equal(1, post.targets[1].attempts)

      local hs, hidden = t.api("POST", "/api/v1/comments/" .. comment.id .. "/hide")
      assert.are.equal(202, hs, cjson.encode(hidden))
      local hop = t.wait(hidden.operationId)
      assert.are.equal("failed", hop.status)
      assert.are.equal("token_expired", hop.error.code)
      assert.are.equal(before, graph_calls())

      local ps, refused = post_text(t, t.fb, "Refused")
      assert.are.equal(422, ps, cjson.encode(refused))
      assert.are.equal("unknown_account", refused.errors[1].code)
      -- Still one event: the account changed state once.
      assert.are.equal(1, count_events("social.account.reconnect_required", t.fb.id))
    end)

    it("is active again after sgw account add, which emits social.account.reconnected", function()
      fake.expire_token(t.page.access_token, false)
      stack.cli(env.sgw, { "account", "add", "--company", t.company, "--environment", "live", "--platform", "facebook",
        "--platform-account-id", t.page.id, "--name", t.page.name, "--access-token", t.page.access_token })
      local acc = account(t, t.fb.id)
      assert.are.equal("active", acc.status)
      assert.are.equal(cjson.null, acc.statusReason)
      local evs = events_about(t, "social.account.reconnected", t.fb.id)
      assert.are.equal("active", evs[1].data.account.status)
      t.publish_text("Back in business")
      assert.are.equal(1, count_events("social.account.reconnected", t.fb.id))
    end)
  end)

  describe("sgw account add", function()
    local t
    setup(function() t = tenant("Checked Co") end)

    local function add(token, page)
      page = page or t.page
      return env.sgw:command({ "account", "add", "--company", t.company, "--environment", "live", "--platform",
        "facebook", "--platform-account-id", page.id, "--name", page.name, "--access-token", token })
    end
    local function stored()
      return env.sql("SELECT status || ':' || md5(access_token_enc) FROM social_accounts WHERE id = '"
        .. t.fb.id .. "'")
    end

    it("refuses a token Meta calls invalid, a user token and another Page's token, and keeps the account as it was", function()
      local before = stored()
      local code, out = add("EAAnot-a-token-meta-knows")
      assert.are.equal(1, code, out)
      assert.matches("Meta says this access token is not valid", out)
      local user = fake.control("POST", "oauth/user_token", { long_lived = true }).access_token
      code, out = add(user)
      assert.are.equal(1, code, out)
      assert.matches("this is a user access token", out)
      assert.is_nil(out:find(user, 1, true), "the token is not printed")
      local other = fake.add_page({ name = "Another page" })
      code, out = add(other.access_token)
      assert.are.equal(1, code, out)
      assert.matches("this is the Page token of Page " .. other.id .. ", not of Page " .. t.page.id, out, 1, true)
      assert.are.equal(before, stored())
      assert.are.equal("active", account(t, t.fb.id).status)
    end)

    it("connects a Page token that expires and says when", function()
      local page = fake.add_page({ name = "Short-lived page" })
      local expires = os.time() + 2 * 86400
      fake.update_token(page.access_token, { expires_at = expires })
      local code, out = add(page.access_token, page)
      assert.are.equal(0, code, out)
      assert.matches('{"accountId":"', out, 1, true)
      assert.matches("the token expires at " .. os.date("!%Y-%m-%dT%H:%M:%SZ", expires), out, 1, true)
    end)
  end)

  describe("a missing permission", function()
    it("on publishing (code 200) fails the target permission_missing and marks the account", function()
      local t = tenant("Unpermitted Co")
      fake.revoke_permission(t.page.access_token, "pages_manage_posts", 200)
      local _, accepted = post_text(t, t.fb, "Not allowed")
      assert.are.equal("failed", t.wait(accepted.operationId).status)
      local _, post = t.api("GET", "/api/v1/posts/" .. accepted.resource.postId)
      assert.are.equal("permission_missing", post.targets[1].error.code)
      assert.are.equal("200", post.targets[1].error.platformCode)
      assert.are.equal(1, post.targets[1].attempts)
      local acc = account(t, t.fb.id)
      assert.are.equal("reconnect_required", acc.status)
      assert.are.equal("permission_missing", acc.statusReason.code)
      assert.matches("pages_manage_posts", acc.statusReason.message)
      events_about(t, "social.account.reconnect_required", t.fb.id)
    end)

    it("on moderation (code 10) fails the operation permission_missing and marks the account", function()
      local t = tenant("Unmoderated Co")
      local post, target = t.publish_text("Comment here")
      local made = t.fake_comment({ post_id = target.platformPostId, message = "Hide me", from = { id = "5552", name = "Troll" } })
      local c = t.comment(post, made.comment.id)
      fake.revoke_permission(t.page.access_token, "pages_manage_engagement", 10)
      local _, hidden = t.api("POST", "/api/v1/comments/" .. c.id .. "/hide")
      local op = t.wait(hidden.operationId)
      assert.are.equal("failed", op.status)
      assert.are.equal("permission_missing", op.error.code)
      assert.are.equal("10", op.error.platformCode)
      assert.are.equal("reconnect_required", account(t, t.fb.id).status)
      assert.are.equal(1, #events_about(t, "social.account.reconnect_required", t.fb.id))
    end)
  end)

  describe("the debug_token sweep", function()
    it("fills the expiry dates, warns of data access ending once, and finds an invalid token", function()
      local t = tenant("Swept Co")
      local now = os.time()
      local data_ends, token_ends = now + 3 * 86400, now + 30 * 86400
      fake.update_token(t.page.access_token, { data_access_expires_at = data_ends, expires_at = token_ends })
      env.run_job("check_tokens")
      local acc = account(t, t.fb.id)
      assert.are.equal(os.date("!%Y-%m-%dT%H:%M:%S", data_ends), acc.dataAccessExpiresAt:sub(1, 19))
      assert.are.equal(os.date("!%Y-%m-%dT%H:%M:%S", token_ends), acc.tokenExpiresAt:sub(1, 19))
      assert.are.equal("active", acc.status)
      local evs = events_about(t, "social.account.data_access_expiring", t.ig.id)
      assert.are.equal(acc.dataAccessExpiresAt:sub(1, 19), evs[1].data.account.dataAccessExpiresAt:sub(1, 19))
      env.run_job("check_tokens")
      assert.are.equal(1, count_events("social.account.data_access_expiring", t.fb.id))
      assert.are.equal(1, count_events("social.account.data_access_expiring", t.ig.id))

      -- Never expiring (0): null.
      fake.update_token(t.page.access_token, { expires_at = 0 })
      env.run_job("check_tokens")
      assert.are.equal(cjson.null, account(t, t.fb.id).tokenExpiresAt)

      fake.expire_token(t.page.access_token)
      env.run_job("check_tokens")
      for _, id in ipairs({ t.fb.id, t.ig.id }) do
        acc = account(t, id)
        assert.are.equal("reconnect_required", acc.status)
        assert.are.equal("token_expired", acc.statusReason.code)
        assert.are.equal("190/463", acc.statusReason.platformCode)
        events_about(t, "social.account.reconnect_required", id)
      end
      env.run_job("check_tokens")
      assert.are.equal(1, count_events("social.account.reconnect_required", t.ig.id))
    end)
  end)

  describe("Meta's callbacks", function()
    local function callback(path, signed_request, raw)
      local body = raw or ("signed_request=" .. (signed_request or ""))
      return env.sgw:json("POST", path, { body = body, headers = { ["Content-Type"] = "application/x-www-form-urlencoded" } })
    end

    local function state(t)
      return env.sql("SELECT string_agg(status || ':' || (access_token_enc IS NOT NULL)::text || ':' || "
        .. "coalesce(connected_by_fb_user, '-'), ',' ORDER BY platform) FROM social_accounts WHERE company_id = '"
        .. t.company .. "'")
    end

    it("refuses forged, wrong-algorithm and malformed requests and changes nothing", function()
      local user = "7001" .. math.random(1e6, 9e6)
      local t = tenant("Guarded Co", { facebook_user_id = user })
      local before = state(t)
      for _, path in ipairs({ "/webhooks/meta/deauthorize", "/webhooks/meta/data-deletion" }) do
        local cases = {
          { fake.signed_request({ user_id = user, secret = "not-the-app-secret" }) },
          { fake.signed_request({ user_id = user, algorithm = "HMAC-SHA1" }) },
          { fake.signed_request({ payload = "not json" }) },
          { fake.signed_request({ payload = cjson.encode({ algorithm = "HMAC-SHA256", issued_at = os.time() }) }) },
          { "no-dot-here" },
          { nil, "other=1" },
        }
        for i, case in ipairs(cases) do
          local status, problem = callback(path, case[1], case[2])
          assert.are.equal(400, status, path .. " case " .. i .. ": " .. cjson.encode(problem))
          assert.are.equal("invalid_signed_request", problem.code)
        end
      end
      assert.are.equal(before, state(t))
      assert.are.equal(0, env.count("SELECT count(*) FROM meta_deletion_requests"))
    end)

    it("deauthorize disconnects the person's accounts, erases their tokens, and a replay undoes no reconnection",
      function()
        local user, other_user = "7002" .. math.random(1e6, 9e6), "7003" .. math.random(1e6, 9e6)
        local t = tenant("Deauthorized Co", { facebook_user_id = user })
        local other = tenant("Bystander Co", { facebook_user_id = other_user })
        local status = callback("/webhooks/meta/deauthorize", fake.signed_request({ user_id = "7999000" }))
        assert.are.equal(200, status)
        assert.are.equal("active:true:" .. user .. ",active:true:" .. user, state(t))

        local signed = fake.signed_request({ user_id = user })
        status = callback("/webhooks/meta/deauthorize", signed)
        assert.are.equal(200, status)
        assert.are.equal("disconnected:false:" .. user .. ",disconnected:false:" .. user, state(t))
        assert.is_nil(account(t, t.fb.id))
        for _, id in ipairs({ t.fb.id, t.ig.id }) do
          local evs = events_about(t, "social.account.disconnected", id)
          assert.are.equal("disconnected", evs[1].data.account.status)
        end
        assert.are.equal("active:true:" .. other_user .. ",active:true:" .. other_user, state(other))

        -- Connected again; the same request again (Meta's retry, or a replay) changes nothing.
        stack.cli(env.sgw, { "account", "add", "--company", t.company, "--environment", "live", "--platform", "facebook",
          "--platform-account-id", t.page.id, "--name", t.page.name, "--access-token", t.page.access_token,
          "--facebook-user-id", user })
        assert.are.equal(200, (callback("/webhooks/meta/deauthorize", signed)))
        -- Nor does it spelt otherwise: its signature padded.
        assert.are.equal(200, (callback("/webhooks/meta/deauthorize", (signed:gsub("%.", "==.", 1)))))
        assert.are.equal("active", account(t, t.fb.id).status)
        assert.are.equal(1, count_events("social.account.disconnected", t.fb.id))
      end)

    it("data deletion erases the person's tokens and id, answers a status page, and the same request the same code",
      function()
        local user = "7004" .. math.random(1e6, 9e6)
        local t = tenant("Forgotten Co", { facebook_user_id = user })
        local signed = fake.signed_request({ user_id = user })
        local status, body = callback("/webhooks/meta/data-deletion", signed)
        assert.are.equal(200, status, cjson.encode(body))
        assert.matches("^[%w]+$", body.confirmation_code)
        assert.are.equal(env.sgw.base_url .. "/meta/deletion/" .. body.confirmation_code, body.url)
        assert.are.equal("disconnected:false:-,disconnected:false:-", state(t))
        events_about(t, "social.account.disconnected", t.fb.id)

        local page_status, page = stack.request("GET", body.url)
        assert.are.equal(200, page_status)
        assert.truthy(page:find(body.confirmation_code, 1, true))
        assert.truthy(page:find('data-status="completed"', 1, true))
        assert.are.equal(404, (stack.request("GET", env.sgw.base_url .. "/meta/deletion/" .. ("x"):rep(32))))

        local again_status, again = callback("/webhooks/meta/data-deletion", signed)
        assert.are.equal(200, again_status)
        assert.are.equal(body.confirmation_code, again.confirmation_code)
        assert.are.equal(1, count_events("social.account.disconnected", t.fb.id))
        -- Nothing about the person stays but a hash in the request's record.
        assert.are.equal(0, env.count("SELECT count(*) FROM meta_deletion_requests WHERE fb_user_id = '" .. user .. "'"))
        assert.are.equal(0, env.count("SELECT count(*) FROM social_accounts WHERE connected_by_fb_user = '" .. user .. "'"))
      end)
  end)
end)

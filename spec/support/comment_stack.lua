-- spec/support/comment_stack.lua — what the moderation and sync specs share:
-- sgw, the fake Graph API sending its webhooks to that sgw, and tenants
-- (test: sandbox accounts; live: a fake Page and its Instagram account) with
-- helpers to publish, comment and wait.
local stack = require "stack"
local fake_graph = require "fake_graph"
local cjson = require "cjson.safe"
local receiver = require "receiver"

local M = {}

M.APP_SECRET = "spec-app-secret-" .. math.random(1, 1e9)

--- Starts the fake Graph API and sgw (opts.name, opts.set: more settings,
--- opts.database_url: a database of one's own instead of a fresh one).
--- Returns { fake, sgw, sql(q), count(q), run_job(kind) }.
function M.start(opts)
  -- "Require App Secret": every call sgw makes must carry appsecret_proof.
  local fake = fake_graph.start({ config = { require_appsecret_proof = true, oauth_app_secret = M.APP_SECRET } })
  local set = {
    ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
    ["meta.graph_base_url"] = fake.graph_url,
    ["meta.app_id"] = fake_graph.APP_ID,
    ["meta.app_secret"] = M.APP_SECRET,
    ["meta.request_timeout_seconds"] = 2,
    ["meta.instagram_container_first_poll_seconds"] = 0.2,
    ["meta.instagram_container_poll_seconds"] = 0.2,
    ["publishing.retry.base_seconds"] = 0.2,
    ["publishing.retry.max_seconds"] = 1,
    ["api.rate_limit.per_minute"] = 1000000,
    ["jobs.poll_interval_ms"] = 100,
    ["jobs.lease_seconds"] = 3,
    ["sync.interval_seconds"] = 3600,
    -- Clients' webhook receivers listen on 127.0.0.1.
    ["webhooks.allow_private_targets"] = true,
  }
  fake:https_settings(set)
  for k, v in pairs(opts.set or {}) do set[k] = v end
  local sgw = stack.start_sgw { name = opts.name, set = set, database_url = opts.database_url }
  fake.control("POST", "webhooks", { callback_url = sgw.base_url .. "/webhooks/meta", app_secret = M.APP_SECRET })
  local env = { fake = fake, sgw = sgw }
  --- Kills sgw (SIGKILL, as a crash) and starts another on the same database;
  --- its jobs in flight run again once their leases pass.
  function env.restart()
    env.sgw:kill()
    env.sgw = stack.start_sgw { name = opts.name, set = set, database_url = env.sgw.database_url }
    fake.control("POST", "webhooks", { callback_url = env.sgw.base_url .. "/webhooks/meta", app_secret = M.APP_SECRET })
  end
  --- Another sgw on the same database (more settings in extra_set).
  function env.another(extra_set)
    local s = {}
    for k, v in pairs(set) do s[k] = v end
    for k, v in pairs(extra_set or {}) do s[k] = v end
    return stack.start_sgw { name = opts.name, set = s, database_url = env.sgw.database_url }
  end
  function env.sql(q) return stack.psql(env.sgw.database_url, q) end
  function env.count(q) return tonumber(env.sql(q)) end
  --- Enqueues a job as a timer would; returns its id.
  function env.start_job(kind)
    local id = env.sql("WITH j AS (INSERT INTO jobs (kind, payload) VALUES ('" .. kind .. "', '{}') RETURNING id) "
      .. "SELECT id, pg_notify('sgw_jobs', '') FROM j")
    return assert(id:match("%d+"), id)
  end
  --- Waits until a job is done; raises when it failed.
  function env.wait_job(id)
    stack.eventually(function()
      local left = env.sql("SELECT coalesce(last_error, '-') FROM jobs WHERE id = " .. id)
      assert(left == "" or left == "-", "job " .. id .. " failed: " .. left)
      return left == ""
    end, 60, 0.05, "job " .. id .. " to finish")
  end
  function env.run_job(kind)
    env.wait_job(env.start_job(kind))
  end
  --- The fake platform's own record of a comment (hidden, deleted, ...).
  function env.fake_state(id)
    for _, c in ipairs(fake.control("GET", "comments").data) do
      if c.id == id then return c end
    end
  end
  --- Every Meta delivery stored so far has been processed.
  function env.deliveries_processed()
    stack.eventually(function()
      return env.count("SELECT count(*) FROM meta_webhook_deliveries WHERE processed_at IS NULL") == 0
    end, 30, 0.05, "every Meta delivery to be processed")
  end
  return env
end

function M.stop()
  receiver.stop_all()
  stack.cleanup()
  fake_graph.stop_all()
end

--- A table's keys, sorted (to compare a body's shape).
function M.keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

--- A problem's errors[] as { [field] = code }.
function M.field_codes(body)
  local out = {}
  for _, e in ipairs(body.errors or {}) do out[e.field] = e.code end
  return out
end

local ALL_SCOPES = "accounts:read posts:read posts:write operations:read comments:read comments:write sandbox:write"

-- The API as one client: t.api(method, path, body, headers).
local function client(env, key)
  local t = { key = key, n = 0 }
  function t.api(method, path, body, headers)
    local h = { ["X-Api-Key"] = key }
    if method == "POST" and path == "/api/v1/posts" then
      t.n = t.n + 1
      h["Idempotency-Key"] = "comment-stack-" .. t.n .. "-" .. math.random(1, 1e9)
    end
    for k, v in pairs(headers or {}) do h[k] = v end
    return env.sgw:json(method, path, { body = body, headers = h })
  end
  --- Waits for an operation to end; returns it.
  function t.wait(op_id, timeout)
    return stack.wait_operation(function(path) return t.api("GET", path) end, op_id, timeout)
  end
  --- Publishes content to one account; returns the post id and its target.
  function t.publish(account, content)
    local status, body = t.api("POST", "/api/v1/posts", { targets = { { socialAccountId = account.id, platform = account.platform } },
      content = content, publishing = { mode = "immediate" } })
    assert(status == 202, cjson.encode(body))
    local op = t.wait(body.operationId)
    assert(op.status == "succeeded", cjson.encode(op))
    local _, post = t.api("GET", "/api/v1/posts/" .. body.resource.postId)
    return post.id, post.targets[1]
  end
  --- Every comment of a post, all pages.
  function t.comments(post_id)
    local out, cursor = {}, nil
    repeat
      local status, page = t.api("GET", "/api/v1/posts/" .. post_id .. "/comments?limit=100"
        .. (cursor and ("&cursor=" .. cursor) or ""))
      assert(status == 200, cjson.encode(page))
      for _, c in ipairs(page.data) do out[#out + 1] = c end
      cursor = page.nextCursor ~= cjson.null and page.nextCursor or nil
    until not cursor
    return out
  end
  --- The comment with this platform id on the post, waiting for it to arrive.
  function t.comment(post_id, platform_comment_id, timeout)
    local found
    stack.eventually(function()
      for _, c in ipairs(t.comments(post_id)) do
        if c.platformCommentId == platform_comment_id then found = c end
      end
      return found
    end, timeout or 30, 0.05, "comment " .. platform_comment_id .. " in sgw")
    return found
  end
  --- A webhook receiver for this client's events (spec/support/receiver.lua).
  function t.listen()
    local r = receiver.start()
    local set = stack.cli(env.sgw, { "client", "set-webhook", "--client", t.client_id, "--url", r.hook })
    r.config({ secret = set.webhookSecret })
    --- The events of a type received so far, decoded, oldest first.
    function r.events(type)
      local out = {}
      for _, d in ipairs(r.deliveries()) do
        local e = cjson.decode(d.body)
        if d.verified and e and e.type == type then out[#out + 1] = e end
      end
      return out
    end
    return r
  end
  function t.get(comment_id)
    local status, c = t.api("GET", "/api/v1/comments/" .. comment_id)
    assert(status == 200, cjson.encode(c))
    return c
  end
  return t
end

--- A test (sandbox) client of a new company, with a Facebook and an
--- Instagram sandbox account.
function M.test_tenant(env, name)
  local company = stack.cli(env.sgw, { "company", "create", "--name", name }).companyId
  local created = stack.cli(env.sgw, { "client", "create", "--company", company, "--environment", "test",
    "--scopes", ALL_SCOPES })
  local t = client(env, created.apiKey)
  t.company, t.client_id = company, created.clientId
  local _
  _, t.fb = t.api("POST", "/api/v1/sandbox/accounts", { platform = "facebook", name = name .. " page" })
  _, t.ig = t.api("POST", "/api/v1/sandbox/accounts", { platform = "instagram", name = name .. " IG" })
  --- A comment through the sandbox tool (as if someone wrote it); returns it.
  function t.sandbox_comment(target, text, extra)
    local body = { postTargetId = target.id, text = text }
    for k, v in pairs(extra or {}) do body[k] = v end
    local status, c = t.api("POST", "/api/v1/sandbox/comments", body)
    assert(status == 201, cjson.encode(c))
    return c
  end
  return t
end

--- A live client of a new company with a fake Page and its Instagram
--- account connected (t.page, t.fb, t.ig). opts.facebook_user_id: the
--- connecting Facebook user (sgw account add --facebook-user-id).
function M.live_tenant(env, name, opts)
  local company = stack.cli(env.sgw, { "company", "create", "--name", name }).companyId
  local created = stack.cli(env.sgw, { "client", "create", "--company", company, "--environment", "live",
    "--scopes", ALL_SCOPES })
  local t = client(env, created.apiKey)
  t.company, t.client_id = company, created.clientId
  t.page = env.fake.add_page({ name = name .. " page", instagram_business_account = { username = "ig_" .. math.random(1, 1e6) } })
  local function add(platform, id, display, username, page_id)
    local argv = { "account", "add", "--company", company, "--environment", "live", "--platform", platform,
      "--platform-account-id", id, "--name", display, "--access-token", t.page.access_token }
    if opts and opts.facebook_user_id then
      argv[#argv + 1] = "--facebook-user-id"
      argv[#argv + 1] = opts.facebook_user_id
    end
    if username then
      argv[#argv + 1] = "--username"
      argv[#argv + 1] = username
    end
    if page_id then
      argv[#argv + 1] = "--page-id"
      argv[#argv + 1] = page_id
    end
    return { id = stack.cli(env.sgw, argv).accountId, platform = platform, platformAccountId = id }
  end
  t.fb = add("facebook", t.page.id, t.page.name)
  local ig = t.page.instagram_business_account
  t.ig = add("instagram", ig.id, name .. " IG", ig.username, t.page.id)
  function t.publish_text(message)
    return t.publish(t.fb, { type = "text", message = message })
  end
  function t.publish_image(caption)
    return t.publish(t.ig, { type = "image", message = caption,
      imageUrl = env.fake:instagram_image() })
  end
  --- A comment someone writes on the platform (POST /_fake/comments); the
  --- fake's answer {comment, delivery}.
  function t.fake_comment(body)
    return env.fake.control("POST", "comments", body)
  end
  return t
end

return M

-- A PostgreSQL outage seen from the API: while a private PostgreSQL is
-- stopped, every kind of endpoint (reads, a credential never seen before,
-- posts with Idempotency-Key, comment moderation, /oauth/token, a workspace
-- page) answers 503 service_unavailable with Retry-After, never 500, 401 or
-- 202; nothing half-made is left behind; once PostgreSQL is back the same
-- sgw serves everything again. Redis stays up (its outages fail open).
local stack = require "stack"
local own_services = require "own_services"
local cjson = require "cjson.safe"

local SCOPES = "accounts:read posts:read posts:write operations:read comments:read comments:write sandbox:write"

describe("a PostgreSQL outage", function()
  local pg, url, sgw, key, fresh_key, client, post_id, target, comment

  local function api(method, path, body, k, extra)
    local h = { ["X-Api-Key"] = k or key }
    for name, v in pairs(extra or {}) do h[name] = v end
    return sgw:json(method, path, { body = body, headers = h })
  end

  local function create_post(message)
    return api("POST", "/api/v1/posts", { targets = { { socialAccountId = target.accountId, platform = "facebook" } },
      content = { type = "text", message = message }, publishing = { mode = "immediate" } }, nil,
      { ["Idempotency-Key"] = "outage-" .. message })
  end

  local function token_request()
    return sgw:request("POST", "/oauth/token", { body = "grant_type=client_credentials&client_id="
      .. client.clientId .. "&client_secret=" .. client.clientSecret,
      headers = { ["Content-Type"] = "application/x-www-form-urlencoded" } })
  end

  setup(function()
    pg = own_services.postgres("outage", "sgw_outage")
    url = pg.url
    sgw = stack.start_sgw { name = "outage", database_url = url,
      set = { ["crypto.encryption_key"] = stack.ENCRYPTION_KEY, ["api.rate_limit.per_minute"] = 1000000 } }
    local company = stack.cli(sgw, { "company", "create", "--name", "Outage Co" }).companyId
    client = stack.cli(sgw, { "client", "create", "--company", company, "--environment", "test", "--scopes", SCOPES })
    key = client.apiKey
    -- Never used before the outage: its lookup has to reach PostgreSQL.
    fresh_key = stack.cli(sgw, { "client", "create", "--company", company, "--environment", "test",
      "--scopes", SCOPES }).apiKey
    local status, account = api("POST", "/api/v1/sandbox/accounts", { platform = "facebook", name = "Outage page" })
    assert(status == 201, cjson.encode(account))
    target = { accountId = account.id }
    local body
    status, body = create_post("before")
    assert(status == 202, cjson.encode(body))
    post_id = body.resource.postId
    local op = stack.wait_operation(function(path) return api("GET", path) end, body.operationId)
    assert(op.status == "succeeded", cjson.encode(op))
    local _, post = api("GET", "/api/v1/posts/" .. post_id)
    status, comment = api("POST", "/api/v1/sandbox/comments", { postTargetId = post.targets[1].id, text = "Hello?" })
    assert(status == 201, cjson.encode(comment))
  end)

  teardown(function()
    stack.cleanup()
    if pg then pg.purge() end
  end)

  local function assert_unavailable(what, status, body, headers)
    assert.are.equal(503, status, what .. ": " .. tostring(type(body) == "table" and cjson.encode(body) or body))
    assert.matches("^%d+$", headers["retry-after"], what)
    assert.is_true(tonumber(headers["retry-after"]) >= 1, what)
  end

  it("answers 503 with Retry-After on every endpoint while it is down, and serves again after", function()
    -- The worker caches the key's identity: the first calls go past
    -- authentication, the fresh key's does not.
    assert.are.equal(200, (api("GET", "/api/v1/social-accounts")))
    pg.stop()

    local status, body, headers = api("GET", "/api/v1/posts/" .. post_id)
    assert_unavailable("GET /posts/{id}", status, body, headers)
    assert.are.equal("service_unavailable", body.code)
    assert.are.equal("application/problem+json", headers["content-type"])
    assert_unavailable("GET /social-accounts", api("GET", "/api/v1/social-accounts"))
    assert_unavailable("GET /posts", api("GET", "/api/v1/posts"))
    assert_unavailable("a key never seen before", api("GET", "/api/v1/social-accounts", nil, fresh_key))
    assert_unavailable("POST /posts", create_post("during"))
    assert_unavailable("POST /comments/{id}/hide", api("POST", "/api/v1/comments/" .. comment.id .. "/hide"))
    assert_unavailable("POST /comments/{id}/replies",
      api("POST", "/api/v1/comments/" .. comment.id .. "/replies", { message = "Soon" }, nil,
        { ["Idempotency-Key"] = "outage-reply" }))
    local s, text, h = token_request()
    assert_unavailable("POST /oauth/token", s, text, h)
    assert.are.equal("service_unavailable", cjson.decode(text).code)

    -- A signed-in person's page (the session is looked up): an HTML page.
    s, text, h = sgw:request("GET", "/workspace/clients",
      { headers = { Cookie = "sgw_workspace=" .. string.rep("a", 43) } })
    assert_unavailable("GET /workspace/clients", s, text, h)
    assert.matches("^text/html", h["content-type"])
    assert.matches("Temporarily unavailable", text)

    pg.start()
    -- The same sgw, not restarted: everything works again.
    stack.eventually(function() return (api("GET", "/api/v1/posts/" .. post_id)) == 200 end, 30, 0.1,
      "sgw to reach PostgreSQL again")
    assert.are.equal(200, (api("GET", "/api/v1/social-accounts", nil, fresh_key)))
    status, body = create_post("after")
    assert.are.equal(202, status, cjson.encode(body))
    -- Nothing refused was made or half-made: no reply, no hide, no post, and
    -- the refused post's key is free for a new attempt.
    local function count(sql) return tonumber(stack.psql(url, sql)) end
    assert.are.equal(0, count("SELECT count(*) FROM operations WHERE type LIKE 'comment.%'"))
    assert.are.equal(0, count("SELECT count(*) FROM posts WHERE content->>'message' = 'during'"))
    status, body, headers = create_post("during")
    assert.are.equal(202, status, cjson.encode(body))
    assert.is_nil(headers["idempotent-replayed"])
    assert.are.equal(1, count("SELECT count(*) FROM posts WHERE content->>'message' = 'during'"))
    status, body = api("POST", "/api/v1/comments/" .. comment.id .. "/hide")
    assert.are.equal(202, status, cjson.encode(body))
    s, text = token_request()
    assert.are.equal(200, s, text)
    assert.is_true(sgw:alive())
  end)
end)

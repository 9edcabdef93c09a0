-- Posts end to end through the sandbox simulator: validation, publishing,
-- scheduling, cancel, retry, automatic retries, operations, idempotency and
-- tenancy, as a client sees them.
local stack = require "stack"
local cjson = require "cjson.safe"

local ENCRYPTION_KEY = stack.ENCRYPTION_KEY

local cli = stack.cli

local function iso_in(seconds)
  return os.date("!%Y-%m-%dT%H:%M:%S", math.floor(stack.now() + seconds)) .. "Z"
end

describe("posts", function()
  local sgw, key, other_key, fb, fb2, ig, n = nil, nil, nil, nil, nil, nil, 0

  local function api(method, path, body, headers)
    headers = headers or {}
    headers["X-Api-Key"] = headers["X-Api-Key"] or key
    if method == "POST" and path == "/api/v1/posts" and not headers["Idempotency-Key"] then
      n = n + 1
      headers["Idempotency-Key"] = "spec-" .. n .. "-" .. math.random(1, 1e9)
    end
    return sgw:json(method, path, { body = body, headers = headers })
  end

  local function text_post(targets, extra)
    local body = { targets = targets, content = { type = "text", message = "Hello from the spec " .. math.random(1, 1e9) },
      publishing = { mode = "immediate" } }
    for k, v in pairs(extra or {}) do body[k] = v end
    return body
  end

  local function wait_final(op_id)
    return stack.wait_operation(function(path) return api("GET", path) end, op_id)
  end

  setup(function()
    sgw = stack.start_sgw {
      name = "posts",
      set = {
        ["crypto.encryption_key"] = ENCRYPTION_KEY,
        ["publishing.retry.base_seconds"] = 0.2,
        ["publishing.retry.max_seconds"] = 1,
        ["api.rate_limit.per_minute"] = 100000,
        ["jobs.poll_interval_ms"] = 200,
      },
    }
    local company = cli(sgw, { "company", "create", "--name", "Posts Co" }).companyId
    local all = "accounts:read posts:read posts:write operations:read uploads:write sandbox:write"
    key = cli(sgw, { "client", "create", "--company", company, "--environment", "test", "--scopes", all }).apiKey
    local other = cli(sgw, { "company", "create", "--name", "Other Co" }).companyId
    other_key = cli(sgw, { "client", "create", "--company", other, "--environment", "test", "--scopes", all }).apiKey
    local _
    _, fb = api("POST", "/api/v1/sandbox/accounts", { platform = "facebook", name = "Spec page" })
    _, fb2 = api("POST", "/api/v1/sandbox/accounts", { platform = "facebook", name = "Spec page 2" })
    _, ig = api("POST", "/api/v1/sandbox/accounts", { platform = "instagram", name = "Spec IG" })
  end)

  teardown(function() stack.cleanup() end)

  it("creates sandbox accounts that list as active test accounts", function()
    assert.matches("^acc_", fb.id)
    assert.are.equal("test", fb.environment)
    local _, list = api("GET", "/api/v1/social-accounts")
    assert.are.equal(3, #list.data)
  end)

  it("publishes an immediate text post and reports the outcome in the operation", function()
    local status, body, headers = api("POST", "/api/v1/posts",
      text_post({ { socialAccountId = fb.id, platform = "facebook" } }, { externalReference = "order-17" }))
    assert.are.equal(202, status, cjson.encode(body))
    assert.matches("^req_", body.requestId)
    assert.are.equal(headers["x-request-id"], body.requestId)
    assert.matches("^op_", body.operationId)
    assert.are.equal("queued", body.status)
    assert.are.equal("order-17", body.externalReference)
    assert.matches("^post_", body.resource.postId)
    local op = wait_final(body.operationId)
    assert.are.equal("succeeded", op.status)
    assert.are.equal("post.publish", op.type)
    assert.are.same({ type = "post", id = body.resource.postId }, op.resource)
    assert.are.equal("published", op.result.status)
    assert.are.equal(body.resource.postId, op.result.postId)
    assert.matches("^tgt_", op.result.targets[1].postTargetId)
    assert.is_string(op.result.targets[1].platformPostId)
    assert.is_string(op.completedAt)
    local _, post = api("GET", "/api/v1/posts/" .. body.resource.postId)
    assert.are.equal("published", post.status)
    assert.are.equal("order-17", post.externalReference)
    local t = post.targets[1]
    assert.are.equal("published", t.status)
    assert.are.equal(fb.id, t.socialAccountId)
    assert.are.equal(1, t.attempts)
    assert.is_string(t.permalinkUrl)
    assert.matches("Z$", t.publishedAt)
    assert.are.equal(cjson.null, t.error)
  end)

  it("reports every validation problem at once and creates nothing", function()
    local _, before = api("GET", "/api/v1/posts?limit=100")
    local status, body = api("POST", "/api/v1/posts", {
      targets = { { socialAccountId = ig.id, platform = "instagram" }, { socialAccountId = "acc_nope", platform = "facebook" } },
      content = { type = "text", message = "Instagram refuses text" },
      publishing = { mode = "scheduled", scheduledAt = "2001-01-01T00:00:00Z" },
      companyId = "cmp_someone_else",
    })
    assert.are.equal(422, status)
    assert.are.equal("validation_failed", body.code)
    local codes = {}
    for _, e in ipairs(body.errors) do codes[e.code] = e.field end
    assert.is_truthy(codes.unsupported_content_type)
    assert.is_truthy(codes.unknown_account)
    assert.is_truthy(codes.scheduled_at_in_past)
    assert.are.equal("/companyId", codes.field_not_allowed)
    local _, after = api("GET", "/api/v1/posts?limit=100")
    assert.are.equal(#before.data, #after.data)
  end)

  it("requires an Idempotency-Key and replays the first answer for the same one", function()
    local status, body = sgw:json("POST", "/api/v1/posts", { headers = { ["X-Api-Key"] = key },
      body = text_post({ { socialAccountId = fb.id, platform = "facebook" } }) })
    assert.are.equal(400, status)
    assert.are.equal("idempotency_key_required", body.code)
    local request = text_post({ { socialAccountId = fb2.id, platform = "facebook" } })
    local s1, b1 = api("POST", "/api/v1/posts", request, { ["Idempotency-Key"] = "same-key-1" })
    local s2, b2, h2 = api("POST", "/api/v1/posts", request, { ["Idempotency-Key"] = "same-key-1" })
    assert.are.equal(202, s1)
    assert.are.equal(202, s2)
    assert.are.equal("true", h2["idempotent-replayed"])
    assert.are.equal(b1.resource.postId, b2.resource.postId)
    request.content.message = "something else"
    local s3, b3 = api("POST", "/api/v1/posts", request, { ["Idempotency-Key"] = "same-key-1" })
    assert.are.equal(422, s3)
    assert.are.equal("idempotency_key_reused", b3.code)
  end)

  it("schedules a post, which can be cancelled before it starts", function()
    local _, body = api("POST", "/api/v1/posts", text_post({ { socialAccountId = fb.id, platform = "facebook" } },
      { publishing = { mode = "scheduled", scheduledAt = iso_in(3600) } }))
    local post_id = body.resource.postId
    local _, post = api("GET", "/api/v1/posts/" .. post_id)
    assert.are.equal("scheduled", post.status)
    assert.are.equal("scheduled", post.targets[1].status)
    local status, cancelled = api("POST", "/api/v1/posts/" .. post_id .. "/cancel")
    assert.are.equal(200, status)
    assert.are.equal("cancelled", cancelled.status)
    assert.are.equal("cancelled", cancelled.targets[1].status)
    status = api("POST", "/api/v1/posts/" .. post_id .. "/cancel")
    assert.are.equal(200, status)
    local _, op = api("GET", "/api/v1/operations/" .. body.operationId)
    assert.are.equal("cancelled", op.status)
    assert.are.same({ postId = post_id, status = "cancelled", targets = { { postTargetId = post.targets[1].id,
      status = "cancelled", platformPostId = cjson.null, error = cjson.null } } }, op.result)
  end)

  it("cancels a post whose target a worker is starting by waiting for it, not deadlocking with it", function()
    -- A batch of attempts starting (lib/publisher.lua) locks the target, then
    -- the post; a cancel that locked the post first would deadlock with it.
    local _, body = api("POST", "/api/v1/posts", text_post({ { socialAccountId = fb.id, platform = "facebook" } },
      { publishing = { mode = "scheduled", scheduledAt = iso_in(3600) } }))
    local post_id = body.resource.postId
    local _, post = api("GET", "/api/v1/posts/" .. post_id)
    local target_id = post.targets[1].id
    local q = stack.shell_quote
    local dir = os.tmpname()
    local worker = io.popen(stack.PSQL .. " " .. q(sgw.database_url) .. " -X -q -v ON_ERROR_STOP=1 >" .. q(dir .. ".psql") .. " 2>&1", "w")
    worker:write("BEGIN;\nSELECT id FROM post_targets WHERE id = '" .. target_id .. "' FOR UPDATE;\n")
    worker:flush()
    local holding = "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND query LIKE "
      .. "'SELECT id FROM post_targets WHERE id = ''" .. target_id .. "''%'"
    stack.eventually(function() return stack.psql(sgw.database_url, holding) == "1" end, 10, 0.02, "the target locked")
    os.execute("curl -s -o /dev/null -w '%{http_code}' -X POST -H " .. q("X-Api-Key: " .. key) .. " "
      .. q(sgw.base_url .. "/api/v1/posts/" .. post_id .. "/cancel") .. " >" .. q(dir .. ".code") .. " 2>&1 &")
    local waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
    stack.eventually(function() return stack.psql(sgw.database_url, waiting) == "1" end, 10, 0.02, "the cancel waiting")
    worker:write("UPDATE post_targets SET status = 'publishing' WHERE id = '" .. target_id .. "';\n"
      .. "UPDATE posts SET status = 'publishing' WHERE id = '" .. post_id .. "';\nCOMMIT;\n")
    local committed = worker:close()
    local function read(path) local f = io.open(path) local v = f and f:read("a") or "" if f then f:close() end return v end
    assert.is_true(committed, "the starting attempt went through: " .. read(dir .. ".psql"))
    stack.eventually(function() return read(dir .. ".code") ~= "" end, 10, 0.02, "the cancel answered")
    assert.are.equal("409", read(dir .. ".code"))
    local _, after = api("GET", "/api/v1/posts/" .. post_id)
    assert.are.equal("publishing", after.targets[1].status)
    os.remove(dir) os.remove(dir .. ".psql") os.remove(dir .. ".code")
  end)

  it("answers 503 with Retry-After and changes nothing when a statement runs out of time waiting for a lock", function()
    -- A second instance on the same database whose statements may take 300 ms.
    local hasty = stack.start_sgw { name = "posts-hasty", database_url = sgw.database_url, set = {
      ["crypto.encryption_key"] = ENCRYPTION_KEY, ["api.rate_limit.per_minute"] = 100000,
      ["database.statement_timeout_ms"] = 300 } }
    local _, body = api("POST", "/api/v1/posts", text_post({ { socialAccountId = fb.id, platform = "facebook" } },
      { publishing = { mode = "scheduled", scheduledAt = iso_in(3600) } }))
    local post_id = body.resource.postId
    local q = stack.shell_quote
    local holder = io.popen(stack.PSQL .. " " .. q(sgw.database_url) .. " -X -q -v ON_ERROR_STOP=1 >/dev/null 2>&1", "w")
    holder:write("BEGIN;\nSELECT id FROM posts WHERE id = '" .. post_id .. "' FOR UPDATE;\n")
    holder:flush()
    local holding = "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND query LIKE "
      .. "'SELECT id FROM posts WHERE id = ''" .. post_id .. "''%'"
    stack.eventually(function() return stack.psql(sgw.database_url, holding) == "1" end, 10, 0.02, "the post locked")
    local status, problem, headers = hasty:json("POST", "/api/v1/posts/" .. post_id .. "/cancel",
      { headers = { ["X-Api-Key"] = key } })
    holder:write("ROLLBACK;\n")
    holder:close()
    assert.are.equal(503, status, cjson.encode(problem))
    assert.are.equal("service_unavailable", problem.code)
    assert.are.equal("2", headers["retry-after"] or headers["Retry-After"])
    local _, after = api("GET", "/api/v1/posts/" .. post_id)
    assert.are.equal("scheduled", after.status)
    assert.are.equal(200, (api("POST", "/api/v1/posts/" .. post_id .. "/cancel")))
    hasty:stop()
  end)

  it("publishes a scheduled post within a second of scheduledAt", function()
    local at = math.floor(stack.now()) + 3
    local _, body = api("POST", "/api/v1/posts", text_post({ { socialAccountId = fb.id, platform = "facebook" } },
      { publishing = { mode = "scheduled", scheduledAt = os.date("!%Y-%m-%dT%H:%M:%SZ", at) } }))
    local op = wait_final(body.operationId)
    assert.are.equal("succeeded", op.status)
    local _, post = api("GET", "/api/v1/posts/" .. body.resource.postId)
    local y, mo, d, h, mi, s, ms = post.targets[1].publishedAt:match("(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)%.(%d+)Z")
    local published = os.time({ year = y, month = mo, day = d, hour = h, min = mi, sec = s, isdst = false })
      - os.time({ year = 1970, month = 1, day = 1, hour = 0, isdst = false }) + ms / 1000
    assert.is_true(published >= at, "not before scheduledAt")
    assert.is_true(published - at < 1.5, "started " .. (published - at) .. " s after scheduledAt")
  end)

  it("refuses to cancel a post that has started", function()
    local _, body = api("POST", "/api/v1/posts", text_post({ { socialAccountId = fb.id, platform = "facebook" } }))
    wait_final(body.operationId)
    local status, p = api("POST", "/api/v1/posts/" .. body.resource.postId .. "/cancel")
    assert.are.equal(409, status)
    assert.are.equal("post_not_cancellable", p.code)
  end)

  it("retries rate-limited attempts automatically and publishes in the end", function()
    local s = api("POST", "/api/v1/sandbox/failures", { socialAccountId = fb2.id, error = "rate_limited", count = 2 })
    assert.are.equal(201, s)
    local _, body = api("POST", "/api/v1/posts", text_post({ { socialAccountId = fb2.id, platform = "facebook" } }))
    local op = wait_final(body.operationId)
    assert.are.equal("succeeded", op.status)
    local _, post = api("GET", "/api/v1/posts/" .. body.resource.postId)
    assert.are.equal(3, post.targets[1].attempts)
    assert.are.equal(cjson.null, post.targets[1].error)
  end)

  it("fails at once on an expired token, ends partially published, and retries only the failed target", function()
    api("POST", "/api/v1/sandbox/failures", { socialAccountId = fb2.id, error = "token_expired", count = 1 })
    local _, body = api("POST", "/api/v1/posts", text_post({
      { socialAccountId = fb.id, platform = "facebook" }, { socialAccountId = fb2.id, platform = "facebook" } }))
    local op = wait_final(body.operationId)
    assert.are.equal("succeeded", op.status)
    assert.are.equal("partially_published", op.result.status)
    local _, post = api("GET", "/api/v1/posts/" .. body.resource.postId)
    assert.are.equal("partially_published", post.status)
    local published, failed = post.targets[1], post.targets[2]
    assert.are.equal("published", published.status)
    assert.are.equal("failed", failed.status)
    assert.are.equal(1, failed.attempts)
    assert.are.equal("token_expired", failed.error.code)
    assert.is_false(failed.error.retryable)

    local status, retry = api("POST", "/api/v1/posts/" .. body.resource.postId .. "/retry")
    assert.are.equal(202, status)
    assert.are_not.equal(body.operationId, retry.operationId)
    local rop = wait_final(retry.operationId)
    assert.are.equal("post.retry", rop.type)
    assert.are.equal("published", rop.result.status)
    local _, after = api("GET", "/api/v1/posts/" .. body.resource.postId)
    assert.are.equal("published", after.status)
    assert.are.equal(published.platformPostId, after.targets[1].platformPostId, "the published target was not touched")
    assert.are.equal(1, after.targets[1].attempts)
    status = api("POST", "/api/v1/posts/" .. body.resource.postId .. "/retry")
    assert.are.equal(409, status)
  end)

  it("ends failed when no target publishes", function()
    api("POST", "/api/v1/sandbox/failures", { socialAccountId = fb2.id, error = "content_rejected", count = 1 })
    local _, body = api("POST", "/api/v1/posts", text_post({ { socialAccountId = fb2.id, platform = "facebook" } }))
    local op = wait_final(body.operationId)
    assert.are.equal("failed", op.status)
    assert.are.equal("failed", op.result.status)
    assert.are.equal("content_rejected", op.result.targets[1].error.code)
  end)

  it("gives up after publishing.retry.max_attempts", function()
    api("POST", "/api/v1/sandbox/failures", { socialAccountId = fb2.id, error = "platform_unavailable", count = 10 })
    local _, body = api("POST", "/api/v1/posts", text_post({ { socialAccountId = fb2.id, platform = "facebook" } }))
    local op = wait_final(body.operationId)
    assert.are.equal("failed", op.status)
    local _, post = api("GET", "/api/v1/posts/" .. body.resource.postId)
    assert.are.equal(5, post.targets[1].attempts)
    assert.are.equal("platform_unavailable", post.targets[1].error.code)
    assert.is_true(post.targets[1].error.retryable)
    api("POST", "/api/v1/sandbox/failures", { socialAccountId = fb2.id, error = "platform_unavailable", count = 0 + 1 })
  end)

  it("lists posts newest first with a cursor that neither skips nor repeats", function()
    local seen, cursor, pages = {}, nil, 0
    repeat
      local _, page = api("GET", "/api/v1/posts?limit=3" .. (cursor and ("&cursor=" .. cursor) or ""))
      pages = pages + 1
      for _, p in ipairs(page.data) do
        assert.is_nil(seen[p.id], "repeated " .. p.id)
        seen[p.id] = true
      end
      cursor = page.nextCursor ~= cjson.null and page.nextCursor or nil
    until not cursor
    assert.is_true(pages > 2)
    -- Made up, or forged with a date PostgreSQL would refuse: {"t":"0000-01-01...","id":"post_x"},
    -- {"t":"2026-02-30...","id":"post_x"}.
    for _, c in ipairs { "not-a-cursor", "eyJ0IjoiMDAwMC0wMS0wMVQwMDowMDowMC4wMDAwMDBaIiwiaWQiOiJwb3N0X3gifQ", "eyJ0IjoiMjAyNi0wMi0zMFQxMDowMDowMC4wMDAwMDBaIiwiaWQiOiJwb3N0X3gifQ" } do
      local status, bad = api("GET", "/api/v1/posts?cursor=" .. c)
      assert.are.equal(400, status, c)
      assert.are.equal("invalid_cursor", bad.code)
    end
    assert.are.equal(400, (api("GET", "/api/v1/posts?limit=101")))
    assert.are.equal(400, (api("GET", "/api/v1/posts?status=bogus")))
    local _, cancelled = api("GET", "/api/v1/posts?status=cancelled")
    for _, p in ipairs(cancelled.data) do assert.are.equal("cancelled", p.status) end
  end)

  it("hides one company's posts, operations and accounts from another", function()
    local _, body = api("POST", "/api/v1/posts", text_post({ { socialAccountId = fb.id, platform = "facebook" } }))
    local h = { ["X-Api-Key"] = other_key }
    for _, path in ipairs { "/api/v1/posts/" .. body.resource.postId, "/api/v1/operations/" .. body.operationId } do
      local status, p = api("GET", path, nil, h)
      assert.are.equal(404, status)
      assert.are.equal("not_found", p.code)
    end
    assert.are.equal(404, (api("POST", "/api/v1/posts/" .. body.resource.postId .. "/cancel", nil, h)))
    assert.are.equal(404, (api("POST", "/api/v1/posts/" .. body.resource.postId .. "/retry", nil, h)))
    local _, list = api("GET", "/api/v1/posts", nil, h)
    assert.are.equal(0, #list.data)
    local status, refused = api("POST", "/api/v1/posts", text_post({ { socialAccountId = fb.id, platform = "facebook" } }), h)
    assert.are.equal(422, status)
    assert.are.equal("unknown_account", refused.errors[1].code)
    status = api("POST", "/api/v1/sandbox/failures", { socialAccountId = fb.id, error = "rate_limited", count = 1 }, h)
    assert.are.equal(422, status)
  end)
end)

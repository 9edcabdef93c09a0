-- Publishing to live accounts through the real adapters against the fake
-- Graph API, with the platform misbehaving: slow, failing with 500s,
-- rate-limiting with a wait, expiring a token mid-batch, timing out after
-- it created the post, dropping connections; and sgw killed, and PostgreSQL
-- restarted, in the middle. Every target ends in the right final status and
-- none is published twice, as the fake's own record shows.
local stack = require "stack"
local fake_graph = require "fake_graph"
local own_services = require "own_services"
local cjson = require "cjson.safe"

local ENCRYPTION_KEY = stack.ENCRYPTION_KEY

local cli = stack.cli

local function settings(fake, extra)
  local s = {
    ["crypto.encryption_key"] = ENCRYPTION_KEY,
    ["meta.graph_base_url"] = fake.graph_url,
    ["meta.app_id"] = fake_graph.APP_ID,
    ["meta.app_secret"] = fake_graph.APP_SECRET,
    ["meta.request_timeout_seconds"] = 2,
    ["meta.instagram_container_first_poll_seconds"] = 0.2,
    ["meta.instagram_container_poll_seconds"] = 0.2,
    ["publishing.retry.base_seconds"] = 0.2,
    ["publishing.retry.max_seconds"] = 1,
    ["api.rate_limit.per_minute"] = 1000000,
    ["jobs.lease_seconds"] = 2,
    ["clock.allow_control"] = true,
  }
  fake:https_settings(s)
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

-- A live client with a Page (and its Instagram account) connected.
local function tenant(inst, fake)
  local company = cli(inst, { "company", "create", "--name", "Live Co" }).companyId
  local key = cli(inst, { "client", "create", "--company", company, "--environment", "live",
    "--scopes", "accounts:read posts:read posts:write operations:read" }).apiKey
  local page = fake.add_page({ name = "Live page", instagram_business_account = true })
  local fb = cli(inst, { "account", "add", "--company", company, "--environment", "live", "--platform", "facebook",
    "--platform-account-id", page.id, "--name", page.name, "--access-token", page.access_token }).accountId
  local ig = cli(inst, { "account", "add", "--company", company, "--environment", "live", "--platform", "instagram",
    "--platform-account-id", page.instagram_business_account.id, "--name", "Live IG",
    "--access-token", page.access_token, "--page-id", page.id }).accountId
  local t = { key = key, page = page, fb = fb, ig = ig, n = 0, inst = inst }
  --- Connects an account again (after Meta refused its token, it is reconnect_required).
  function t.reconnect(platform)
    local id = platform == "instagram" and page.instagram_business_account.id or page.id
    assert(cli(inst, { "account", "add", "--company", company, "--environment", "live", "--platform", platform or "facebook",
      "--platform-account-id", id, "--name", platform == "instagram" and "Live IG" or page.name,
      "--access-token", page.access_token }).accountId == (platform == "instagram" and ig or fb))
  end
  function t.api(method, path, body)
    t.n = t.n + 1
    return t.inst:json(method, path, { body = body,
      headers = { ["X-Api-Key"] = key, ["Idempotency-Key"] = "fault-" .. t.n .. "-" .. math.random(1, 1e9) } })
  end
  function t.text(message, targets)
    local status, body = t.api("POST", "/api/v1/posts", {
      targets = targets or { { socialAccountId = fb, platform = "facebook" } },
      content = { type = "text", message = message }, publishing = { mode = "immediate" } })
    assert(status == 202, cjson.encode(body))
    return body
  end
  function t.wait(op_id, timeout)
    return stack.wait_operation(function(path) return t.api("GET", path) end, op_id, timeout or 60)
  end
  function t.post(id)
    local _, body = t.api("GET", "/api/v1/posts/" .. id)
    return body
  end
  return t
end

-- How many times the fake really published this message on the page.
local function times_published(fake, page_id, message)
  local n = 0
  for _, p in ipairs(fake.published(page_id).data or {}) do
    if (p.message or p.caption) == message then n = n + 1 end
  end
  return n
end

describe("publishing faults", function()
  local fake, sgw, t

  setup(function()
    fake = fake_graph.start({ latency_ms = 0, config = { require_appsecret_proof = true } })
    sgw = stack.start_sgw { name = "faults", set = settings(fake) }
    t = tenant(sgw, fake)
  end)

  teardown(function()
    stack.cleanup()
    fake_graph.stop_all()
  end)

  before_each(function() fake.clear_failures() end)

  it("publishes a text post to a Page for real", function()
    local body = t.text("A real post")
    local op = t.wait(body.operationId)
    assert.are.equal("succeeded", op.status)
    local target = t.post(body.resource.postId).targets[1]
    assert.are.equal("published", target.status)
    assert.matches("^" .. t.page.id .. "_%d+$", target.platformPostId)
    assert.matches("^https://www%.facebook%.com/", target.permalinkUrl)
    assert.are.equal(1, times_published(fake, t.page.id, "A real post"))
  end)

  it("drops the outcome of a run whose job was taken over, and leaves the new attempt alone", function()
    -- While the platform takes 1.5 s to refuse the POST, the job passes to
    -- another run (as when this instance's lease ran out in a database
    -- outage), which starts an attempt of its own. The first run's failure
    -- must not send that attempt back to retry_scheduled.
    local message = "Taken over mid-call"
    fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 1, preset = "transient", delay_ms = 1500 })
    local body = t.text(message)
    stack.eventually(function()
      for _, r in ipairs(fake.requests({ method = "POST", path = "/" .. t.page.id .. "/feed" })) do
        if r.params and r.params.message == message then return true end
      end
    end, 20, 0.02, "the POST on its way")
    local post = body.resource.postId
    stack.psql(sgw.database_url, ([[
      UPDATE jobs SET locked_by = 'another-instance', locked_until = now() + interval '60 seconds'
       WHERE kind = 'publish_target' AND payload->>'targetId' IN (SELECT id FROM post_targets WHERE post_id = '%s');
      UPDATE post_targets SET attempts = attempts + 1 WHERE post_id = '%s']]):format(post, post))
    stack.eventually(function() return sgw:log():find('"publish_outcome_dropped"', 1, true) end, 20, 0.05,
      "the first run to drop its outcome")
    assert.are.equal("publishing|2", stack.psql(sgw.database_url,
      ("SELECT status || '|' || attempts FROM post_targets WHERE post_id = '%s'"):format(post)))
    -- Once the other run's lease runs out, the job runs again and publishes, once.
    stack.psql(sgw.database_url, ([[UPDATE jobs SET locked_until = now() - interval '1 second' WHERE kind = 'publish_target'
       AND payload->>'targetId' IN (SELECT id FROM post_targets WHERE post_id = '%s')]]):format(post))
    assert.are.equal("succeeded", t.wait(body.operationId).status)
    assert.are.equal(1, times_published(fake, t.page.id, message))
  end)

  it("retries 500s from the platform and publishes once", function()
    fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 2, preset = "transient" })
    local body = t.text("After two 500s")
    assert.are.equal("succeeded", t.wait(body.operationId).status)
    local target = t.post(body.resource.postId).targets[1]
    assert.are.equal(3, target.attempts)
    assert.are.equal(1, times_published(fake, t.page.id, "After two 500s"))
  end)

  it("fails at once when the token expires mid-batch, and keeps what was published", function()
    local first = t.text("Batch 1")
    t.wait(first.operationId)
    fake.expire_token(t.page.access_token)
    local b = t.text("Batch 2")
    local op = t.wait(b.operationId)
    assert.are.equal("failed", op.status)
    local target = t.post(b.resource.postId).targets[1]
    assert.are.equal("token_expired", target.error.code)
    assert.are.equal(1, target.attempts, "an expired token is not retried")
    assert.matches("^190", target.error.platformCode)
    -- The account must be connected again before it takes posts.
    local status, refused = t.api("POST", "/api/v1/posts", { targets = { { socialAccountId = t.fb, platform = "facebook" } },
      content = { type = "text", message = "Batch 3" }, publishing = { mode = "immediate" } })
    assert.are.equal(422, status, cjson.encode(refused))
    assert.are.equal("published", t.post(first.resource.postId).status)
    assert.are.equal(1, times_published(fake, t.page.id, "Batch 1"))
    assert.are.equal(0, times_published(fake, t.page.id, "Batch 2"))
    fake.expire_token(t.page.access_token, false)
    t.reconnect()
  end)

  it("resolves a time-out after the platform created the post, and does not publish it again", function()
    fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 1, kind = "timeout_after_commit" })
    local body = t.text("Timed out but created")
    assert.are.equal("succeeded", t.wait(body.operationId, 30).status)
    local target = t.post(body.resource.postId).targets[1]
    assert.are.equal("published", target.status)
    assert.are.equal(1, times_published(fake, t.page.id, "Timed out but created"))
    local found
    for _, p in ipairs(fake.published(t.page.id).data) do
      if p.message == "Timed out but created" then found = p end
    end
    assert.are.equal(found.id, target.platformPostId)
  end)

  it("resolves Meta's 500 after it created the post, and does not publish it again", function()
    fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 1, kind = "error_after_commit",
      preset = "unknown" })
    local body = t.text("Answered 500 but created")
    assert.are.equal("succeeded", t.wait(body.operationId, 30).status)
    local target = t.post(body.resource.postId).targets[1]
    assert.are.equal("published", target.status)
    assert.are.equal(1, times_published(fake, t.page.id, "Answered 500 but created"))
    assert.are.equal(1, target.attempts, "the post was found, not made again")
  end)

  it("takes a duplicate refusal after an unknown outcome for its own post that the listing did not show yet", function()
    local message = "Created, then listed late"
    fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 1, kind = "error_after_commit",
      preset = "transient" })
    -- The first look finds nothing (the listing lags), so a second attempt
    -- goes out, which Meta refuses as the same status as the Page's last.
    fake.fail({ match = { method = "GET", path = "/{page}/published_posts" }, count = 1, kind = "http", status = 200,
      body = '{"data":[]}', content_type = "application/json" })
    local body = t.text(message)
    assert.are.equal("succeeded", t.wait(body.operationId, 30).status)
    local target = t.post(body.resource.postId).targets[1]
    assert.are.equal("published", target.status)
    assert.are.equal(1, times_published(fake, t.page.id, message))
    local refused = 0
    for _, r in ipairs(fake.requests({ method = "POST", path = "/" .. t.page.id .. "/feed" })) do
      if type(r.params) == "table" and r.params.message == message and r.error_code == 506 then refused = refused + 1 end
    end
    assert.are.equal(1, refused, "the second attempt met the duplicate refusal")
  end)

  it("fails a target the platform never shows after its last attempt", function()
    fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 5, preset = "transient" })
    local body = t.text("Never there")
    local op = t.wait(body.operationId, 60)
    assert.are.equal("failed", op.status)
    local target = t.post(body.resource.postId).targets[1]
    assert.are.equal("failed", target.status)
    assert.are.equal("platform_unavailable", target.error.code)
    assert.are.equal(5, target.attempts)
    assert.are.equal(0, times_published(fake, t.page.id, "Never there"))
  end)

  it("never sends a publishing POST twice when a reused connection closes without an answer", function()
    -- A first post leaves a kept-alive connection to the platform behind;
    -- on that connection the next POST is carried out and then cut off. A
    -- transport that re-sent the POST on a fresh connection would publish twice.
    local warm = t.text("Warms the connection")
    assert.are.equal("succeeded", t.wait(warm.operationId, 30).status)
    fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 1, kind = "close_after_commit" })
    local body = t.text("Closed after commit")
    assert.are.equal("succeeded", t.wait(body.operationId, 30).status, cjson.encode(t.post(body.resource.postId)))
    local target = t.post(body.resource.postId).targets[1]
    assert.are.equal("published", target.status)
    assert.are.equal(1, times_published(fake, t.page.id, "Closed after commit"))
    local sent = 0
    for _, r in ipairs(fake.requests({ method = "POST", path = "/" .. t.page.id .. "/feed" })) do
      if type(r.params) == "table" and r.params.message == "Closed after commit" then sent = sent + 1 end
    end
    assert.are.equal(1, sent, "the POST reached the platform once")
  end)

  it("tries again when the platform drops the connection before doing anything", function()
    fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 1, kind = "close" })
    local body = t.text("Dropped once")
    assert.are.equal("succeeded", t.wait(body.operationId, 30).status)
    assert.are.equal(1, times_published(fake, t.page.id, "Dropped once"))
  end)

  it("publishes to Facebook and Instagram independently, and reports a partial outcome", function()
    fake.fail({ match = { method = "POST", path = "/{ig}/media" }, count = 1, preset = "permission" })
    local status, body = t.api("POST", "/api/v1/posts", {
      targets = { { socialAccountId = t.fb, platform = "facebook" }, { socialAccountId = t.ig, platform = "instagram" } },
      content = { type = "image", message = "Both places #sgw", imageUrl = fake:instagram_image() },
      publishing = { mode = "immediate" },
    })
    assert.are.equal(202, status, cjson.encode(body))
    local op = t.wait(body.operationId)
    assert.are.equal("partially_published", op.result.status)
    local post = t.post(body.resource.postId)
    assert.are.equal("published", post.targets[1].status)
    assert.are.equal("failed", post.targets[2].status)
    assert.are.equal("permission_missing", post.targets[2].error.code)
    t.reconnect("instagram")
  end)

  it("publishes an Instagram image through its container once", function()
    local status, body = t.api("POST", "/api/v1/posts", {
      targets = { { socialAccountId = t.ig, platform = "instagram" } },
      content = { type = "image", message = "Container once", imageUrl = fake:instagram_image() },
      publishing = { mode = "immediate" },
    })
    assert.are.equal(202, status, cjson.encode(body))
    assert.are.equal("succeeded", t.wait(body.operationId).status)
    local target = t.post(body.resource.postId).targets[1]
    assert.matches("^%d+$", target.platformPostId)
    assert.are.equal(1, times_published(fake, t.page.instagram_business_account.id, "Container once"))
  end)
  -- Last in this block: it moves sgw's clock forward for good.
  it("waits as long as a rate-limited platform asks before trying again, and calls Meta for nothing meanwhile", function()
    fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 1, preset = "rate_limited" })
    local body = t.text("Rate limited once")
    local function waiting(post)
      local target
      stack.eventually(function()
        target = t.post(post.resource.postId).targets[1]
        return target.status == "retry_scheduled"
      end, 10, 0.1, "retry scheduled")
      return target
    end
    local function unix(at)
      local y, mo, d, h, mi, s = at:match("(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)")
      return os.time({ year = y, month = mo, day = d, hour = h, min = mi, sec = s, isdst = false })
        - os.time({ year = 1970, month = 1, day = 1, hour = 0, isdst = false })
    end
    local target = waiting(body)
    assert.are.equal("rate_limited", target.error.code)
    assert.is_true(target.error.retryable)
    -- The fake asked for a minute (estimated_time_to_regain_access), which
    -- wins over the one-second back-off configured here.
    local next_at = unix(target.nextAttemptAt)
    assert.is_true(next_at - stack.now() > 50, "next attempt in " .. (next_at - stack.now()) .. " s")
    assert.are.equal(0, times_published(fake, t.page.id, "Rate limited once"))

    -- Meanwhile a post to the same Page waits too, without a call to Meta
    -- (each call would add to the count that keeps the limit on), and
    -- without spending an attempt.
    local calls = #fake.requests({ method = "POST", path = "/" .. t.page.id .. "/feed" })
    local second = t.text("While throttled")
    local paused = waiting(second)
    assert.are.equal("rate_limited", paused.error.code)
    assert.matches("Meta is throttling calls for this account", paused.error.message, 1, true)
    assert.are.equal(cjson.null, paused.error.platform)
    assert.are.equal(0, paused.attempts)
    assert.is_true(math.abs(unix(paused.nextAttemptAt) - next_at) <= 2, paused.nextAttemptAt .. " vs " .. target.nextAttemptAt)
    assert.are.equal(calls, #fake.requests({ method = "POST", path = "/" .. t.page.id .. "/feed" }))
    -- The pause is kept under a digest of the Page's token, never the token.
    local _, keys = stack.sh("redis-cli -u " .. stack.shell_quote(sgw.redis_url) .. " --scan --pattern '*graphpause*'")
    assert.matches(":{graphpause}:token:" .. string.rep("%x", 32) .. "\n", keys .. "\n")
    assert.is_nil(keys:find(t.page.access_token, 1, true))

    -- Move sgw's clock past the wait instead of sleeping a minute.
    assert.are.equal(200, (sgw:admin("POST", "/clock/advance?seconds=61")))
    assert.are.equal("succeeded", t.wait(body.operationId).status)
    assert.are.equal("succeeded", t.wait(second.operationId).status)
    assert.are.equal(1, times_published(fake, t.page.id, "Rate limited once"))
    assert.are.equal(1, times_published(fake, t.page.id, "While throttled"))
    assert.are.equal(1, t.post(second.resource.postId).targets[1].attempts)
  end)

  -- The tests below move sgw's clock (as the one above did) and keep the
  -- fake's with it, so that what each dates stays comparable.
  local function move_clocks(seconds)
    local status, body = sgw:admin("POST", "/clock/advance?seconds=" .. seconds)
    assert.are.equal(200, status)
    fake.config({ clock_offset_s = cjson.decode(body).offsetSeconds })
  end

  it("finds an unknown attempt's post however long Meta's listing lags, from the first attempt's start", function()
    move_clocks(0)
    local message = "Listed long after"
    fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 1, kind = "error_after_commit",
      preset = "unknown" })
    -- The first look finds nothing and takes its time; meanwhile two minutes
    -- pass. The second attempt then meets Meta's duplicate refusal.
    fake.fail({ match = { method = "GET", path = "/{page}/published_posts" }, count = 1, kind = "http", status = 200,
      body = '{"data":[]}', content_type = "application/json", delay_ms = 1500 })
    local looks = #fake.requests({ method = "GET", path = "/" .. t.page.id .. "/published_posts" })
    local body = t.text(message)
    stack.eventually(function()
      return #fake.requests({ method = "GET", path = "/" .. t.page.id .. "/published_posts" }) > looks
    end, 20, 0.01, "the first look")
    move_clocks(120)
    assert.are.equal("succeeded", t.wait(body.operationId, 30).status)
    local target = t.post(body.resource.postId).targets[1]
    assert.are.equal("published", target.status)
    assert.are.equal(1, times_published(fake, t.page.id, message))
  end)

  it("stops the app's calls once Meta reports its usage at 100 %, before Meta refuses them", function()
    move_clocks(0)
    fake.config({ app_usage_min = 100 })
    local first = t.text("At the app's limit")
    assert.are.equal("succeeded", t.wait(first.operationId).status)
    fake.config({ app_usage_min = 0 })
    local feed = { method = "POST", path = "/" .. t.page.id .. "/feed" }
    local calls = #fake.requests(feed)
    local second = t.text("After the app's limit")
    local target
    stack.eventually(function()
      target = t.post(second.resource.postId).targets[1]
      return target.status == "retry_scheduled"
    end, 10, 0.1, "the second post to wait")
    assert.are.equal("rate_limited", target.error.code)
    assert.matches("Meta is throttling this app's calls", target.error.message, 1, true)
    assert.are.equal(0, target.attempts)
    assert.are.equal(calls, #fake.requests(feed), "no call while the app is held back")
    move_clocks(61)
    assert.are.equal("succeeded", t.wait(second.operationId).status)
    assert.are.equal(1, times_published(fake, t.page.id, "After the app's limit"))
  end)

  it("fails a target whose outcome the platform cannot tell for a day", function()
    move_clocks(0)
    local message = "Nobody can say"
    fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 1, kind = "error_after_commit",
      preset = "unknown" })
    fake.fail({ match = { method = "GET", path = "/{page}/published_posts" }, count = 1000, preset = "unknown" })
    local body = t.text(message)
    stack.eventually(function()
      return t.post(body.resource.postId).targets[1].status == "publishing"
        and #fake.requests({ method = "GET", path = "/" .. t.page.id .. "/published_posts" }) > 0
    end, 20, 0.05, "a look that fails")
    assert.are.equal("publishing", t.post(body.resource.postId).targets[1].status, "it waits to know")
    move_clocks(86401)
    local op = t.wait(body.operationId, 30)
    assert.are.equal("failed", op.status)
    local target = t.post(body.resource.postId).targets[1]
    assert.are.equal("platform_unavailable", target.error.code)
    assert.matches("Could not find out whether the post was published", target.error.message, 1, true)
    fake.clear_failures()
  end)
end)

describe("publishing through crashes", function()
  teardown(function()
    stack.cleanup()
    fake_graph.stop_all()
  end)

  it("loses and duplicates nothing when sgw is killed in the middle and restarted", function()
    local fake = fake_graph.start({ latency_ms = 400 })
    local sgw = stack.start_sgw { name = "faults-kill", set = settings(fake) }
    local t = tenant(sgw, fake)
    local ops = {}
    for i = 1, 30 do ops[i] = t.text("Crash test " .. i) end
    stack.eventually(function() return fake.published(t.page.id).total > 0 end, 20, 0.05, "publishing under way")
    assert.are.equal(137, sgw:kill())
    local again = stack.start_sgw { name = "faults-kill-2", set = settings(fake), database_url = sgw.database_url, migrate = false }
    t.inst = again
    for _, b in ipairs(ops) do assert.are.equal("succeeded", t.wait(b.operationId, 90).status) end
    for i = 1, 30 do assert.are.equal(1, times_published(fake, t.page.id, "Crash test " .. i), "Crash test " .. i) end
  end)

  it("publishes once when sgw stops while a publishing POST is still on its way", function()
    -- The drain (0.5 s) ends while the platform takes 3 s over the POST,
    -- which it then carries out. The job keeps its lease (6 s), so the next
    -- instance takes it only once the call is over, and finds the post.
    local fake = fake_graph.start({})
    local set = settings(fake, { ["http.drain_seconds"] = 0.5, ["jobs.lease_seconds"] = 6,
      ["meta.request_timeout_seconds"] = 5 })
    local sgw = stack.start_sgw { name = "faults-drain", set = set }
    local t = tenant(sgw, fake)
    fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 1, kind = "delay", delay_ms = 3000 })
    local body = t.text("Stopped mid-call")
    stack.eventually(function() return #fake.requests({ method = "POST", path = "/" .. t.page.id .. "/feed" }) > 0 end,
      20, 0.02, "the POST on its way")
    assert.are.equal(0, sgw:stop(30))
    local again = stack.start_sgw { name = "faults-drain-2", set = set, database_url = sgw.database_url, migrate = false }
    t.inst = again
    assert.are.equal("succeeded", t.wait(body.operationId, 60).status)
    -- Counted once the platform has finished every POST it was sent.
    stack.eventually(function()
      for _, r in ipairs(fake.requests({ method = "POST", path = "/" .. t.page.id .. "/feed" })) do
        if r.outcome == nil or r.outcome == cjson.null then return false end
      end
      return true
    end, 20, 0.05, "the platform to finish the POSTs")
    assert.are.equal(1, times_published(fake, t.page.id, "Stopped mid-call"))
    assert.are.equal(1, #fake.requests({ method = "POST", path = "/" .. t.page.id .. "/feed" }))
  end)

  it("loses and duplicates nothing when PostgreSQL restarts in the middle", function()
    local pg = own_services.postgres("faults", "sgw_faults")
    finally(pg.purge) -- also when the test fails: no server left running
    local url = pg.url
    local fake = fake_graph.start({ latency_ms = 300 })
    local sgw = stack.start_sgw { name = "faults-pg", set = settings(fake), database_url = url }
    local t = tenant(sgw, fake)
    local ops = {}
    for i = 1, 20 do ops[i] = t.text("PG restart " .. i) end
    stack.eventually(function() return fake.published(t.page.id).total > 0 end, 20, 0.05, "publishing under way")
    pg.stop()
    -- Down until sgw has seen it down (its /readyz says so), not for a
    -- length of time that says nothing of what sgw saw.
    stack.eventually(function() return (sgw:admin("GET", "/readyz")) == 503 end, 15, 0.05,
      "sgw to see the database down")
    pg.start()
    for _, b in ipairs(ops) do assert.are.equal("succeeded", t.wait(b.operationId, 120).status) end
    for i = 1, 20 do assert.are.equal(1, times_published(fake, t.page.id, "PG restart " .. i), "PG restart " .. i) end
    assert.is_true(sgw:alive(), "sgw survived the database restart")
    sgw:stop()
  end)
end)

-- Instagram in production (CONTRACT 11) through the API, against the fake
-- Graph API: the publishing quota read before media_publish, Meta's error
-- detail kept on a failed target, and the containers an account may make in
-- a window counted before each is asked for.
local stack = require "stack"
local fake_graph = require "fake_graph"
local cjson = require "cjson.safe"
local job_queue = require "job_queue"

local cli = stack.cli

-- Unix seconds of an RFC 3339 UTC time ("2026-01-02T03:04:05.678Z").
local function unix(s)
  local y, mo, d, h, mi, sec = s:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):([%d%.]+)Z$")
  assert(y, "not an RFC 3339 UTC time: " .. tostring(s))
  local t = os.time({ year = tonumber(y), month = tonumber(mo), day = tonumber(d), hour = tonumber(h),
    min = tonumber(mi), sec = 0, isdst = false })
  local offset = os.time(os.date("*t", t)) - os.time(os.date("!*t", t))
  return t + offset + tonumber(sec)
end

-- An sgw against the fake with one live Instagram account, and calls on it
-- (t); `set` adds to or overrides the settings.
local function start(fake, name, set)
  local settings = {
    ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
    ["meta.graph_base_url"] = fake.graph_url,
    ["meta.request_timeout_seconds"] = 2,
    ["meta.instagram_container_first_poll_seconds"] = 0.2,
    ["meta.instagram_container_poll_seconds"] = 0.2,
    ["publishing.retry.base_seconds"] = 0.2,
    ["publishing.retry.max_seconds"] = 1,
    -- Quota waits are not attempts: one attempt is all other failures get.
    ["publishing.retry.max_attempts"] = 1,
    ["api.rate_limit.per_minute"] = 1000000,
  }
  for k, v in pairs(set or {}) do settings[k] = v end
  local sgw = stack.start_sgw { name = name, set = fake:https_settings(settings) }
  local company = cli(sgw, { "company", "create", "--name", "Insta Co" }).companyId
  local key = cli(sgw, { "client", "create", "--company", company, "--environment", "live",
    "--scopes", "accounts:read posts:read posts:write operations:read" }).apiKey
  local t, ig = { sgw = sgw }, nil
  -- Posts from now on go to a new Instagram account (t.ig_user at Meta).
  function t.new_account()
    local page = fake.add_page({ name = "Insta page", instagram_business_account = true })
    t.ig_user = page.instagram_business_account.id
    ig = cli(sgw, { "account", "add", "--company", company, "--environment", "live", "--platform", "instagram",
      "--platform-account-id", t.ig_user, "--name", "Insta", "--access-token", page.access_token }).accountId
  end
  t.new_account()
  local n = 0
  function t.api(method, path, body)
    n = n + 1
    return sgw:json(method, path, { body = body,
      headers = { ["X-Api-Key"] = key, ["Idempotency-Key"] = "ig-" .. n .. "-" .. math.random(1, 1e9) } })
  end
  function t.publish(message)
    local status, body = t.api("POST", "/api/v1/posts", {
      targets = { { socialAccountId = ig, platform = "instagram" } },
      content = { type = "image", message = message, imageUrl = fake:instagram_image() },
      publishing = { mode = "immediate" } })
    assert(status == 202, cjson.encode(body))
    return body
  end
  function t.target(post_id)
    local _, body = t.api("GET", "/api/v1/posts/" .. post_id)
    return body.targets[1]
  end
  function t.wait(op_id, timeout)
    return stack.wait_operation(function(path) return t.api("GET", path) end, op_id, timeout or 30)
  end
  -- The target of this post once it waits for a retry; of a list of posts,
  -- the first found waiting.
  function t.waiting(posts, what)
    if posts.resource then posts = { posts } end
    return stack.eventually(function()
      for _, body in ipairs(posts) do
        local target = t.target(body.resource.postId)
        if target.status == "retry_scheduled" then return target end
      end
    end, 10, 0.05, what)
  end
  return t
end

describe("Instagram publishing", function()
  local fake, t, ig_user

  setup(function()
    fake = fake_graph.start({ latency_ms = 0 })
    t = start(fake, "instagram")
    ig_user = t.ig_user
  end)

  teardown(function()
    stack.cleanup()
    fake_graph.stop_all()
  end)

  before_each(function()
    fake.clear_failures()
    fake.config({ ig_quota = 50, ig_quota_duration_s = 86400 })
    fake.control("POST", "instagram/quota", { account = ig_user, used = 0 })
  end)

  local function publishes(message)
    local n = 0
    for _, p in ipairs(fake.published(ig_user).data) do
      if p.caption == message then n = n + 1 end
    end
    return n
  end

  local function media_publish_calls()
    return #fake.requests({ method = "POST", path = "/" .. ig_user .. "/media_publish" })
  end

  it("asks a container's status first a wait after making it, then once per poll interval, as Meta asks", function()
    fake.config({ container_ready_ms = 1500 })
    local body = t.publish("Polled as Meta asks")
    assert.are.equal("succeeded", t.wait(body.operationId).status)
    local made = fake.requests({ method = "POST", path = "/" .. ig_user .. "/media" })
    local container = t.target(body.resource.postId)
    assert.are.equal(1, #made)
    local polls = {}
    for _, r in ipairs(fake.requests({ method = "GET" })) do
      if r.params and r.params.fields == "status_code,status" and r.seq > made[1].seq then polls[#polls + 1] = r end
    end
    -- 0.2 s first wait and interval (setup), a container ready after 1.5 s:
    -- no query the moment it is made, and none closer than the interval.
    assert.is_true(#polls >= 1, "no status query")
    assert.is_true(polls[1].at - made[1].at >= 0.2, "first query " .. (polls[1].at - made[1].at) .. " s after")
    for i = 2, #polls do
      assert.is_true(polls[i].at - polls[i - 1].at >= 0.2, "queries " .. (polls[i].at - polls[i - 1].at) .. " s apart")
    end
    assert.are.equal("published", container.status)
    assert.are.equal(1, publishes("Polled as Meta asks"))
  end)

  it("waits for the window when the quota is used up, without calling media_publish, then publishes", function()
    fake.config({ ig_quota = 1, ig_quota_duration_s = 5 })
    local first = t.publish("First of the window")
    assert.are.equal("succeeded", t.wait(first.operationId).status)
    local published_at = unix(t.target(first.resource.postId).publishedAt)
    local calls = media_publish_calls()

    local second = t.publish("Second of the window")
    local waiting = t.waiting(second, "the second target to wait for the quota")
    assert.are.equal("rate_limited", waiting.error.code)
    assert.is_true(waiting.error.retryable)
    assert.matches("Instagram's publishing limit of 1 post per 5 seconds is used up", waiting.error.message, 1, true)
    -- The window frees when the first publish is 5 s old (clocks of sgw and its database: 1 s slack).
    assert.is_true(math.abs(unix(waiting.nextAttemptAt) - (published_at + 5)) < 1,
      waiting.nextAttemptAt .. " vs first published " .. t.target(first.resource.postId).publishedAt)
    assert.are.equal(cjson.null, waiting.error.platform)
    assert.are.equal(calls, media_publish_calls())

    local op = t.wait(second.operationId, 20)
    assert.are.equal("succeeded", op.status)
    local done = t.target(second.resource.postId)
    assert.are.equal("published", done.status)
    assert.is_true(unix(done.publishedAt) >= published_at + 5 - 1)
    assert.are.equal(1, publishes("Second of the window"))
  end)

  it("waits on a quota used up by other tools until the whole window has passed", function()
    fake.config({ ig_quota = 2, ig_quota_duration_s = 4 })
    fake.control("POST", "instagram/quota", { account = ig_user, used = 2 })
    local before = stack.now()
    local body = t.publish("After the others")
    local waiting = t.waiting(body, "the target to wait for the quota")
    assert.matches("limit of 2 posts per 4 seconds is used up (2 used)", waiting.error.message, 1, true)
    local at = unix(waiting.nextAttemptAt)
    assert.is_true(at >= before + 4 - 1 and at <= stack.now() + 4 + 1, waiting.nextAttemptAt)
    assert.are.equal("succeeded", t.wait(body.operationId, 20).status)
    assert.are.equal(1, publishes("After the others"))
  end)

  it("treats 9/2207042 from media_publish the same, keeping Meta's detail", function()
    fake.config({ ig_quota_duration_s = 3 })
    fake.fail({ match = { method = "POST", path = "/{ig}/media_publish" }, count = 1, preset = "ig_quota",
      error = { error_user_msg = "You have reached the maximum number of posts allowed." } })
    local body = t.publish("Refused by the quota once")
    local waiting = t.waiting(body, "the target to wait for the quota")
    assert.are.equal("rate_limited", waiting.error.code)
    assert.are.equal("9/2207042", waiting.error.platformCode)
    assert.are.equal(9, waiting.error.platform.code)
    assert.are.equal(2207042, waiting.error.platform.subcode)
    assert.are.equal("You have reached the maximum number of posts allowed.", waiting.error.platform.userMessage)
    assert.is_string(waiting.error.platform.fbtraceId)
    assert.matches("publishing limit of 50 posts per 3 seconds is used up", waiting.error.message, 1, true)
    local op = t.wait(body.operationId, 20)
    assert.are.equal("succeeded", op.status)
    assert.are.equal(1, publishes("Refused by the quota once"))
  end)

  it("replaces a container found EXPIRED with a new one and publishes that, once", function()
    -- The first status query finds the container expired (as after a wait of a day).
    fake.fail({ match = { method = "GET", path = "/{container}" }, count = 1, kind = "http", status = 200,
      content_type = "application/json",
      body = cjson.encode({ status_code = "EXPIRED", status = "Expired: Media was not published within 24 hours." }) })
    local made_before = #fake.requests({ method = "POST", path = "/" .. ig_user .. "/media" })
    local body = t.publish("Outlived its container")
    assert.are.equal("succeeded", t.wait(body.operationId).status)
    local made = fake.requests({ method = "POST", path = "/" .. ig_user .. "/media" })
    assert.are.equal(2, #made - made_before)
    local published = fake.requests({ method = "POST", path = "/" .. ig_user .. "/media_publish" })
    assert.are.equal(made[#made].seq < published[#published].seq, true)
    assert.are.equal(1, publishes("Outlived its container"))
    assert.are.equal("published", t.target(body.resource.postId).status)
  end)

  it("keeps Meta's code, subcode, trace id and user message on a failed target", function()
    fake.fail({ match = { method = "POST", path = "/{ig}/media" }, count = 1, error = { code = 100,
      subcode = 2207010, message = "(#100) The caption is too long", error_user_msg = "Shorten the caption." } })
    local body = t.publish("Refused caption")
    local op = t.wait(body.operationId)
    assert.are.equal("failed", op.status)
    local target = t.target(body.resource.postId)
    assert.are.equal("content_rejected", target.error.code)
    assert.are.equal("100/2207010", target.error.platformCode)
    assert.are.same({ 100, 2207010, "Shorten the caption." },
      { target.error.platform.code, target.error.platform.subcode, target.error.platform.userMessage })
    assert.matches("^A[%w_%-]+$", target.error.platform.fbtraceId)
    assert.are.same(target.error, op.result.targets[1].error)
    assert.are.equal(0, publishes("Refused caption"))
  end)
end)

describe("Instagram containers", function()
  local fake, t
  local WINDOW = 4

  -- Meta's limit of containers per account, made small: 2 per 4 s.
  setup(function()
    fake = fake_graph.start({ latency_ms = 0 })
    t = start(fake, "instagram_containers", {
      ["meta.instagram_container_limit"] = 2,
      ["meta.instagram_container_window_seconds"] = WINDOW,
      ["meta.request_timeout_seconds"] = 1,
    })
  end)

  teardown(function()
    stack.cleanup()
    fake_graph.stop_all()
  end)

  local function containers_made()
    return fake.requests({ method = "POST", path = "/" .. t.ig_user .. "/media" })
  end

  -- Each test has an account of its own, with no container in the window yet.
  before_each(function()
    fake.clear_failures()
    t.new_account()
  end)

  -- How many times each of these captions was published.
  local function published(list)
    local seen = {}
    for _, p in ipairs(fake.published(t.ig_user).data) do seen[p.caption] = (seen[p.caption] or 0) + 1 end
    local counts = {}
    for i, caption in ipairs(list) do counts[i] = seen[caption] or 0 end
    return counts
  end

  it("makes no more containers than the limit allows in the window; the rest wait for it", function()
    local bodies = {}
    for i = 1, 3 do bodies[i] = t.publish("Container " .. i) end
    local waiting = t.waiting(bodies, "a target to wait for the container limit")
    local made = containers_made()
    assert.are.equal(2, #made)
    assert.are.equal("rate_limited", waiting.error.code)
    assert.is_true(waiting.error.retryable)
    assert.matches("Instagram's limit of 2 containers per 4 seconds is used up (2 made by sgw)",
      waiting.error.message, 1, true)
    -- The wait ends when the first container leaves the window (rounded up to a second).
    local frees = made[1].at + WINDOW
    assert.is_true(unix(waiting.nextAttemptAt) >= frees - 0.5 and unix(waiting.nextAttemptAt) <= frees + 1.5,
      waiting.nextAttemptAt)
    assert.are.equal(0, waiting.attempts)

    for i = 1, 3 do assert.are.equal("succeeded", t.wait(bodies[i].operationId, 20).status) end
    made = containers_made()
    assert.are.equal(3, #made)
    assert.is_true(made[3].at >= made[1].at + WINDOW - 0.5,
      ("the third container %.2f s after the first"):format(made[3].at - made[1].at))
    assert.are.same({ 1, 1, 1 }, published({ "Container 1", "Container 2", "Container 3" }))
  end)

  it("forgets the slots that left the window, also of an account that makes no more containers", function()
    local db = t.sgw.database_url
    -- One slot past the window, one that stays in it however slow this machine is.
    stack.psql(db, "INSERT INTO instagram_containers (social_account_id, made_at) VALUES "
      .. "('acc_idle', now() - interval '" .. (WINDOW + 5) .. " seconds'), ('acc_idle', now() + interval '1 hour')")
    job_queue.enqueue(db, "retention", 1, {}, 3)
    stack.eventually(function()
      return job_queue.count(db, "SELECT count(*) FROM jobs WHERE kind = 'retention'") == 0
    end, 30, 0.05, "the retention job to finish")
    assert.are.equal("1:true", stack.psql(db, "SELECT count(*) || ':' || bool_and(made_at > now()) "
      .. "FROM instagram_containers WHERE social_account_id = 'acc_idle'"))
  end)

  it("does not count a container Meta refused to make", function()
    fake.fail({ match = { method = "POST", path = "/{ig}/media" }, count = 1, error = { code = 100,
      subcode = 2207010, message = "(#100) The caption is too long" } })
    local refused = t.publish("Refused container")
    assert.are.equal("failed", t.wait(refused.operationId).status)
    local refused_at = containers_made()[#containers_made()].at
    local bodies = { t.publish("After a refusal A"), t.publish("After a refusal B") }
    for _, body in ipairs(bodies) do
      assert.are.equal("succeeded", t.wait(body.operationId).status)
      assert.are.equal(1, t.target(body.resource.postId).attempts)
    end
    -- Had the refusal taken a slot, the second would have waited for it to leave the window.
    local made = containers_made()
    assert.is_true(made[#made].at < refused_at + WINDOW, ("%.2f s after the refusal"):format(made[#made].at - refused_at))
    assert.are.same({ 1, 1 }, published({ "After a refusal A", "After a refusal B" }))
  end)

  it("counts a container whose answer was lost: it may exist", function()
    -- Made by the fake, but answered after sgw's 1 s time-out: the target
    -- fails (one attempt in this setup), the container stays counted.
    fake.fail({ match = { method = "POST", path = "/{ig}/media" }, count = 1, kind = "timeout_after_commit",
      delay_ms = 2000 })
    local lost = t.publish("Lost answer")
    assert.are.equal("failed", t.wait(lost.operationId).status)
    local lost_at = containers_made()[1].at
    -- One slot is left: one of these two waits until the lost one's container leaves the window.
    local bodies = { t.publish("After the lost answer A"), t.publish("After the lost answer B") }
    local waiting = t.waiting(bodies, "a target to wait for the container limit")
    assert.matches("(2 made by sgw)", waiting.error.message, 1, true)
    assert.is_true(math.abs(unix(waiting.nextAttemptAt) - (lost_at + WINDOW)) <= 1.5, waiting.nextAttemptAt)
    for _, body in ipairs(bodies) do assert.are.equal("succeeded", t.wait(body.operationId, 20).status) end
    assert.are.same({ 0, 1, 1 }, published({ "Lost answer", "After the lost answer A", "After the lost answer B" }))
  end)
end)

describe("An Instagram container not ready in time", function()
  local fake, t

  setup(function()
    fake = fake_graph.start({ latency_ms = 0 })
    t = start(fake, "instagram_slow", { ["clock.allow_control"] = true, ["publishing.retry.max_attempts"] = 2 })
  end)

  teardown(function()
    stack.cleanup()
    fake_graph.stop_all()
  end)

  it("is given up after the longest wait; the next attempt publishes a new container, once", function()
    fake.config({ container_ready_ms = 3600 * 1000 })
    local body = t.publish("Slow container")
    local first = stack.eventually(function()
      local id = stack.psql(t.sgw.database_url, "SELECT coalesce(adapter_state->>'container_id', '') FROM post_targets "
        .. "WHERE post_id = '" .. body.resource.postId .. "'")
      return id ~= "" and #fake.requests({ method = "GET", path = "/" .. id }) >= 1 and id
    end, 10, 0.05, "the first container to be asked about")
    -- Containers made from now on are ready at once; the first one never is.
    fake.config({ container_ready_ms = 0 })
    -- Past meta.instagram_container_max_wait_seconds (300) on sgw's clock.
    assert.are.equal(200, (t.sgw:admin("POST", "/clock/advance?seconds=301")))
    assert.are.equal("succeeded", t.wait(body.operationId).status)
    assert.are.equal(2, t.target(body.resource.postId).attempts)
    local made = fake.requests({ method = "POST", path = "/" .. t.ig_user .. "/media" })
    local published = fake.requests({ method = "POST", path = "/" .. t.ig_user .. "/media_publish" })
    assert.are.equal(2, #made)
    assert.are.equal(1, #published)
    assert.are_not.equal(first, published[1].params.creation_id)
    for _, r in ipairs(fake.requests({ method = "GET", path = "/" .. first })) do
      assert.is_true(r.seq < made[2].seq, "the given-up container asked about again")
    end
    assert.are.equal(1, #fake.published(t.ig_user).data)
  end)
end)

-- The Facebook and Instagram adapters run for real inside sgw (through the
-- fixture route POST /test/adapter/{platform}/{action}) against the fake
-- Graph API: what they publish, how they classify Meta's errors, and that a
-- time-out after Meta committed ends in exactly one post.
local stack = require "stack"
local fixture_root = require "fixture_root"
local fake_graph = require "fake_graph"
local cjson = require "cjson"

describe("platform adapters against the fake Graph API", function()
  local fake, sgw, page
  local tokens = {}

  setup(function()
    fake = fake_graph.start({ config = { require_appsecret_proof = true } })
    sgw = stack.start_sgw({ name = "platforms", set = {
      ["meta.app_secret"] = fake_graph.APP_SECRET,
      ["lua.root"] = fixture_root.create("platforms"),
      ["meta.graph_base_url"] = fake.graph_url,
      ["meta.request_timeout_seconds"] = 1,
      ["meta.instagram_container_first_poll_seconds"] = 1,
      ["meta.instagram_container_poll_seconds"] = 1,
    } })
  end)

  teardown(function()
    stack.cleanup()
    fake.stop()
  end)

  before_each(function()
    fake.reset()
    page = fake.add_page({ name = "Shop", instagram_business_account = true })
    tokens[#tokens + 1] = page.access_token
  end)

  -- Runs adapter.<action>(ctx) in sgw; returns the outcome, the error (resolve
  -- could not tell), the adapter_state after the call and the saves it made.
  local function run(platform, action, ctx)
    local status, body, _, raw = sgw.json("POST", "/test/adapter/" .. platform .. "/" .. action,
      { body = ctx, timeout = 30 })
    assert.equal(200, status, raw)
    local outcome = body.outcome ~= cjson.null and body.outcome or nil
    return outcome, body.error, body.adapter_state, body.saves
  end

  local function fb_ctx(content, image_url)
    return {
      account = { id = "acc_fb", platform = "facebook", platform_account_id = page.id,
        access_token = page.access_token, environment = "live" },
      post = { id = "post_1", content = content, image = image_url and { url = image_url, mime_type = "image/jpeg" } or nil },
      target = { id = "tgt_1", attempts = 1, attempt_started_at = os.time(), adapter_state = {} },
    }
  end

  local function ig_ctx(caption, state)
    return {
      account = { id = "acc_ig", platform = "instagram", platform_account_id = page.instagram_business_account.id,
        access_token = page.access_token, environment = "live" },
      post = { id = "post_2", content = { type = "image", message = caption },
        image = { url = fake.asset("tiny.jpg"), mime_type = "image/jpeg" } },
      target = { id = "tgt_2", attempts = 1, attempt_started_at = os.time(), adapter_state = state or {} },
    }
  end

  -- Calls publish again with the saved state while it answers retry_later,
  -- as the publish job does.
  local function publish_instagram(ctx)
    for _ = 1, 30 do
      local outcome, _, state = run("instagram", "publish", ctx)
      if outcome.status ~= "retry_later" then return outcome, ctx.target.adapter_state end
      assert.is_number(outcome.retry_in)
      ctx.target.adapter_state = state
      stack.sleep(outcome.retry_in)
    end
    error("the container never became ready")
  end

  local function count_requests(method, path)
    return #fake.requests({ method = method, path = path })
  end

  describe("Facebook", function()
    it("publishes text to the Page feed, with its permalink", function()
      local outcome = run("facebook", "publish", fb_ctx({ type = "text", message = "Hello from sgw" }))
      local made = fake.published(page.id)
      assert.equal(1, made.total)
      assert.same({ status = "published", platform_post_id = made.data[1].id,
        permalink_url = made.data[1].permalink_url }, outcome)
      assert.equal("Hello from sgw", made.data[1].message)
    end)

    it("publishes a link with its message", function()
      local outcome = run("facebook", "publish", fb_ctx({ type = "link", message = "Read this",
        link = "https://example.com/article?id=1&x=y" }))
      assert.equal("published", outcome.status)
      local made = fake.published(page.id).data[1]
      assert.equal("https://example.com/article?id=1&x=y", made.link)
      assert.equal("Read this", made.message)
    end)

    it("publishes a photo by URL with the message as caption", function()
      local outcome = run("facebook", "publish", fb_ctx({ type = "image", message = "A photo" }, fake.asset("tiny.jpg")))
      local made = fake.published(page.id).data[1]
      assert.equal("photo", made.kind)
      assert.equal("A photo", made.message)
      assert.equal(made.id, outcome.platform_post_id)
      assert.equal(made.permalink_url, outcome.permalink_url)
    end)

    it("classifies a rate limit, waiting as long as the usage header says", function()
      fake.fail({ match = { method = "POST", path = "/{page}/feed" }, preset = "rate_limited",
        error = { retry_after_minutes = 3 } })
      local outcome = run("facebook", "publish", fb_ctx({ type = "text", message = "Too many" }))
      assert.equal("error", outcome.status)
      assert.equal("rate_limited", outcome.error.code)
      assert.equal("32", outcome.error.platform_code)
      assert.equal(180, outcome.error.retry_after)
      assert.equal(0, fake.published().total)
    end)

    it("classifies an expired token", function()
      fake.expire_token(page.access_token)
      local outcome = run("facebook", "publish", fb_ctx({ type = "text", message = "Expired" }))
      assert.same({ code = "token_expired", platform_code = "190/463" },
        { code = outcome.error.code, platform_code = outcome.error.platform_code })
    end)

    it("takes a transient 500 and a bare 502 for an unknown outcome, which resolve settles", function()
      -- Meta answers these at times after the post went out: nothing says
      -- whether it did, so the next run asks before trying again.
      fake.fail({ match = { method = "POST", path = "/{page}/feed" }, preset = "transient" })
      local later = fb_ctx({ type = "text", message = "Later" })
      local outcome = run("facebook", "publish", later)
      assert.same({ "unknown", "platform_unavailable", "2" },
        { outcome.status, outcome.error.code, outcome.error.platform_code })
      fake.fail({ match = { method = "POST", path = "/{page}/feed" }, kind = "http", status = 502,
        body = "<html>Bad Gateway</html>" })
      outcome = run("facebook", "publish", later)
      assert.same({ "unknown", "platform_unavailable" }, { outcome.status, outcome.error.code })
      assert.equal(0, fake.published().total)
      assert.same({ status = "not_found" }, run("facebook", "resolve", later))
    end)

    it("resolves Meta's 500 after it created the post to the one post that exists", function()
      fake.fail({ match = { method = "POST", path = "/{page}/feed" }, kind = "error_after_commit", preset = "unknown" })
      local ctx = fb_ctx({ type = "text", message = "Answered 500 but created" })
      local outcome = run("facebook", "publish", ctx)
      assert.same({ "unknown", "platform_unavailable", "1" },
        { outcome.status, outcome.error.code, outcome.error.platform_code })
      local made = fake.published(page.id)
      assert.equal(1, made.total)
      assert.same({ status = "published", platform_post_id = made.data[1].id,
        permalink_url = made.data[1].permalink_url }, run("facebook", "resolve", ctx))
    end)

    it("resolves a time-out after Meta committed to the one post that exists", function()
      fake.fail({ match = { method = "POST", path = "/{page}/feed" }, kind = "timeout_after_commit", delay_ms = 3000 })
      local ctx = fb_ctx({ type = "text", message = "Did it go out?" })
      local outcome = run("facebook", "publish", ctx)
      assert.same({ "unknown", "platform_unavailable" }, { outcome.status, outcome.error.code })

      local found = run("facebook", "resolve", ctx)
      local made = fake.published(page.id)
      assert.equal(1, made.total)
      assert.same({ status = "published", platform_post_id = made.data[1].id,
        permalink_url = made.data[1].permalink_url }, found)
    end)

    it("resolves to not_found when nothing was published", function()
      run("facebook", "publish", fb_ctx({ type = "text", message = "Another post" }))
      assert.same({ status = "not_found" }, run("facebook", "resolve", fb_ctx({ type = "text", message = "Never sent" })))
    end)
  end)

  describe("Instagram", function()
    it("creates one container, waits for it and publishes it", function()
      local ctx = ig_ctx("First light #sgw")
      local outcome, state = publish_instagram(ctx)
      local made = fake.published(page.instagram_business_account.id)
      assert.equal(1, made.total)
      assert.same({ status = "published", platform_post_id = made.data[1].id, permalink_url = made.data[1].permalink }, outcome)
      assert.equal(made.data[1].container_id, state.container_id)
      assert.equal(1, count_requests("POST", "/" .. page.instagram_business_account.id .. "/media"))
    end)

    it("reuses the saved container on the next attempt instead of creating another", function()
      fake.fail({ match = { method = "POST", path = "/{ig}/media_publish" }, preset = "ig_server" })
      local ctx = ig_ctx("Second try")
      local outcome, state = publish_instagram(ctx)
      assert.same({ "unknown", "platform_unavailable", "-1/2207001" },
        { outcome.status, outcome.error.code, outcome.error.platform_code })
      assert.is_string(state.container_id)

      outcome = publish_instagram(ctx)
      assert.equal("published", outcome.status)
      local made = fake.published(page.instagram_business_account.id)
      assert.equal(1, made.total)
      assert.equal(state.container_id, made.data[1].container_id)
      assert.equal(1, count_requests("POST", "/" .. page.instagram_business_account.id .. "/media"))
    end)

    it("resolves a time-out of media_publish through the container, publishing nothing twice", function()
      fake.fail({ match = { method = "POST", path = "/{ig}/media_publish" }, kind = "timeout_after_commit", delay_ms = 3000 })
      local ctx = ig_ctx("Lost answer")
      local outcome = publish_instagram(ctx)
      assert.equal("unknown", outcome.status)

      local found = run("instagram", "resolve", ctx)
      local made = fake.published(page.instagram_business_account.id)
      assert.equal(1, made.total)
      assert.same({ status = "published", platform_post_id = made.data[1].id, permalink_url = made.data[1].permalink }, found)
      -- and a publish after all that finds the same media rather than posting again
      assert.same(found, publish_instagram(ctx))
      assert.equal(1, fake.published().total)
      assert.equal(1, count_requests("POST", "/" .. page.instagram_business_account.id .. "/media_publish"))
    end)

    it("resolves to not_found before a container exists or while it is unpublished", function()
      assert.same({ status = "not_found" }, run("instagram", "resolve", ig_ctx("Nothing yet")))
      local ctx = ig_ctx("Container only")
      local _, _, state = run("instagram", "publish", ctx)
      ctx.target.adapter_state = state
      assert.same({ status = "not_found" }, run("instagram", "resolve", ctx))
    end)

    it("rejects an image Instagram cannot take", function()
      local ctx = ig_ctx("Too wide")
      ctx.post.image.url = fake.asset("wide.jpg")
      local outcome = publish_instagram(ctx)
      assert.same({ "error", "media_rejected" }, { outcome.status, outcome.error.code })
      assert.truthy(outcome.error.message:find("2207009", 1, true), outcome.error.message)
      assert.equal(0, fake.published().total)
    end)

    it("classifies the daily publishing quota as a rate limit", function()
      fake.fail({ match = { method = "POST", path = "/{ig}/media_publish" }, preset = "ig_quota" })
      local outcome = publish_instagram(ig_ctx("Over quota"))
      assert.same({ "rate_limited", "9/2207042" }, { outcome.error.code, outcome.error.platform_code })
      assert.is_true(outcome.error.retry_after >= 60)
    end)
  end)

  it("never writes a token into sgw's log", function()
    local log = sgw.log()
    assert.truthy(log:find("graph_call", 1, true))
    for _, token in ipairs(tokens) do
      assert.falsy(log:find(token, 1, true))
    end
  end)
end)

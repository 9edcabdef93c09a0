-- lib/platforms/facebook.lua and instagram.lua against a scripted `http`:
-- each expected Graph call in order, with what it answers.
local fake_host = require "fake_host"
local cjson = require "cjson"
local graph = require "scripted_graph"

local BASE, TOKEN, T0 = graph.BASE, graph.TOKEN, 1700000000
local calls, script, on, ok, graph_error = graph.calls, graph.script, graph.on, graph.ok, graph.graph_error
local logged, saved, slots

local function install()
  fake_host.install({ ["meta.graph_base_url"] = BASE, ["meta.instagram_container_poll_seconds"] = 2,
    ["meta.instagram_container_first_poll_seconds"] = 5, ["meta.instagram_container_max_wait_seconds"] = 300 })
  clock.set(T0)
  logged, saved = {}, {}
  local function capture(level)
    return function(event, fields) logged[#logged + 1] = { level, event, cjson.encode(fields or {}) } end
  end
  _G.log = { debug = capture("debug"), info = capture("info"), warn = capture("warn"), error = capture("error") }
  graph.install()
  -- The quota reads Redis and PostgreSQL: its specs are integration specs
  -- (instagram_publishing_spec); here it always has room, and the container
  -- slots it gives and takes back are recorded.
  slots = {}
  package.loaded["platforms.instagram_quota"] = { check = function() end, published = function() end,
    is_quota_error = function() return false end,
    reserve_container = function(account, target_id)
      slots[#slots + 1] = { account = account.id, target = target_id, released = false }
      return #slots
    end,
    release_container = function(id) slots[id].released = true end }
  package.loaded["platforms.instagram"] = nil
end

local function ctx(content, extra)
  local c = {
    account = { id = "acc_1", platform = "facebook", platform_account_id = "1001", access_token = TOKEN, environment = "live" },
    post = { id = "post_1", content = content },
    target = { id = "tgt_1", attempts = 1, attempt_started_at = T0, adapter_state = {} },
    save_state = function(tbl)
      calls[#calls + 1] = { save_state = tbl }
      saved[#saved + 1] = tbl
    end,
  }
  for k, v in pairs(extra or {}) do c[k] = v end
  return c
end

local function assert_no_token_logged()
  for _, l in ipairs(logged) do
    assert.falsy(l[3]:find(TOKEN, 1, true), "token logged in " .. l[2])
  end
end

describe("facebook adapter", function()
  local facebook
  before_each(function()
    install()
    facebook = require "platforms.facebook"
  end)
  after_each(function() assert.same({}, script) end)

  it("publishes text to the feed, with the token as a parameter, and fetches the permalink", function()
    on("POST 1001/feed", ok({ id = "1001_555" }))
    on("GET 1001_555", ok({ id = "1001_555", permalink_url = "https://www.facebook.com/1001/posts/555" }))
    local outcome = facebook.publish(ctx({ type = "text", message = "Hello there" }))
    assert.same({ status = "published", platform_post_id = "1001_555",
      permalink_url = "https://www.facebook.com/1001/posts/555" }, outcome)
    assert.same({ message = "Hello there", access_token = TOKEN }, calls[1].params)
    assert.same({ fields = "permalink_url", access_token = TOKEN }, calls[2].params)
    assert.equal(30, calls[1].timeout)
    assert_no_token_logged()
  end)

  it("publishes a link with its message", function()
    on("POST 1001/feed", ok({ id = "1001_556" }))
    on("GET 1001_556", ok({ id = "1001_556", permalink_url = "https://fb/556" }))
    facebook.publish(ctx({ type = "link", message = "Read this", link = "https://example.com/a?b=c&d" }))
    assert.same({ message = "Read this", link = "https://example.com/a?b=c&d", access_token = TOKEN }, calls[1].params)
  end)

  it("publishes an image by URL with the message as caption, and keeps the page post id", function()
    on("POST 1001/photos", ok({ id = "777", post_id = "1001_778" }))
    on("GET 1001_778", ok({ permalink_url = "https://fb/778" }))
    local c = ctx({ type = "image", message = "A photo" })
    c.post.image = { url = "https://media.example/a.jpg", mime_type = "image/jpeg" }
    local outcome = facebook.publish(c)
    assert.equal("1001_778", outcome.platform_post_id)
    assert.same({ url = "https://media.example/a.jpg", caption = "A photo", access_token = TOKEN }, calls[1].params)
  end)

  it("does not fail a publish when only the permalink cannot be had", function()
    on("POST 1001/feed", ok({ id = "1001_557" }))
    on("GET 1001_557", { fail = "timeout" })
    assert.same({ status = "published", platform_post_id = "1001_557" },
      facebook.publish(ctx({ type = "text", message = "x" })))
  end)

  it("reports an unknown outcome when the answer to the publish never came", function()
    on("POST 1001/feed", { fail = "timeout" })
    local outcome = facebook.publish(ctx({ type = "text", message = "x" }))
    assert.equal("unknown", outcome.status)
    assert.equal("platform_unavailable", outcome.error.code)
    assert_no_token_logged()
  end)

  it("reports an unknown outcome when a publish answers 2xx with a body it cannot read", function()
    on("POST 1001/feed", { status = 200, body = "<html>ok</html>" })
    assert.equal("unknown", facebook.publish(ctx({ type = "text", message = "x" })).status)
  end)

  it("refuses an account id that would not make a Graph path, asking nothing", function()
    local c = ctx({ type = "text", message = "x" })
    c.account.platform_account_id = "1001?fields=x"
    assert.same("invalid_request", facebook.publish(c).error.code)
  end)

  it("reports an error when nothing was sent or Meta refused", function()
    on("POST 1001/feed", { fail = "connect" })
    assert.same("platform_unavailable", facebook.publish(ctx({ type = "text", message = "x" })).error.code)
    on("POST 1001/feed", graph_error(400, { message = "Error validating access token", code = 190, error_subcode = 463 }))
    assert.same({ status = "error", error = { code = "token_expired", message = "Error validating access token",
      platform_code = "190/463", platform = { code = 190, subcode = 463 } } }, facebook.publish(ctx({ type = "text", message = "x" })))
    on("POST 1001/feed", graph_error(400, { message = "(#100) Invalid parameter", code = 100 }))
    assert.equal("error", facebook.publish(ctx({ type = "text", message = "x" })).status)
    on("POST 1001/feed", graph_error(403, { message = "(#4) Application request limit reached", code = 4 }))
    assert.equal("error", facebook.publish(ctx({ type = "text", message = "x" })).status)
  end)

  it("reports a throttle Meta marks is_transient as a refusal with its wait, not an unknown outcome", function()
    on("POST 1001/feed", graph_error(400, { message = "(#32) Page request limit reached", code = 32, is_transient = true }))
    local throttled = facebook.publish(ctx({ type = "text", message = "x" }))
    assert.same({ "error", "rate_limited" }, { throttled.status, throttled.error.code })
    assert.is_number(throttled.error.retry_after)
  end)

  it("reports an unknown outcome when Meta answers with trouble on its side, which may follow a post made", function()
    local answers = {
      graph_error(500, { message = "Please retry", code = 2, is_transient = true }),
      graph_error(500, { message = "An unknown error has occurred.", code = 1 }),
      graph_error(400, { message = "Try again", code = 100, is_transient = true }),
      graph_error(503, { message = "Busy", code = 9999 }),
      { status = 502, body = "<html>Bad Gateway</html>" },
    }
    for _, answer in ipairs(answers) do
      on("POST 1001/feed", answer)
      local outcome = facebook.publish(ctx({ type = "text", message = "x" }))
      assert.equal("unknown", outcome.status, answer.body)
      assert.equal("platform_unavailable", outcome.error.code)
    end
    on("POST 1001/feed", graph_error(500, { message = "Please retry", code = 2, is_transient = true }))
    assert.equal("2", facebook.publish(ctx({ type = "text", message = "x" })).error.platform_code,
      "Meta's code stays with the unknown outcome")
  end)

  describe("resolve", function()
    local function post(id, message, t)
      return { id = id, message = message, created_time = os.date("!%Y-%m-%dT%H:%M:%S+0000", t) }
    end

    it("finds the post with exactly the message, created since the attempt began", function()
      on("GET 1001/published_posts", ok({ data = {
        post("1001_3", "Other", T0 + 5), post("1001_2", "Hello there", T0 + 2), post("1001_1", "Hello there", T0 - 3600),
      } }))
      on("GET 1001_2", ok({ permalink_url = "https://fb/2" }))
      local outcome = facebook.resolve(ctx({ type = "text", message = "Hello there" }))
      assert.same({ status = "published", platform_post_id = "1001_2", permalink_url = "https://fb/2" }, outcome)
      assert.same({ fields = "id,message,created_time", limit = "25", access_token = TOKEN }, calls[1].params)
    end)

    it("does not take an older post with the same message", function()
      on("GET 1001/published_posts", ok({ data = { post("1001_1", "Hello there", T0 - 3600) },
        paging = { cursors = { after = "c1" }, next = "https://graph.test/next" } }))
      assert.same({ status = "not_found" }, facebook.resolve(ctx({ type = "text", message = "Hello there" })))
    end)

    it("follows the pages while the posts are recent enough", function()
      on("GET 1001/published_posts", ok({ data = { post("1001_9", "New", T0 + 50) },
        paging = { cursors = { after = "c1" }, next = "https://graph.test/next" } }))
      on("GET 1001/published_posts", ok({ data = { post("1001_8", "Mine", T0 + 1) } }))
      on("GET 1001_8", ok({ permalink_url = "https://fb/8" }))
      assert.equal("1001_8", facebook.resolve(ctx({ type = "text", message = "Mine" })).platform_post_id)
      assert.equal("c1", calls[2].params.after)
    end)

    it("says it could not tell when the listing fails", function()
      on("GET 1001/published_posts", { fail = "timeout" })
      local outcome, err = facebook.resolve(ctx({ type = "text", message = "x" }))
      assert.is_nil(outcome)
      assert.equal("platform_unavailable", err.code)
    end)
  end)
end)

describe("instagram adapter", function()
  local instagram
  before_each(function()
    install()
    instagram = require "platforms.instagram"
  end)
  after_each(function() assert.same({}, script) end)

  local function ig_ctx(state)
    local c = ctx({ type = "image", message = "Caption #one" })
    c.account.platform = "instagram"
    c.account.platform_account_id = "17841400000000001"
    c.post.image = { url = "https://media.example/a.jpg", mime_type = "image/jpeg" }
    c.target.adapter_state = state or {}
    return c
  end

  it("creates a container, saves it before anything else, asks its status after the first wait and publishes it", function()
    on("POST 17841400000000001/media", ok({ id = "c-1" }))
    local c = ig_ctx()
    -- No status query the moment the container is made: Meta's one a minute
    -- is spent when it has had time to be ready.
    assert.same({ status = "retry_later", retry_in = 5 }, instagram.publish(c))
    assert.same({ image_url = "https://media.example/a.jpg", caption = "Caption #one", access_token = TOKEN }, calls[1].params)
    assert.same({ container_id = "c-1", container_created_at = T0 }, calls[2].save_state)
    assert.equal(2, #calls)
    assert.same({ { account = "acc_1", target = "tgt_1", released = false } }, slots)
    clock.set(T0 + 5)
    on("GET c-1", ok({ status_code = "FINISHED", id = "c-1" }))
    on("POST 17841400000000001/media_publish", ok({ id = "m-1" }))
    on("GET m-1", ok({ permalink = "https://www.instagram.com/p/abc/" }))
    assert.same({ status = "published", platform_post_id = "m-1", permalink_url = "https://www.instagram.com/p/abc/" },
      instagram.publish(c))
    assert.same({ fields = "status_code,status", access_token = TOKEN }, calls[3].params)
    assert.same({ creation_id = "c-1", access_token = TOKEN }, calls[4].params)
    assert_no_token_logged()
  end)

  it("reuses the saved container and never creates a second one", function()
    on("GET c-7", ok({ status_code = "FINISHED" }))
    on("POST 17841400000000001/media_publish", ok({ id = "m-7" }))
    on("GET m-7", ok({ permalink = "https://ig/7" }))
    local outcome = instagram.publish(ig_ctx({ container_id = "c-7", container_created_at = T0 - 10 }))
    assert.equal("m-7", outcome.platform_post_id)
    assert.same({}, saved)
    assert.same({}, slots)
  end)

  it("asks to be called again while the container is IN_PROGRESS", function()
    on("POST 17841400000000001/media", ok({ id = "c-2" }))
    local c = ig_ctx()
    assert.same({ status = "retry_later", retry_in = 5 }, instagram.publish(c))
    assert.equal("c-2", c.target.adapter_state.container_id)
    -- later, with the saved state: same container, then once per poll interval
    clock.set(T0 + 5)
    on("GET c-2", ok({ status_code = "IN_PROGRESS" }))
    assert.same({ status = "retry_later", retry_in = 2 }, instagram.publish(c))
    clock.set(T0 + 7)
    on("GET c-2", ok({ status_code = "FINISHED" }))
    on("POST 17841400000000001/media_publish", ok({ id = "m-2" }))
    on("GET m-2", ok({}))
    assert.same({ status = "published", platform_post_id = "m-2" }, instagram.publish(c))
    assert.equal(1, #saved)
  end)

  it("gives up on a container after the longest wait: the next attempt makes a new one", function()
    clock.set(T0 + 301)
    on("GET c-3", ok({ status_code = "IN_PROGRESS" }))
    local c = ig_ctx({ container_id = "c-3", container_created_at = T0 })
    local outcome = instagram.publish(c)
    assert.equal("error", outcome.status)
    assert.equal("platform_unavailable", outcome.error.code)
    assert.matches("new container", outcome.error.message)
    assert.same({ { container_id = false, container_created_at = false } }, saved)
    on("POST 17841400000000001/media", ok({ id = "c-3b" }))
    assert.same({ status = "retry_later", retry_in = 5 }, instagram.publish(c))
    assert.equal("c-3b", c.target.adapter_state.container_id)
  end)

  it("rejects media whose container ended in ERROR, with the subcode its status gives", function()
    for subcode, class in pairs({ [2207009] = "media_rejected", [2207010] = "content_rejected",
        [2207999] = "media_rejected" }) do
      on("GET c-4", ok({ status_code = "ERROR", status = "Error: Media upload has failed with error code " .. subcode }))
      local outcome = instagram.publish(ig_ctx({ container_id = "c-4", container_created_at = T0 }))
      assert.equal("error", outcome.status)
      assert.equal(class, outcome.error.code)
      assert.equal(subcode, outcome.error.platform.subcode)
      assert.matches("error code " .. subcode, outcome.error.message, 1, true)
    end
    on("GET c-4", ok({ status_code = "ERROR" }))
    assert.equal("media_rejected", instagram.publish(ig_ctx({ container_id = "c-4", container_created_at = T0 })).error.code)
  end)

  it("replaces a container that EXPIRED unpublished with a new one", function()
    on("GET c-4", ok({ status_code = "EXPIRED" }))
    on("POST 17841400000000001/media", ok({ id = "c-4b" }))
    local c = ig_ctx({ container_id = "c-4", container_created_at = T0 - 86400 })
    assert.same({ status = "retry_later", retry_in = 5 }, instagram.publish(c))
    assert.same({ container_id = false, container_created_at = false }, calls[2].save_state)
    assert.same({ container_id = "c-4b", container_created_at = T0 }, calls[4].save_state)
    assert.equal("c-4b", c.target.adapter_state.container_id)
    assert.same({ { account = "acc_1", target = "tgt_1", released = false } }, slots)
  end)

  it("replaces a container media_publish calls expired (2207020)", function()
    on("GET c-12", ok({ status_code = "FINISHED" }))
    on("POST 17841400000000001/media_publish", graph_error(400, { message = "The media you are trying to access has expired.",
      code = -2, error_subcode = 2207020 }))
    on("POST 17841400000000001/media", ok({ id = "c-12b" }))
    local c = ig_ctx({ container_id = "c-12", container_created_at = T0 })
    assert.same({ status = "retry_later", retry_in = 5 }, instagram.publish(c))
    assert.equal("c-12b", c.target.adapter_state.container_id)
  end)

  it("asks the container after a temporary publishing error (24/2207008) and tries again later", function()
    on("GET c-13", ok({ status_code = "FINISHED" }))
    on("POST 17841400000000001/media_publish", graph_error(400, { message = "Temporary error publishing a container",
      code = 24, error_subcode = 2207008 }))
    on("GET c-13", ok({ status_code = "FINISHED" }))
    local outcome = instagram.publish(ig_ctx({ container_id = "c-13", container_created_at = T0 }))
    assert.equal("error", outcome.status)
    assert.equal("platform_unavailable", outcome.error.code)
    assert.equal("24/2207008", outcome.error.platform_code)
  end)

  it("after suspected spam (4/2207051) finds the post if it went out anyway, else fails it for good", function()
    for _, status in ipairs({ "PUBLISHED", "FINISHED" }) do
      on("GET c-14", ok({ status_code = "FINISHED" }))
      on("POST 17841400000000001/media_publish", graph_error(400, { message = "We restrict certain activity",
        code = 4, error_subcode = 2207051 }))
      on("GET c-14", ok({ status_code = status }))
      if status == "PUBLISHED" then
        on("GET 17841400000000001/media", ok({ data = { { id = "m-14", caption = "Caption #one",
          timestamp = "2023-11-14T22:13:21+0000" } } }))
        on("GET m-14", ok({ permalink = "https://ig/14" }))
      end
      local outcome = instagram.publish(ig_ctx({ container_id = "c-14", container_created_at = T0 }))
      if status == "PUBLISHED" then
        assert.same({ status = "published", platform_post_id = "m-14", permalink_url = "https://ig/14" }, outcome)
      else
        assert.equal("error", outcome.status)
        assert.equal("content_rejected", outcome.error.code)
        assert.equal("4/2207051", outcome.error.platform_code)
      end
    end
  end)

  it("reports an unknown outcome when Meta says published already (9007/2207008) but the status lags", function()
    on("GET c-16", ok({ status_code = "FINISHED" }))
    on("POST 17841400000000001/media_publish", graph_error(400, { message = "Media ID is not available",
      code = 9007, error_subcode = 2207008 }))
    on("GET c-16", ok({ status_code = "FINISHED" }))
    assert.equal("unknown", instagram.publish(ig_ctx({ container_id = "c-16", container_created_at = T0 })).status)
  end)

  it("reports an unknown outcome when the container cannot be asked after such an error", function()
    on("GET c-15", ok({ status_code = "FINISHED" }))
    on("POST 17841400000000001/media_publish", graph_error(400, { message = "We restrict certain activity",
      code = 4, error_subcode = 2207051 }))
    on("GET c-15", { fail = "timeout" })
    assert.equal("unknown", instagram.publish(ig_ctx({ container_id = "c-15", container_created_at = T0 })).status)
  end)

  it("never publishes a PUBLISHED container again: it finds its media", function()
    on("GET c-5", ok({ status_code = "PUBLISHED" }))
    on("GET 17841400000000001/media", ok({ data = {
      { id = "m-other", caption = "Something else", timestamp = "2023-11-14T22:14:00+0000" },
      { id = "m-5", caption = "Caption #one", timestamp = "2023-11-14T22:13:30+0000" },
    } }))
    on("GET m-5", ok({ permalink = "https://ig/5" }))
    local outcome = instagram.publish(ig_ctx({ container_id = "c-5", container_created_at = T0 }))
    assert.same({ status = "published", platform_post_id = "m-5", permalink_url = "https://ig/5" }, outcome)
    assert.same({ fields = "id,caption,timestamp", limit = "25", access_token = TOKEN }, calls[2].params)
  end)

  it("reports an unknown outcome when media_publish times out", function()
    on("GET c-6", ok({ status_code = "FINISHED" }))
    on("POST 17841400000000001/media_publish", { fail = "timeout" })
    assert.equal("unknown", instagram.publish(ig_ctx({ container_id = "c-6", container_created_at = T0 })).status)
  end)

  it("finds the media when media_publish says the container was published already", function()
    on("GET c-11", ok({ status_code = "FINISHED" }))
    on("POST 17841400000000001/media_publish", graph_error(400, { message = "Media ID is not available",
      code = 9007, error_subcode = 2207008 }))
    on("GET c-11", ok({ status_code = "PUBLISHED" }))
    on("GET 17841400000000001/media", ok({ data = { { id = "m-11", caption = "Caption #one",
      timestamp = "2023-11-14T22:13:21+0000" } } }))
    on("GET m-11", ok({}))
    assert.same({ status = "published", platform_post_id = "m-11" },
      instagram.publish(ig_ctx({ container_id = "c-11", container_created_at = T0 })))
  end)

  it("treats a lost answer to the container creation as a plain error (no media can exist)", function()
    on("POST 17841400000000001/media", { fail = "timeout" })
    local outcome = instagram.publish(ig_ctx())
    assert.same("error", outcome.status)
    assert.same("platform_unavailable", outcome.error.code)
    assert.same({}, saved)
    -- The container may exist all the same: its slot stays taken.
    assert.same({ { account = "acc_1", target = "tgt_1", released = false } }, slots)
  end)

  it("classifies what Instagram refuses", function()
    on("POST 17841400000000001/media", graph_error(400, { message = "The aspect ratio is not supported.",
      code = 36003, error_subcode = 2207009 }))
    assert.same({ status = "error", error = { code = "media_rejected", message = "The aspect ratio is not supported.",
      platform_code = "36003/2207009", platform = { code = 36003, subcode = 2207009 } } }, instagram.publish(ig_ctx()))
    -- No container was made: the slot is given back.
    assert.same({ { account = "acc_1", target = "tgt_1", released = true } }, slots)
  end)

  describe("resolve", function()
    it("is not_found without a container, asking nothing", function()
      assert.same({ status = "not_found" }, instagram.resolve(ig_ctx()))
      assert.equal(0, #calls)
    end)

    it("is not_found while the container is unpublished, so the next attempt publishes it", function()
      for _, status in ipairs({ "FINISHED", "IN_PROGRESS" }) do
        on("GET c-8", ok({ status_code = status }))
        assert.same({ status = "not_found" }, instagram.resolve(ig_ctx({ container_id = "c-8" })))
      end
    end)

    it("is published when the container was, with the media's id", function()
      on("GET c-9", ok({ status_code = "PUBLISHED" }))
      on("GET 17841400000000001/media", ok({ data = { { id = "m-9", caption = "Caption #one", timestamp = "2023-11-14T22:13:25+0000" } } }))
      on("GET m-9", ok({ permalink = "https://ig/9" }))
      assert.same({ status = "published", platform_post_id = "m-9", permalink_url = "https://ig/9" },
        instagram.resolve(ig_ctx({ container_id = "c-9", container_created_at = T0 })))
    end)

    it("hands the status it read to publish in the same run, which does not ask again", function()
      on("GET c-11", ok({ status_code = "FINISHED" }))
      local c = ig_ctx({ container_id = "c-11", container_created_at = T0 })
      assert.same({ status = "not_found" }, instagram.resolve(c))
      on("POST 17841400000000001/media_publish", ok({ id = "m-11" }))
      on("GET m-11", ok({ permalink = "https://ig/11" }))
      assert.same({ status = "published", platform_post_id = "m-11", permalink_url = "https://ig/11" }, instagram.publish(c))
      -- Still waiting: publish says so from the same read; the next run asks anew.
      on("GET c-12", ok({ status_code = "IN_PROGRESS" }))
      c = ig_ctx({ container_id = "c-12", container_created_at = T0 })
      instagram.resolve(c)
      assert.same({ status = "retry_later", retry_in = 2 }, instagram.publish(c))
      on("GET c-12", ok({ status_code = "FINISHED" }))
      on("POST 17841400000000001/media_publish", ok({ id = "m-12" }))
      on("GET m-12", ok({ permalink = "https://ig/12" }))
      assert.equal("m-12", instagram.publish(c).platform_post_id)
    end)

    it("could not tell when the container cannot be read", function()
      on("GET c-10", { fail = "timeout" })
      local outcome, err = instagram.resolve(ig_ctx({ container_id = "c-10" }))
      assert.is_nil(outcome)
      assert.equal("platform_unavailable", err.code)
    end)
  end)
end)

describe("graph.parse_time", function()
  it("reads Graph times as UTC", function()
    local graph = require "platforms.graph"
    assert.equal(1742667604, graph.parse_time("2025-03-22T18:20:04+0000"))
    assert.equal(1742667604, graph.parse_time("2025-03-22T18:20:04Z"))
    assert.equal(1742667604, graph.parse_time("2025-03-22T20:20:04+02:00"))
    assert.equal(951782400, graph.parse_time("2000-02-29T00:00:00+0000"))
    assert.is_nil(graph.parse_time("yesterday"))
  end)
end)

-- The comment functions of lib/platforms/facebook.lua and instagram.lua
-- against a scripted `http`: the Graph calls they make (paths, parameters),
-- how answers become moderation outcomes, and how listings become
-- observations for comments.apply with the usage Meta reported.
local fake_host = require "fake_host"
local cjson = require "cjson"
local graph = require "scripted_graph"

local BASE, TOKEN, T0 = graph.BASE, graph.TOKEN, 1700000000
local calls, script, on, ok, graph_error = graph.calls, graph.script, graph.on, graph.ok, graph.graph_error

local function usage_headers(app, account)
  return { ["x-app-usage"] = cjson.encode({ call_count = app }),
    ["x-business-use-case-usage"] = cjson.encode({ ["1001"] = { { type = "pages", call_count = account } } }) }
end

local function install()
  fake_host.install({ ["meta.graph_base_url"] = BASE })
  clock.set(T0)
  graph.install({ strip_token = true })
end

local function ctx(platform, comment, extra)
  local c = {
    account = { id = "acc_1", platform = platform, platform_account_id = "1001", access_token = TOKEN,
      environment = "live", username = "shop" },
    comment = comment,
    target = { id = "tgt_1", platform_post_id = "1001_55" },
    version = T0,
  }
  for k, v in pairs(extra or {}) do c[k] = v end
  return c
end

describe("facebook comments", function()
  local facebook
  before_each(function()
    install()
    facebook = require "platforms.facebook"
  end)
  after_each(function() assert.same({}, script) end)

  local TOP = { platform_comment_id = "55_1", platform_post_id = "1001_55" }
  local NESTED = { platform_comment_id = "55_2", parent_platform_comment_id = "55_1", platform_post_id = "1001_55" }

  it("replies under the thread's top-level comment", function()
    on("POST 55_1/comments", ok({ id = "55_9" }))
    assert.same({ status = "done", platform_comment_id = "55_9", parent_platform_comment_id = "55_1" },
      facebook.reply(ctx("facebook", NESTED, { message = "Thanks" })))
    assert.same({ message = "Thanks" }, calls[1].params)
  end)

  it("calls a reply whose answer was lost unknown, and finds it afterwards by author, words and time", function()
    on("POST 55_1/comments", { fail = "timeout" })
    assert.equal("unknown", facebook.reply(ctx("facebook", TOP, { message = "Thanks" })).status)
    on("GET 55_1/comments", ok({ data = {
      { id = "55_8", message = "Thanks", from = { id = "1001" }, created_time = "2023-11-14T22:13:30+0000" }, -- claimed
      { id = "55_7", message = "Thanks", from = { id = "999" }, created_time = "2023-11-14T22:13:25+0000" },  -- a user
      { id = "55_6", message = "Thanks ", from = { id = "1001" }, created_time = "2023-11-14T22:13:21+0000" },
    } }))
    local found = facebook.find_reply(ctx("facebook", TOP, { message = "Thanks", since = T0, taken = { ["55_8"] = true } }))
    assert.same({ status = "done", platform_comment_id = "55_6", parent_platform_comment_id = "55_1" }, found)
    assert.equal("reverse_chronological", calls[2].params.order)
  end)

  it("reads can_hide, hides with is_hidden and counts a delete of a comment Meta no longer has as done", function()
    on("GET 55_2", ok({ id = "55_2", can_hide = true }))
    on("POST 55_2", ok({ success = true }))
    assert.same({ status = "done" }, facebook.set_hidden(ctx("facebook", NESTED), true))
    assert.same({ fields = "can_hide" }, calls[1].params)
    assert.same({ is_hidden = "true" }, calls[2].params)
    on("DELETE 55_2", graph_error(400, { code = 100, error_subcode = 33, message = "does not exist" }))
    assert.equal("done", facebook.delete(ctx("facebook", NESTED)).status)
  end)

  it("does not ask to hide a comment whose can_hide is false, nor one whose can_hide it could not read", function()
    on("GET 55_2", ok({ id = "55_2", can_hide = false }))
    local outcome = facebook.set_hidden(ctx("facebook", NESTED), true)
    assert.same({ "error", "content_rejected" }, { outcome.status, outcome.error.code })
    assert.matches("can_hide is false", outcome.error.message)
    on("GET 55_2", { fail = "timeout" })
    outcome = facebook.set_hidden(ctx("facebook", NESTED), true)
    assert.same({ "error", "platform_unavailable" }, { outcome.status, outcome.error.code })
    assert.equal(2, #calls, "no POST after either read")
  end)

  it("hides a comment the sync read as hideable without reading can_hide again", function()
    on("POST 55_2", ok({ success = true }))
    local hideable = { platform_comment_id = "55_2", parent_platform_comment_id = "55_1", can_hide = true }
    assert.same({ status = "done" }, facebook.set_hidden(ctx("facebook", hideable), true))
    assert.same({ "POST", { is_hidden = "true" } }, { calls[1].method, calls[1].params })
    assert.equal(1, #calls)
  end)

  it("shows a comment again without reading can_hide", function()
    on("POST 55_2", ok({ success = true }))
    assert.same({ status = "done" }, facebook.set_hidden(ctx("facebook", NESTED), false))
    assert.same({ "POST", { is_hidden = "false" } }, { calls[1].method, calls[1].params })
  end)

  it("passes Meta's refusal to hide on as an error, never an unknown outcome", function()
    on("GET 55_2", ok({ id = "55_2", can_hide = true }))
    on("POST 55_2", graph_error(400, { code = 100, message = "(#100) A Page cannot hide its own comments" }))
    local outcome = facebook.set_hidden(ctx("facebook", NESTED), true)
    assert.equal("error", outcome.status)
    assert.equal("100", outcome.error.platform_code)
    on("POST 55_2", { fail = "timeout" })
    outcome = facebook.set_hidden(ctx("facebook", NESTED), false)
    assert.same({ "error", "platform_unavailable" }, { outcome.status, outcome.error.code })
  end)

  it("fetches every comment of the post as observations, with the cursor and usage", function()
    on("GET 1001_55/comments", ok({ data = {
      { id = "55_1", message = "Hi", from = { id = "7", name = "Ann" }, created_time = "2023-11-14T22:00:00+0000",
        like_count = 2, is_hidden = false, can_hide = true },
      { id = "55_2", message = "Reply", from = { id = "1001", name = "Shop" }, created_time = "2023-11-14T22:01:00+0000",
        like_count = 0, is_hidden = true, can_hide = false, parent = { id = "55_1" } },
      { id = "55_3", created_time = "2023-11-14T22:02:00+0000" },
    }, paging = { cursors = { after = "CUR" }, next = "https://graph.test/next" } }, usage_headers(30, 85)))
    local page = facebook.fetch_comments(ctx("facebook"), "PREV")
    assert.same({ filter = "stream", order = "chronological", limit = "100", after = "PREV",
      fields = "id,message,from{id,name},created_time,like_count,is_hidden,can_hide,parent{id}" }, calls[1].params)
    assert.equal("CUR", page.cursor)
    assert.same({ app = 30, account = 85 }, page.usage)
    assert.same({ social_account_id = "acc_1", platform = "facebook", platform_post_id = "1001_55", version = T0,
      platform_comment_id = "55_1", text = "Hi", author_platform_id = "7", author_name = "Ann", is_from_account = false,
      is_hidden = false, can_hide = true, like_count = 2, created_at = T0 - 800 }, page.observations[1])
    assert.is_false(page.observations[2].can_hide)
    assert.is_nil(page.observations[3].can_hide, "unknown when Meta does not say")
    assert.is_true(page.observations[2].is_from_account)
    assert.is_true(page.observations[2].is_hidden)
    assert.equal("55_1", page.observations[2].parent_platform_comment_id)
    -- No `from` (the person did not allow it), no message (a sticker).
    assert.same({ "", false }, { page.observations[3].text, page.observations[3].is_from_account })
  end)

  it("returns the error and the usage of a failed fetch", function()
    on("GET 1001_55/comments", { status = 403, body = cjson.encode({ error = { code = 4, message = "limit" } }),
      headers = usage_headers(100, 10) })
    local page, err, usage = facebook.fetch_comments(ctx("facebook"))
    assert.is_nil(page)
    assert.equal("rate_limited", err.code)
    assert.equal(100, usage.app)
  end)
end)

describe("instagram comments", function()
  local instagram
  before_each(function()
    install()
    instagram = require "platforms.instagram"
  end)
  after_each(function() assert.same({}, script) end)

  local TOP = { platform_comment_id = "1790", platform_post_id = "1780" }

  it("replies with /replies and hides with hide", function()
    on("POST 1790/replies", ok({ id = "1791" }))
    assert.same({ status = "done", platform_comment_id = "1791", parent_platform_comment_id = "1790" },
      instagram.reply(ctx("instagram", TOP, { message = "Thanks" })))
    on("POST 1790", ok({ success = true }))
    instagram.set_hidden(ctx("instagram", TOP), false)
    assert.same({ hide = "false" }, calls[2].params)
  end)

  it("reads top-level comments with their replies, and the replies Meta did not embed", function()
    local ig = ctx("instagram")
    ig.target.platform_post_id = "1780"
    on("GET 1780/comments", ok({ data = {
      { id = "1790", text = "Top", username = "ann", from = { id = "5", username = "ann" }, timestamp = "2023-11-14T22:13:20+0000",
        like_count = 1, hidden = false, replies = { data = {
          { id = "1791", text = "Mine", username = "shop", from = { id = "1001", username = "shop" }, hidden = false },
        }, paging = { cursors = { after = "R1" }, next = "https://graph.test/more" } } },
    } }, usage_headers(10, 20)))
    on("GET 1790/replies", ok({ data = { { id = "1792", text = "Late", username = "bob", hidden = true } } },
      usage_headers(10, 90)))
    local page = instagram.fetch_comments(ig)
    assert.equal("R1", calls[2].params.after)
    assert.is_nil(page.cursor)
    assert.same({ app = 10, account = 90 }, page.usage)
    local by_id = {}
    for _, o in ipairs(page.observations) do by_id[o.platform_comment_id] = o end
    assert.same({ "Top", T0, false }, { by_id["1790"].text, by_id["1790"].created_at, by_id["1790"].is_from_account })
    assert.is_nil(by_id["1790"].parent_platform_comment_id)
    assert.same({ "1790", true }, { by_id["1791"].parent_platform_comment_id, by_id["1791"].is_from_account })
    assert.same({ "1790", true, "bob" }, { by_id["1792"].parent_platform_comment_id, by_id["1792"].is_hidden,
      by_id["1792"].author_name })
  end)

  it("finds a lost reply among all replies, oldest first", function()
    on("GET 1790/replies", ok({ data = {
      { id = "1791", text = "Old words", from = { id = "1001" }, timestamp = "2023-11-14T20:00:00+0000" },
      { id = "1792", text = "Thanks", username = "shop", timestamp = "2023-11-14T22:13:30+0000" },
    } }))
    assert.same("1792", instagram.find_reply(ctx("instagram", TOP, { message = "Thanks", since = T0 })).platform_comment_id)
  end)
end)

-- Meta deliveries to comment observations: every page feed verb, Instagram
-- comments and replies, batches, the account lookup, and what is skipped.
local mw = require "meta_webhooks"

local PAGE, IG = "104000000000001", "17841400000000001"
local POST = PAGE .. "_5550001"

-- The account lookup: one account per known Page / IG user, two for a Page
-- connected by two companies.
local function accounts(platform, id)
  if platform == "facebook" and id == PAGE then return { "acc_fb" } end
  if platform == "facebook" and id == "shared" then return { "acc_a", "acc_b" } end
  if platform == "instagram" and id == IG then return { "acc_ig" } end
  return {}
end

local function feed(value, entry)
  value.item = value.item or "comment"
  value.post_id = value.post_id or POST
  entry = entry or {}
  return { object = "page", entry = { { id = entry.id or PAGE, time = entry.time or 1742667607,
    changes = { { field = "feed", value = value } } } } }
end

local function one(delivery)
  local obs, skipped = mw.normalize(delivery, accounts)
  assert.are.equal(0, #skipped, skipped[1] and skipped[1].reason)
  assert.are.equal(1, #obs)
  return obs[1]
end

describe("meta_webhooks.normalize", function()
  it("turns a page comment add into a full observation", function()
    local o = one(feed({ verb = "add", comment_id = "5550001_901", parent_id = POST, created_time = 1742667604,
      from = { id = "999", name = "Ann" }, message = "Nice!" }))
    assert.are.same({
      social_account_id = "acc_fb", platform = "facebook", platform_post_id = POST,
      platform_comment_id = "5550001_901", text = "Nice!", author_platform_id = "999", author_name = "Ann",
      is_from_account = false, created_at = 1742667604, version = 1742667604, rank = 1,
    }, o)
  end)

  it("keeps the parent of a reply and marks the Page's own comments", function()
    local o = one(feed({ verb = "add", comment_id = "5550001_902", parent_id = "5550001_901", created_time = 1742667610,
      from = { id = PAGE, name = "The Page" }, message = "Thanks" }))
    assert.are.equal("5550001_901", o.parent_platform_comment_id)
    assert.is_true(o.is_from_account)
  end)

  it("treats a missing parent_id as top level and an add without message as empty text", function()
    local o = one(feed({ verb = "add", comment_id = "5550001_903", created_time = 1742667611, from = { id = "1" } }))
    assert.is_nil(o.parent_platform_comment_id)
    assert.are.equal("", o.text)
  end)

  it("carries only what an edit, a removal, a hide and an unhide know", function()
    local edit = one(feed({ verb = "edited", comment_id = "c1", parent_id = POST, created_time = 1742667700,
      from = { id = "999", name = "Ann" }, message = "Nicer!" }))
    assert.are.equal("Nicer!", edit.text)
    assert.is_nil(edit.created_at, "an edit does not say when the comment was created")
    assert.is_nil(edit.is_deleted)
    assert.is_nil(edit.is_hidden)
    assert.are.equal(1742667700, edit.version)

    local removed = one(feed({ verb = "remove", comment_id = "c1", parent_id = POST, created_time = 1742667800,
      from = { id = "999" } }))
    assert.is_true(removed.is_deleted)
    assert.is_nil(removed.text, "a removal keeps the text we have")
    assert.is_nil(removed.created_at)

    local hidden = one(feed({ verb = "hide", comment_id = "c1", created_time = 1742667900 }))
    assert.is_true(hidden.is_hidden)
    assert.is_nil(hidden.text)
    assert.is_nil(hidden.is_from_account, "no from: authorship unknown")
    local unhidden = one(feed({ verb = "unhide", comment_id = "c1", created_time = 1742668000 }))
    assert.is_false(unhidden.is_hidden)
  end)

  it("takes the author only from an add or an edit: a hide, unhide or removal names who made it", function()
    -- The Page hides, shows and deletes a user's comment: `from` is the Page.
    for _, verb in ipairs { "hide", "unhide", "remove" } do
      local o = one(feed({ verb = verb, comment_id = "c9", created_time = 1742668100,
        from = { id = PAGE, name = "The Page" } }))
      assert.is_nil(o.is_from_account, verb .. " says nothing of who wrote the comment")
      assert.is_nil(o.author_platform_id, verb)
      assert.is_nil(o.author_name, verb)
    end
    local edit = one(feed({ verb = "edited", comment_id = "c9", created_time = 1742668200,
      from = { id = "999", name = "Ann" }, message = "Edited by Ann" }))
    assert.are.equal("999", edit.author_platform_id)
    assert.is_false(edit.is_from_account)
  end)

  it("takes the other spellings of Meta's verb enum: edit as edited, delete as remove", function()
    local function at(verb) return one(feed({ verb = verb, comment_id = "c3", created_time = 1742667700, message = "y" })) end
    assert.are.same(at("edited"), at("edit"))
    assert.are.same(at("remove"), at("delete"))
    assert.is_true(at("delete").is_deleted)
  end)

  it("ranks the changes of one second: add, then edited, hide or unhide, then remove", function()
    local function at(verb) return one(feed({ verb = verb, comment_id = "c2", created_time = 1742667700, message = "x" })) end
    local add, edited, hide, unhide, remove = at("add"), at("edited"), at("hide"), at("unhide"), at("remove")
    for _, o in ipairs { add, edited, hide, unhide, remove } do assert.are.equal(1742667700, o.version) end
    assert.is_true(add.rank < edited.rank)
    assert.are.equal(edited.rank, hide.rank)
    assert.are.equal(hide.rank, unhide.rank)
    assert.is_true(edited.rank < remove.rank)
    -- The sync's observation of a fetch begun in that second ranks below all of them.
    local version, rank = require("comment_versions").fetched(1742667701.0)
    assert.are.equal(1742667700, version)
    assert.is_true(rank < add.rank)
  end)

  it("uses the entry time as the version when the change has no created_time", function()
    local o = one(feed({ verb = "hide", comment_id = "c1" }, { time = 1742669999 }))
    assert.are.equal(1742669999, o.version)
    local ms = one(feed({ verb = "hide", comment_id = "c1" }, { time = 1742669999123 }))
    assert.are.equal(1742669999.123, ms.version)
  end)

  it("normalizes Instagram comments and replies", function()
    local obs, skipped = mw.normalize({ object = "instagram", entry = { { id = IG, time = 1742667000, changes = {
      { field = "comments", value = { from = { id = "178400001", username = "ann" }, id = "17900000000000001",
        media = { id = "17850000000000001", media_product_type = "FEED" }, text = "Love it" } },
      { field = "comments", value = { from = { id = IG, username = "brand" }, id = "17900000000000002",
        parent_id = "17900000000000001", media = { id = "17850000000000001" }, text = "Thank you" } },
    } } } }, accounts)
    assert.are.equal(0, #skipped)
    assert.are.same({
      social_account_id = "acc_ig", platform = "instagram", platform_post_id = "17850000000000001",
      platform_comment_id = "17900000000000001", text = "Love it", author_platform_id = "178400001",
      author_name = "ann", is_from_account = false, created_guess = 1742667000, version = 1742667000 - 36 * 3600,
      rank = 1,
    }, obs[1], "dated as early as Meta's retries allow; the entry's time shown until a sync reads the comment's")
    assert.are.equal("17900000000000001", obs[2].parent_platform_comment_id)
    assert.is_true(obs[2].is_from_account)
  end)

  it("takes an Instagram change given as field and value on the entry (Instagram Login's shape)", function()
    local o = one({ object = "instagram", entry = { { id = IG, time = 1742667000, field = "comments",
      value = { from = { id = "178400001", username = "ann" }, id = "17900000000000004",
        media = { id = "17850000000000001" }, text = "Flat" } } } })
    assert.are.same({ "17900000000000004", "Flat", "17850000000000001" }, { o.platform_comment_id, o.text, o.platform_post_id })
    local obs, skipped = mw.normalize({ object = "instagram", entry = { { id = IG, time = 1742667000 } } }, accounts)
    assert.are.same({ 0, "entry without changes" }, { #obs, skipped[1].reason })
  end)

  it("takes an Instagram comment's own created_time when the delivery has one", function()
    local o = one({ object = "instagram", entry = { { id = IG, time = 1742667000, changes = {
      { field = "comments", value = { from = { id = "178400001", username = "ann" }, id = "17900000000000003",
        media = { id = "17850000000000001" }, text = "Late", created_time = 1742600000 } } } } } })
    assert.are.same({ 1742600000, 1742600000 }, { o.created_at, o.version })
  end)

  it("handles batched entries and changes, in order", function()
    local changes = {}
    for i = 1, 100 do
      changes[i] = { field = "feed", value = { item = "comment", verb = "add", post_id = POST,
        comment_id = "5550001_" .. i, parent_id = POST, created_time = 1742660000 + i, message = "c" .. i,
        from = { id = "u" .. i, name = "U" .. i } } }
    end
    local delivery = { object = "page", entry = {
      { id = PAGE, time = 1742670000, changes = changes },
      { id = PAGE, time = 1742670001, changes = { { field = "feed", value = { item = "comment", verb = "remove",
        post_id = POST, comment_id = "5550001_1", parent_id = POST, created_time = 1742670001 } } } },
    } }
    local obs, skipped = mw.normalize(delivery, accounts)
    assert.are.equal(0, #skipped)
    assert.are.equal(101, #obs)
    for i = 1, 100 do assert.are.equal("5550001_" .. i, obs[i].platform_comment_id) end
    assert.is_true(obs[101].is_deleted)
  end)

  it("gives one observation per account connected to the same Page", function()
    local obs = mw.normalize(feed({ verb = "add", comment_id = "c9", created_time = 1, message = "x" }, { id = "shared" }),
      accounts)
    assert.are.equal(2, #obs)
    assert.are.equal("acc_a", obs[1].social_account_id)
    assert.are.equal("acc_b", obs[2].social_account_id)
    assert.are_not.equal(obs[1], obs[2])
    assert.are.equal("c9", obs[2].platform_comment_id)
  end)

  it("skips and counts what it does not understand, keeping the rest", function()
    local delivery = { object = "page", entry = {
      { id = PAGE, time = 1742670000, changes = {
        { field = "feed", value = { item = "comment", verb = "add", post_id = POST, comment_id = "ok", created_time = 1, message = "kept" } },
        { field = "feed", value = { item = "reaction", verb = "add", post_id = POST, reaction_type = "like" } },
        { field = "feed", value = { item = "status", verb = "add", post_id = POST } },
        { field = "feed", value = { item = "comment", verb = "frobnicate", post_id = POST, comment_id = "x" } },
        { field = "feed", value = { item = "comment", verb = "add", post_id = POST } },
        { field = "feed", value = { item = "comment", verb = "add", comment_id = "x", post_id = 5 } },
        { field = "mention", value = { item = "comment", verb = "add", post_id = POST, comment_id = "x" } },
        { field = "feed" },
        "garbage",
      } },
      { id = "unknown-page", time = 1, changes = { { field = "feed", value = { item = "comment", verb = "add",
        post_id = POST, comment_id = "y", created_time = 1 } } } },
      { time = 1, changes = {} },
      { id = PAGE },
    } }
    local obs, skipped = mw.normalize(delivery, accounts)
    assert.are.equal(1, #obs)
    assert.are.equal("kept", obs[1].text)
    assert.are.equal(11, #skipped)
    assert.are.same({ entry = 1, change = 2, reason = "item reaction is not a comment" }, skipped[1])
    assert.matches("unknown verb", skipped[3].reason)
    assert.matches("missing comment_id", skipped[4].reason)
    assert.matches("missing post_id", skipped[5].reason)
    assert.matches("field mention", skipped[6].reason)
    assert.matches("no connected account", skipped[9].reason)
    assert.are.same({ entry = 3, reason = "missing entry id" }, skipped[10])
    assert.are.same({ entry = 4, reason = "entry without changes" }, skipped[11])
  end)

  it("skips Instagram changes without an id or a media id, and other Instagram fields", function()
    local obs, skipped = mw.normalize({ object = "instagram", entry = { { id = IG, time = 5, changes = {
      { field = "comments", value = { media = { id = "m" }, text = "no id" } },
      { field = "comments", value = { id = "c", text = "no media" } },
      { field = "mentions", value = { media_id = "m", comment_id = "c" } },
    } } } }, accounts)
    assert.are.equal(0, #obs)
    assert.are.equal(3, #skipped)
  end)

  it("skips a whole delivery of an unknown object, or one that is not an object", function()
    local obs, skipped = mw.normalize({ object = "user", entry = { { id = "1", changes = {} } } }, accounts)
    assert.are.equal(0, #obs)
    assert.are.same({ { reason = "object user is not handled" } }, skipped)
    obs, skipped = mw.normalize("text", accounts)
    assert.are.equal(0, #obs)
    assert.are.equal(1, #skipped)
    obs, skipped = mw.normalize({ object = "page" }, accounts)
    assert.are.equal("missing entry", skipped[1].reason)
  end)
end)

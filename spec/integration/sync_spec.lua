-- The periodic comment sync against the fake Graph API: comments whose
-- webhook never came (the fake drops it: deliver=false) show up after a run,
-- replies and hidden ones included, Instagram replies beyond those Meta
-- embeds too; webhooks and sync racing never make a comment twice; high
-- usage makes a run stop early and the next one goes on; a failing account
-- leaves the others alone; old posts are left out; the timer runs it.
-- Reconciliation: what the platform changed without a webhook (Instagram
-- sends none for edits, hides and deletions) is applied with a
-- social.comment.updated each; a comment gone from a complete pass is
-- deleted, never after an interrupted pass, never one stored during the pass.
local stack = require "stack"
local cjson = require "cjson.safe"
local comment_stack = require "comment_stack"

describe("comment sync", function()
  local env, fake

  setup(function()
    -- No grace: a comment stored before a run counts as known to its listing.
    env = comment_stack.start({ name = "sync", set = { ["sync.deletion_grace_seconds"] = 0 } })
    fake = env.fake
  end)

  teardown(function() comment_stack.stop() end)

  before_each(function()
    fake.clear_failures()
    fake.config({ app_usage_min = 0, buc_usage_min = 0, comment_replies_embedded = 25 })
  end)

  local function sync() env.run_job("sync_comments") end

  -- The comment in sgw with this platform id, or nil (no waiting).
  local function in_sgw(platform_comment_id)
    return env.count("SELECT count(*) FROM comments WHERE platform_comment_id = '" .. platform_comment_id .. "'")
  end

  local function missed(t, body)
    body.deliver = false
    body.from = body.from or { id = "100" .. math.random(1e6, 9e6), name = "Quiet User" }
    local made = t.fake_comment(body)
    assert.are.equal(cjson.null, made.delivery)
    return made.comment
  end

  local function graph_gets(path)
    return #fake.requests({ method = "GET", path = path })
  end

  -- social.comment.updated events stored for a comment (no waiting).
  local function updates(comment_id)
    return env.count("SELECT count(*) FROM events WHERE type = 'social.comment.updated' AND "
      .. "data->'comment'->>'id' = '" .. comment_id .. "'")
  end

  describe("one Page", function()
    local t, post, target

    setup(function()
      t = comment_stack.live_tenant(env, "Sync Co")
      post, target = t.publish_text("Synced post")
    end)

    it("finds what the webhooks missed: comments, replies, hidden ones, edits", function()
      local top = missed(t, { post_id = target.platformPostId, message = "Nobody told sgw", like_count = 3 })
      local reply = missed(t, { post_id = target.platformPostId, message = "Me neither", parent_id = top.id })
      local hidden = missed(t, { post_id = target.platformPostId, message = "Hide me" })
      fake.control("POST", "comments/" .. hidden.id .. "/hide", { deliver = false })
      env.deliveries_processed()
      assert.are.equal(0, in_sgw(top.id))
      sync()
      local got = t.comment(post, top.id, 1)
      assert.are.equal("Nobody told sgw", got.text)
      assert.are.equal(top.from.id, got.author.platformId)
      assert.are.equal("Quiet User", got.author.name)
      assert.are.equal(3, got.likeCount)
      assert.is_false(got.isFromAccount)
      assert.are.equal(cjson.null, got.parentPlatformCommentId)
      assert.are.equal(top.created_time:sub(1, 19), got.createdAt:sub(1, 19))
      assert.are.equal(top.id, t.comment(post, reply.id, 1).parentPlatformCommentId)
      assert.is_true(t.comment(post, hidden.id, 1).isHidden)
      -- An edit the webhook missed too.
      fake.control("POST", "comments/" .. top.id .. "/edit", { message = "Edited quietly", deliver = false })
      sync()
      assert.are.equal("Edited quietly", t.get(got.id).text)
      -- The client heard of the new comments as if by webhook, once each.
      assert.are.equal(1, env.count("SELECT count(*) FROM events WHERE type = 'social.comment.received' AND "
        .. "data->'comment'->>'platformCommentId' = '" .. top.id .. "'"))
      sync()
      assert.are.equal(1, env.count("SELECT count(*) FROM events WHERE type = 'social.comment.received' AND "
        .. "data->'comment'->>'platformCommentId' = '" .. top.id .. "'"))
    end)

    it("never makes a comment twice when webhooks and sync race", function()
      local ids = {}
      for i = 1, 20 do
        local made = t.fake_comment({ post_id = target.platformPostId, message = "Racing " .. i,
          from = { id = "2000" .. i, name = "Racer" } })
        ids[#ids + 1] = made.comment.id
        if i % 5 == 0 then env.sql("WITH j AS (INSERT INTO jobs (kind, payload) VALUES ('sync_comments', '{}') "
          .. "RETURNING id) SELECT pg_notify('sgw_jobs', '') FROM j") end
      end
      sync()
      env.deliveries_processed()
      for _, id in ipairs(ids) do
        assert.are.equal(1, in_sgw(id))
        assert.are.equal(1, env.count("SELECT count(*) FROM events WHERE type = 'social.comment.received' AND "
          .. "data->'comment'->>'platformCommentId' = '" .. id .. "'"), id)
      end
    end)

    it("keeps a webhook's change that came while an older sync was on its way", function()
      local c = missed(t, { post_id = target.platformPostId, message = "Before" })
      sync()
      local id = t.comment(post, c.id, 1).id
      -- The next sync reads the comment, and its answer takes 1.5 s to come
      -- back; meanwhile the user edits and hides, and those webhooks land.
      local listing = "/" .. target.platformPostId .. "/comments"
      fake.fail({ match = { method = "GET", path = listing }, count = 1, kind = "timeout_after_commit", delay_ms = 1500 })
      local seen = graph_gets(listing)
      local job = env.start_job("sync_comments")
      stack.eventually(function() return graph_gets(listing) > seen end, 10, 0.01, "the sync to read the comments")
      fake.control("POST", "comments/" .. c.id .. "/edit", { message = "After" })
      fake.control("POST", "comments/" .. c.id .. "/hide", {})
      env.deliveries_processed()
      env.wait_job(job)
      local got = t.get(id)
      assert.are.equal("After", got.text)
      assert.is_true(got.isHidden)
      -- And the next sync, which sees the same, changes nothing.
      sync()
      got = t.get(id)
      assert.are.equal("After", got.text)
      assert.is_true(got.isHidden)
    end)

    it("finds a comment deleted without a webhook deleted, and leaves the others", function()
      local gone = missed(t, { post_id = target.platformPostId, message = "Deleted quietly" })
      local stays = missed(t, { post_id = target.platformPostId, message = "Still here" })
      sync()
      local gone_id, stays_id = t.comment(post, gone.id, 1).id, t.comment(post, stays.id, 1).id
      local before = t.get(stays_id)
      fake.control("POST", "comments/" .. gone.id .. "/remove", { deliver = false })
      sync()
      local got = t.get(gone_id)
      assert.is_true(got.isDeleted)
      assert.are.equal("Deleted quietly", got.text, "the text stays")
      assert.are.same(before, t.get(stays_id))
      assert.are.equal(1, updates(gone_id))
      assert.are.equal(0, updates(stays_id))
      sync()
      assert.are.equal(1, updates(gone_id), "a deletion is announced once")
    end)

    it("does not delete a comment stored while the pass was reading", function()
      local quiet_post, quiet = t.publish_text("A post read slowly")
      local listing = "/" .. quiet.platformPostId .. "/comments"
      -- The listing is read at once and answered 1.5 s later; meanwhile a
      -- comment is made and its webhook lands: the listing cannot show it.
      fake.fail({ match = { method = "GET", path = listing }, count = 1, kind = "late_answer", delay_ms = 1500 })
      local seen = graph_gets(listing)
      local job = env.start_job("sync_comments")
      stack.eventually(function() return graph_gets(listing) > seen end, 10, 0.01, "the sync to read the comments")
      local made = t.fake_comment({ post_id = quiet.platformPostId, message = "Made during the pass",
        from = { id = "4000", name = "Timely" } })
      assert.are.equal(200, made.delivery.status)
      env.deliveries_processed()
      env.wait_job(job)
      local c = t.comment(quiet_post, made.comment.id, 1)
      assert.is_false(c.isDeleted)
      assert.are.equal(0, updates(c.id))
    end)

    it("stops an account above 80 % of its usage and goes on at the next run", function()
      local comments = {}
      for i = 1, 3 do
        local _, tg = t.publish_text("Busy page post " .. i)
        comments[i] = missed(t, { post_id = tg.platformPostId, message = "Busy " .. i })
      end
      fake.config({ buc_usage_min = 85 })
      local before = #fake.requests({ method = "GET" })
      sync()
      local found = 0
      for _, c in ipairs(comments) do found = found + in_sgw(c.id) end
      assert.are.equal(1, found, "synced under pressure")
      assert.are.equal(1, #fake.requests({ method = "GET" }) - before, "one Graph read, then it stopped")
      fake.config({ buc_usage_min = 0 })
      sync()
      for _, c in ipairs(comments) do assert.are.equal(1, in_sgw(c.id), c.message) end
    end)

    it("stops the whole run above 80 % of the app's usage", function()
      local other = comment_stack.live_tenant(env, "Other Page Co")
      local _, other_target = other.publish_text("Other page post")
      local a = missed(t, { post_id = target.platformPostId, message = "App busy A" })
      local b = missed(other, { post_id = other_target.platformPostId, message = "App busy B" })
      fake.config({ app_usage_min = 90 })
      local before = #fake.requests({ method = "GET" })
      sync()
      assert.are.equal(1, #fake.requests({ method = "GET" }) - before, "one Graph read, then it stopped")
      fake.config({ app_usage_min = 0 })
      sync()
      assert.are.equal(1, in_sgw(a.id))
      assert.are.equal(1, in_sgw(b.id))
    end)

    it("reads every page of a busy post", function()
      local _, busy = t.publish_text("Very busy post")
      local first, last
      for i = 1, 230 do
        local c = missed(t, { post_id = busy.platformPostId, message = "Crowd " .. i })
        first, last = first or c, c
      end
      local before = graph_gets("/" .. busy.platformPostId .. "/comments")
      sync()
      assert.are.equal(3, graph_gets("/" .. busy.platformPostId .. "/comments") - before, "100 per page")
      assert.are.equal(1, in_sgw(first.id))
      assert.are.equal(1, in_sgw(last.id))
      assert.are.equal(230, env.count("SELECT count(*) FROM comments WHERE platform_post_id = '" .. busy.platformPostId .. "'"))
    end)

    it("leaves out targets published before sync.lookback_days", function()
      local _, old = t.publish_text("An old post")
      env.sql("UPDATE post_targets SET published_at = now() - interval '8 days' WHERE id = '" .. old.id .. "'")
      local c = missed(t, { post_id = old.platformPostId, message = "On an old post" })
      local before = graph_gets("/" .. old.platformPostId .. "/comments")
      sync()
      assert.are.equal(0, in_sgw(c.id))
      assert.are.equal(before, graph_gets("/" .. old.platformPostId .. "/comments"))
    end)
  end)

  it("reads Instagram comments and every reply, beyond those Meta embeds", function()
    local t = comment_stack.live_tenant(env, "IG Sync Co")
    local post, target = t.publish_image("Synced IG post")
    fake.config({ comment_replies_embedded = 2 })
    local top = missed(t, { media_id = target.platformPostId, text = "First!", from = { id = "17841400000000009", username = "early" } })
    local replies = {}
    for i = 1, 5 do
      replies[i] = missed(t, { media_id = target.platformPostId, text = "Reply " .. i, parent_id = top.id,
        from = { id = "1784140000000001" .. i, username = "r" .. i } })
    end
    sync()
    local got = t.comment(post, top.id, 1)
    assert.are.equal("First!", got.text)
    assert.are.equal("early", got.author.name)
    for _, r in ipairs(replies) do
      local c = t.comment(post, r.id, 1)
      assert.are.equal(top.id, c.parentPlatformCommentId)
      assert.are.equal(r.message, c.text)
    end
    assert.is_true(graph_gets("/" .. top.id .. "/replies") >= 1, "the replies past the embedded ones were read")
  end)

  it("takes an Instagram comment's creation time from the sync, not from a late webhook's send time", function()
    local t = comment_stack.live_tenant(env, "IG Late Co")
    local post, target = t.publish_image("IG post with a late delivery")
    local made = t.fake_comment({ media_id = target.platformPostId, text = "Written two hours ago",
      written_seconds_ago = 7200, from = { id = "17841400000000077", username = "patient" } })
    assert.are.equal(200, made.delivery.status)
    local c = t.comment(post, made.comment.id)
    local function created_at()
      return tonumber(env.sql("SELECT extract(epoch FROM created_at) FROM comments WHERE id = '" .. c.id .. "'"))
    end
    assert.is_true(created_at() - made.comment.created > 7000, "until the sync, the delivery's time is shown")
    -- One delivered within the minute keeps its place in the listings: the sync does not move it.
    local prompt = t.fake_comment({ media_id = target.platformPostId, text = "Delivered soon enough",
      written_seconds_ago = 20, from = { id = "17841400000000078", username = "prompt" } })
    local shown = t.get(t.comment(post, prompt.comment.id).id).createdAt
    sync()
    assert.is_true(math.abs(created_at() - made.comment.created) < 1, "the comment's own timestamp after the sync")
    assert.are.equal("Written two hours ago", t.get(c.id).text)
    assert.are.equal(shown, t.get(t.comment(post, prompt.comment.id).id).createdAt)
  end)

  it("keeps the text a sync read when Meta retries an Instagram comment's creation later", function()
    local t = comment_stack.live_tenant(env, "IG Retry Co")
    local post, target = t.publish_image("IG post with a retried delivery")
    local made = t.fake_comment({ media_id = target.platformPostId, text = "First words",
      from = { id = "17841400000000079", username = "changer" } })
    assert.are.equal(200, made.delivery.status)
    local c = t.comment(post, made.comment.id)
    -- Edited on Instagram, which sends no webhook for it: the sync reads it.
    assert.are.equal(cjson.null, fake.control("POST", "comments/" .. made.comment.id .. "/edit",
      { message = "Second thoughts" }).delivery)
    sync()
    assert.are.equal("Second thoughts", t.get(c.id).text)
    -- Meta sends the creation's delivery again (as after a failed attempt):
    -- the first words, with a send time later than the sync.
    assert.are.equal(200, fake.control("POST", "comments/" .. made.comment.id .. "/redeliver", {}).delivery.status)
    env.deliveries_processed()
    assert.are.equal("Second thoughts", t.get(c.id).text)
  end)

  it("applies what Instagram never announces: deletions, hides, unhides and edits", function()
    local t = comment_stack.live_tenant(env, "IG Reconcile Co")
    local receiver = t.listen()
    local post, target = t.publish_image("Reconciled IG post")
    local n = 0
    local function ig(text, parent)
      n = n + 1
      return missed(t, { media_id = target.platformPostId, text = text, parent_id = parent and parent.id,
        from = { id = "178415000000000" .. n, username = "user" .. n } })
    end
    local gone = ig("Soon deleted")
    local c = { gone = gone, reply = ig("Goes with its thread", gone), hidden = ig("Soon hidden"),
      shown = ig("Hidden, then shown"), edited = ig("Before the edit"), calm = ig("Nothing happens to me") }
    fake.control("POST", "comments/" .. c.shown.id .. "/hide", {})
    sync()
    local id = {}
    for k, made in pairs(c) do id[k] = t.comment(post, made.id, 1).id end
    assert.is_true(t.get(id.shown).isHidden)
    local calm = t.get(id.calm)
    -- On the platform, without a word to sgw:
    for verb, made in pairs { remove = c.gone, hide = c.hidden, unhide = c.shown } do
      assert.are.equal(cjson.null, fake.control("POST", "comments/" .. made.id .. "/" .. verb, {}).delivery)
    end
    assert.are.equal(cjson.null, fake.control("POST", "comments/" .. c.edited.id .. "/edit",
      { message = "After the edit" }).delivery)
    sync()
    assert.is_true(t.get(id.gone).isDeleted)
    assert.is_true(t.get(id.reply).isDeleted, "a reply goes with its deleted comment")
    assert.is_true(t.get(id.hidden).isHidden)
    assert.is_false(t.get(id.shown).isHidden)
    assert.are.equal("After the edit", t.get(id.edited).text)
    assert.are.same(calm, t.get(id.calm))
    -- The client hears of each change once, with the comment as it now is.
    local heard = stack.eventually(function()
      local list = receiver.events("social.comment.updated")
      if #list >= 5 then return list end
    end, 30, 0.05, "five social.comment.updated events")
    local by_id = {}
    for _, e in ipairs(heard) do
      assert.is_nil(by_id[e.data.comment.id], "one event per comment")
      by_id[e.data.comment.id] = e.data.comment
    end
    for _, k in ipairs { "gone", "reply", "hidden", "shown", "edited" } do
      assert.are.same(t.get(id[k]), by_id[id[k]], k)
    end
    assert.is_nil(by_id[id.calm])
    sync()
    for _, k in ipairs { "gone", "reply", "hidden", "shown", "edited", "calm" } do
      assert.are.equal(k == "calm" and 0 or 1, updates(id[k]), k)
    end
  end)

  it("concludes nothing from an interrupted pass", function()
    local t = comment_stack.live_tenant(env, "IG Interrupted Co")
    local post, target = t.publish_image("Interrupted IG post")
    fake.config({ comment_replies_embedded = 1 })
    local victim = missed(t, { media_id = target.platformPostId, text = "Deleted before the pass" })
    local thread = missed(t, { media_id = target.platformPostId, text = "A thread" })
    for i = 1, 2 do missed(t, { media_id = target.platformPostId, text = "Reply " .. i, parent_id = thread.id }) end
    sync()
    local victim_id = t.comment(post, victim.id, 1).id
    fake.control("POST", "comments/" .. victim.id .. "/remove", {})
    -- The replies beyond the embedded one cannot be read this time: the pass
    -- stops before its end.
    fake.fail({ match = { method = "GET", path = "/" .. thread.id .. "/replies" }, count = 1, preset = "transient" })
    local reads = graph_gets("/" .. thread.id .. "/replies")
    sync()
    assert.are.equal(reads + 1, graph_gets("/" .. thread.id .. "/replies"), "the pass was interrupted")
    assert.is_false(t.get(victim_id).isDeleted)
    sync()
    assert.is_true(t.get(victim_id).isDeleted, "the next complete pass concludes")
  end)

  -- A company whose Page post has `n` comments, synced whole once; then the
  -- comments at `gone` (indexes) are deleted on Facebook without a webhook:
  -- only a whole pass can tell. Returns the tenant, the target, the comments
  -- as the fake made them, and the sgw ids of those deleted.
  local function busy_post(name, n, gone)
    local t = comment_stack.live_tenant(env, name)
    local post, busy = t.publish_text("A busy post of " .. name)
    local crowd = {}
    for i = 1, n do crowd[i] = missed(t, { post_id = busy.platformPostId, message = "Crowd " .. i }) end
    sync()
    local ids = {}
    for i, k in ipairs(gone) do
      ids[i] = t.comment(post, crowd[k].id, 1).id
      fake.control("POST", "comments/" .. crowd[k].id .. "/remove", { deliver = false })
    end
    function t.still_there(k) return not t.get(t.comment(post, crowd[k].id, 1).id).isDeleted end
    return t, busy, ids
  end

  it("concludes a pass that took several runs, once it has read the last page", function()
    local t, busy, ids = busy_post("Slow Pass Co", 201, { 3, 200 })
    local function reads() return graph_gets("/" .. busy.platformPostId .. "/comments") end
    -- 199 comments left: two pages of 100. Meta reports the account near its
    -- limit: the run reads one page and stops; the pass goes on from its
    -- cursor at the next run.
    fake.config({ buc_usage_min = 85 })
    local before = reads()
    sync()
    assert.are.equal(before + 1, reads(), "one page read")
    for _, id in ipairs(ids) do assert.is_false(t.get(id).isDeleted, "concluded before the last page") end
    fake.config({ buc_usage_min = 0 })
    sync()
    assert.are.equal(before + 2, reads(), "the pass went on at its second page")
    for _, id in ipairs(ids) do assert.is_true(t.get(id).isDeleted, "the pass over two runs concludes") end
    assert.is_true(t.still_there(100))
    assert.are.equal(0, env.count("SELECT count(*) FROM comment_sync_seen WHERE post_target_id = '" .. busy.id .. "'"))
  end)

  it("lets one of two runs that took the same target at once go on with it, and deletes only what is gone", function()
    local t, busy, ids = busy_post("Two Runs Co", 150, { 7 })
    -- Every read of this Page's comments takes a while, so that the runs overlap.
    fake.fail({ match = { method = "GET", account = t.page.id, path = "/{post}/comments" }, kind = "delay",
      delay_ms = 300, count = 4 })
    local a, b = env.start_job("sync_comments"), env.start_job("sync_comments")
    env.wait_job(a)
    env.wait_job(b)
    assert.is_true(t.get(ids[1]).isDeleted)
    assert.are.equal(1, env.count("SELECT count(*) FROM comments WHERE post_target_id = '" .. busy.id .. "' AND is_deleted"))
  end)

  it("concludes nothing from a pass a run of an older sgw went on with (it keeps nothing of what it saw)", function()
    local t, busy, ids = busy_post("Mixed Versions Co", 150, { 7 })
    fake.config({ buc_usage_min = 85 })
    sync()
    fake.config({ buc_usage_min = 0 })
    -- As an older sgw saves its cursor: without the pass's own.
    env.sql("UPDATE comment_sync SET pass_cursor = 'saved-by-an-older-sgw' WHERE post_target_id = '" .. busy.id .. "'")
    sync()
    assert.is_false(t.get(ids[1]).isDeleted, "concluded from a pass it did not see whole")
    sync()
    assert.is_true(t.get(ids[1]).isDeleted, "the next pass, read whole, concludes")
  end)

  it("goes on with the other accounts when one fails", function()
    local broken = comment_stack.live_tenant(env, "Broken Co")
    local fine = comment_stack.live_tenant(env, "Fine Co")
    local _, bt = broken.publish_text("Broken page post")
    local _, ft = fine.publish_text("Fine page post")
    local b = missed(broken, { post_id = bt.platformPostId, message = "Unreachable" })
    local f = missed(fine, { post_id = ft.platformPostId, message = "Reachable" })
    fake.expire_token(broken.page.access_token)
    fake.fail({ match = { method = "GET", account = fine.page.id, path = "/{post}/comments" }, count = 1, preset = "transient" })
    sync()
    -- A 500 for one read is not the end of that account next time either.
    sync()
    fake.expire_token(broken.page.access_token, false)
    assert.are.equal(0, in_sgw(b.id))
    assert.are.equal(1, in_sgw(f.id))
    assert.matches("expired", env.sql("SELECT error FROM comment_sync WHERE post_target_id = '" .. bt.id .. "'"))
  end)
end)

describe("comment sync timer", function()
  teardown(function() comment_stack.stop() end)

  it("runs every sync.interval_seconds by itself", function()
    local env = comment_stack.start({ name = "sync-timer", set = { ["sync.interval_seconds"] = 1 } })
    local t = comment_stack.live_tenant(env, "Timer Co")
    local post, target = t.publish_text("Timer post")
    local made = t.fake_comment({ post_id = target.platformPostId, message = "Found by the timer", deliver = false,
      from = { id = "3000", name = "Tim" } })
    assert.are.equal("Found by the timer", t.comment(post, made.comment.id, 10).text)
  end)
end)

-- The comment change feed (GET /api/v1/comments/changes) and history
-- (GET /api/v1/comments/{id}/history) against the real stack: each change
-- once, in each comment's order, with its actor; a transaction that commits
-- after a later one is still seen, once; concurrent moderation; events of
-- hides, unhides and deletions; tenancy; retention.
local stack = require "stack"
local cjson = require "cjson.safe"
local comment_stack = require "comment_stack"

describe("comment changes", function()
  local env, t, other, fb_target

  setup(function()
    env = comment_stack.start({ name = "changes" })
    t = comment_stack.test_tenant(env, "Feed Co")
    other = comment_stack.test_tenant(env, "Other Co")
    fb_target = select(2, t.publish(t.fb, { type = "text", message = "Feed post" }))
  end)

  teardown(function() comment_stack.stop() end)

  -- Follows the feed from `cursor` to its current end: changes, next cursor.
  local function follow(cursor, client, limit)
    client = client or t
    local out = {}
    while true do
      local status, page = client.api("GET", "/api/v1/comments/changes?limit=" .. (limit or 100)
        .. (cursor and "&cursor=" .. cursor or ""))
      assert.are.equal(200, status, cjson.encode(page))
      assert.is_string(page.nextCursor)
      for _, ch in ipairs(page.data) do out[#out + 1] = ch end
      if #page.data == 0 then
        assert.are.equal(cursor or page.nextCursor, page.nextCursor)
        return out, page.nextCursor
      end
      cursor = page.nextCursor
    end
  end

  local function kinds(changes, comment_id)
    local out = {}
    for _, ch in ipairs(changes) do
      if not comment_id or ch.comment.id == comment_id then out[#out + 1] = ch.type end
    end
    return out
  end

  local function moderate(method, path, body)
    local status
    status, body = t.api(method, path, body)
    assert.are.equal(202, status, cjson.encode(body))
    assert.are.equal("succeeded", t.wait(body.operationId).status)
    return body.operationId
  end

  it("shows each change once, in order, with the comment as it left it and who made it", function()
    local _, start = follow()
    local c = t.sandbox_comment(fb_target, "Buy cheap stuff")
    local hide = moderate("POST", "/api/v1/comments/" .. c.id .. "/hide")
    moderate("POST", "/api/v1/comments/" .. c.id .. "/unhide")
    local reply_op = moderate("POST", "/api/v1/comments/" .. c.id .. "/replies", { message = "No spam here" })
    moderate("DELETE", "/api/v1/comments/" .. c.id)
    local changes = follow(start, t, 2)
    assert.are.same({ "created", "hidden", "unhidden", "deleted" }, kinds(changes, c.id))
    local by_type = {}
    for i, ch in ipairs(changes) do
      by_type[ch.type] = by_type[ch.type] or ch
      if i > 1 then assert.is_true(ch.sequence > changes[i - 1].sequence) end
      assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$", ch.changedAt)
    end
    assert.are.same({ type = "platform" }, by_type.created.actor)
    assert.are.same({ type = "client", id = t.client_id }, by_type.hidden.actor)
    assert.is_true(by_type.hidden.comment.isHidden)
    assert.is_false(by_type.unhidden.comment.isHidden)
    assert.is_true(by_type.deleted.comment.isDeleted)
    assert.are.equal("Buy cheap stuff", by_type.created.comment.text)
    -- The reply is its own comment, `replied`, by the client that asked.
    local _, op = t.api("GET", "/api/v1/operations/" .. reply_op)
    local replied = by_type.replied
    assert.are.equal(op.result.commentId, replied.comment.id)
    assert.are.same({ type = "client", id = t.client_id }, replied.actor)
    assert.are.same({ "replied" }, kinds(changes, replied.comment.id))
    -- History: who asked for what, oldest first, with the outcome.
    local status, history = t.api("GET", "/api/v1/comments/" .. c.id .. "/history")
    assert.are.equal(200, status)
    local actions = {}
    for i, h in ipairs(history.data) do
      actions[i] = h.action
      assert.are.same({ type = "client", id = t.client_id }, h.actor)
      assert.are.equal("succeeded", h.outcome)
    end
    assert.are.same({ "comment.hide", "comment.unhide", "comment.reply", "comment.delete" }, actions)
    assert.are.equal(hide, history.data[1].operationId)
    -- A comment nobody moderated has an empty history; another company's is not found.
    _, history = t.api("GET", "/api/v1/comments/" .. replied.comment.id .. "/history")
    assert.are.same({}, history.data)
    status = other.api("GET", "/api/v1/comments/" .. c.id .. "/history")
    assert.are.equal(404, status)
  end)

  it("starts at the oldest retained change without a cursor and keeps the cursor when nothing is new", function()
    local all = follow()
    assert.is_true(#all > 0)
    assert.are.equal(1, all[1].sequence)
    local _, cursor = follow()
    local again, same = follow(cursor)
    assert.are.same({}, again)
    assert.are.equal(cursor, same)
    local status, problem = t.api("GET", "/api/v1/comments/changes?cursor=nope")
    assert.are.equal(400, status)
    assert.are.equal("invalid_cursor", problem.code)
    status, problem = t.api("GET", "/api/v1/comments/changes?limit=101")
    assert.are.equal(400, status)
    assert.are.equal("invalid_parameter", problem.code)
  end)

  it("sees a change whose transaction commits after a later one, once", function()
    local _, cursor = follow()
    local early = t.sandbox_comment(fb_target, "Early")
    local _, cursor_after_early = follow(cursor)
    -- A writer's transaction appends a change and stays open ...
    local url = env.sgw.database_url
    local writer = assert(io.popen("PGAPPNAME=feed-writer psql -X -q -v ON_ERROR_STOP=1 " .. stack.shell_quote(url)
      .. " >/dev/null 2>&1", "w"))
    writer:write(([[BEGIN;
      UPDATE comments SET text = 'Early, edited', state_changes = '{edited}' WHERE id = '%s';
      INSERT INTO comment_changes (company_id, environment, comment_id, type, actor_type, comment)
        SELECT company_id, environment, id, 'edited', 'platform', jsonb_build_object('id', id, 'text', text)
          FROM comments WHERE id = '%s';
    ]]):format(early.id, early.id))
    writer:flush()
    stack.eventually(function()
      return env.count([[SELECT count(*) FROM pg_stat_activity
          WHERE application_name = 'feed-writer' AND state = 'idle in transaction']]) == 1
    end, 10, 0.02, "the writer's transaction to be open")
    -- ... while later changes, with later ids, commit and are read.
    local late = t.sandbox_comment(fb_target, "Late")
    local seen, cursor2 = follow(cursor_after_early)
    assert.are.same({ "created" }, kinds(seen))
    assert.are.equal(late.id, seen[1].comment.id)
    -- The early transaction commits: the follower gets its change next, once.
    writer:write("COMMIT;\n")
    assert(writer:close())
    local rest = follow(cursor2)
    assert.are.same({ "edited" }, kinds(rest))
    assert.are.equal(early.id, rest[1].comment.id)
    assert.is_true(rest[1].sequence > seen[1].sequence)
    -- From the start: every change of the feed exactly once.
    local whole, ids = follow(cursor), {}
    for _, ch in ipairs(whole) do
      assert.is_nil(ids[ch.sequence])
      ids[ch.sequence] = true
    end
    assert.are.same({ "created", "created", "edited" }, kinds(whole))
  end)

  it("numbers concurrent moderation without gaps seen by a follower, each comment in its order", function()
    local _, cursor = follow()
    local list, ops = {}, {}
    for i = 1, 8 do list[i] = t.sandbox_comment(fb_target, "Concurrent " .. i) end
    -- Requests first, so the jobs run side by side while the follower reads.
    for i, c in ipairs(list) do
      local _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/hide")
      ops[i] = body.operationId
    end
    local got, seen = {}, {}
    stack.eventually(function()
      local page
      page, cursor = follow(cursor, t, 3)
      for _, ch in ipairs(page) do
        local key = ch.comment.id .. "/" .. ch.type
        assert.is_nil(seen[key], "repeated " .. key)
        seen[key] = true
        got[#got + 1] = ch
      end
      return #got == 16
    end, 30, 0.05, "16 changes")
    for _, c in ipairs(list) do assert.are.same({ "created", "hidden" }, kinds(got, c.id)) end
    for _, op in ipairs(ops) do assert.are.equal("succeeded", t.wait(op).status) end
  end)

  it("emits social.comment.hidden, .unhidden and .deleted once per change, to the post's client", function()
    local c = t.sandbox_comment(fb_target, "Eventful")
    moderate("POST", "/api/v1/comments/" .. c.id .. "/hide")
    moderate("POST", "/api/v1/comments/" .. c.id .. "/hide")  -- already hidden: no change, no event
    moderate("POST", "/api/v1/comments/" .. c.id .. "/unhide")
    moderate("DELETE", "/api/v1/comments/" .. c.id)
    local rows = env.sql("SELECT type || ' ' || client_id FROM events WHERE data->'comment'->>'id' = '" .. c.id
      .. "' AND type <> 'social.comment.received' ORDER BY created_at, id")
    local got = {}
    for ty, client in rows:gmatch("([%w%.]+) (%S+)") do
      assert.are.equal(t.client_id, client)
      got[#got + 1] = ty
    end
    assert.are.same({ "social.comment.hidden", "social.comment.unhidden", "social.comment.deleted" }, got)
    local data = cjson.decode(env.sql("SELECT data FROM events WHERE type = 'social.comment.hidden' AND data->'comment'->>'id' = '"
      .. c.id .. "'"))
    assert.are.same({ "comment" }, (function() local k = {} for x in pairs(data) do k[#k + 1] = x end return k end)())
    assert.is_true(data.comment.isHidden)
  end)

  it("shows one company nothing of another's", function()
    local theirs = follow(nil, other)
    local mine = {}
    for _, ch in ipairs(follow()) do mine[ch.comment.id] = true end
    for _, ch in ipairs(theirs) do assert.is_nil(mine[ch.comment.id]) end
    other.sandbox_comment(select(2, other.publish(other.fb, { type = "text", message = "Theirs" })), "Their comment")
    theirs = follow(nil, other)
    assert.are.same({ "created" }, kinds(theirs))
    assert.are.equal(1, theirs[1].sequence)
  end)

  it("forgets numbered changes past retention.comment_changes_days; followers go on from their cursor", function()
    local _, cursor = follow()
    local before = follow()
    env.sql("UPDATE comment_changes SET changed_at = now() - interval '40 days' WHERE sequence <= 2")
    env.run_job("retention")
    local after = follow()
    assert.are.equal(#before - 2, #after)
    assert.are.equal(3, after[1].sequence)
    t.sandbox_comment(fb_target, "After retention")
    local new = follow(cursor)
    assert.are.same({ "created" }, kinds(new))
    assert.are.equal(before[#before].sequence + 1, new[1].sequence)
  end)
end)

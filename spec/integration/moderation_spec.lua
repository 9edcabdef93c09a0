-- Moderation end to end: replies, hide, unhide and delete as operations,
-- through the sandbox simulator (refusals before any operation, tenancy,
-- scripted failures, idempotency) and through the real adapters against the
-- fake Graph API (a reply whose answer is lost is made once, the platform's
-- state follows, rate limits and outages are retried, the client hears of
-- its reply).
local stack = require "stack"
local cjson = require "cjson.safe"
local comment_stack = require "comment_stack"

local REPLY_KEYS = { "commentId", "operationId", "reply" }

local keys, field_codes = comment_stack.keys, comment_stack.field_codes

describe("moderation", function()
  local env

  setup(function()
    env = comment_stack.start({ name = "moderation", set = { ["clock.allow_control"] = true } })
  end)

  teardown(function() comment_stack.stop() end)

  local function moderation_ops()
    return env.count("SELECT count(*) FROM operations WHERE type LIKE 'comment.%'")
  end

  local function replied_event(op_id)
    local data = env.sql("SELECT data FROM events WHERE type = 'social.comment.replied' AND data->>'operationId' = '"
      .. op_id .. "'")
    return cjson.decode(data)
  end

  describe("in the sandbox", function()
    local t, other, fb_post, fb_target, ig_target

    setup(function()
      t = comment_stack.test_tenant(env, "Sandbox Co")
      other = comment_stack.test_tenant(env, "Other Co")
      fb_post, fb_target = t.publish(t.fb, { type = "text", message = "Moderate me" })
      ig_target = select(2, t.publish(t.ig, { type = "image", message = "IG",
        imageUrl = env.fake:instagram_image() }))
    end)

    it("replies: a 202 operation, then the reply as a comment of the account, and the event", function()
      local c = t.sandbox_comment(fb_target, "Do you ship to Norway?", { authorName = "Ann" })
      local status, body, headers = t.api("POST", "/api/v1/comments/" .. c.id .. "/replies", { message = "We do!" })
      assert.are.equal(202, status, cjson.encode(body))
      assert.are.same({ "operationId", "requestId", "resource", "status" }, keys(body))
      assert.are.equal(headers["x-request-id"], body.requestId)
      assert.matches("^op_", body.operationId)
      assert.are.equal("queued", body.status)
      assert.are.same({ commentId = c.id }, body.resource)

      local op = t.wait(body.operationId)
      assert.are.equal("succeeded", op.status, cjson.encode(op))
      assert.are.equal("comment.reply", op.type)
      assert.are.same({ type = "comment", id = c.id }, op.resource)
      assert.are.same({ "commentId", "platformCommentId" }, keys(op.result))
      local reply = t.get(op.result.commentId)
      assert.are.equal(op.result.platformCommentId, reply.platformCommentId)
      assert.matches("^" .. fb_target.platformPostId:match("_(%d+)$") .. "_%d+$", reply.platformCommentId)
      assert.are.equal("We do!", reply.text)
      assert.is_true(reply.isFromAccount)
      assert.are.equal(c.platformCommentId, reply.parentPlatformCommentId)
      assert.are.equal(fb_target.id, reply.postTargetId)
      assert.are.equal(t.fb.platformAccountId, reply.author.platformId)

      local event = replied_event(body.operationId)
      assert.are.same(REPLY_KEYS, keys(event))
      assert.are.equal(c.id, event.commentId)
      assert.are.same(reply, event.reply)
      -- The reply is listed with the post's comments, once.
      local n = 0
      for _, x in ipairs(t.comments(fb_post)) do if x.id == reply.id then n = n + 1 end end
      assert.are.equal(1, n)
    end)

    it("hides, unhides and deletes, and the comment shows each state", function()
      local c = t.sandbox_comment(fb_target, "Spam spam spam")
      for _, step in ipairs { { "POST", "/hide", "comment.hide", "isHidden", true },
          { "POST", "/unhide", "comment.unhide", "isHidden", false }, { "DELETE", "", "comment.delete", "isDeleted", true } } do
        local method, suffix, kind, field, want = table.unpack(step)
        local status, body = t.api(method, "/api/v1/comments/" .. c.id .. suffix)
        assert.are.equal(202, status, cjson.encode(body))
        assert.are.same({ commentId = c.id }, body.resource)
        local op = t.wait(body.operationId)
        assert.are.equal("succeeded", op.status, cjson.encode(op))
        assert.are.equal(kind, op.type)
        assert.are.same({ commentId = c.id }, op.result)
        assert.are.equal(want, t.get(c.id)[field], kind)
      end
      -- Deleted stays listed, deleted.
      local found
      for _, x in ipairs(t.comments(fb_post)) do if x.id == c.id then found = x end end
      assert.is_true(found.isDeleted)
    end)

    it("refuses to touch a deleted comment with 409 comment_deleted, before any operation", function()
      local c = t.sandbox_comment(fb_target, "Soon gone")
      local _, body = t.api("DELETE", "/api/v1/comments/" .. c.id)
      t.wait(body.operationId)
      local before = moderation_ops()
      for _, call in ipairs { { "POST", "/replies", { message = "Too late" } }, { "POST", "/hide" }, { "POST", "/unhide" },
          { "DELETE", "" } } do
        local status, problem, headers = t.api(call[1], "/api/v1/comments/" .. c.id .. call[2], call[3])
        assert.are.equal(409, status, call[1] .. call[2])
        assert.are.equal("comment_deleted", problem.code)
        assert.are.equal("application/problem+json", headers["content-type"])
      end
      assert.are.equal(before, moderation_ops())
    end)

    it("refuses to hide or unhide the account's own comment with 422, before any operation", function()
      local own = t.sandbox_comment(fb_target, "Thanks everyone!", { fromAccount = true })
      assert.is_true(own.isFromAccount)
      local before = moderation_ops()
      for _, action in ipairs { "hide", "unhide" } do
        local status, problem = t.api("POST", "/api/v1/comments/" .. own.id .. "/" .. action)
        assert.are.equal(422, status)
        assert.are.equal("cannot_hide_own_comment", problem.code)
      end
      assert.are.equal(before, moderation_ops())
      -- Replying to it and deleting it are fine.
      local status = t.api("POST", "/api/v1/comments/" .. own.id .. "/replies", { message = "And thanks again" })
      assert.are.equal(202, status)
    end)

    it("checks the reply: present, 1 to 8000 characters (Instagram 2200), nothing unknown", function()
      local fb_c = t.sandbox_comment(fb_target, "Question")
      local ig_c = t.sandbox_comment(ig_target, "Question on IG")
      local before = moderation_ops()
      local cases = {
        { fb_c, {}, "/message", "required" },
        { fb_c, { message = "" }, "/message", "required" },
        { fb_c, { message = 42 }, "/message", "invalid_value" },
        { fb_c, { message = string.rep("a", 8001) }, "/message", "too_long" },
        { ig_c, { message = string.rep("a", 2201) }, "/message", "too_long" },
        { fb_c, { message = "hi", extra = true }, "/extra", "unknown_field" },
      }
      for i, case in ipairs(cases) do
        local status, problem = t.api("POST", "/api/v1/comments/" .. case[1].id .. "/replies", case[2])
        assert.are.equal(422, status, "case " .. i)
        assert.are.equal("validation_failed", problem.code)
        assert.are.equal(case[4], field_codes(problem)[case[3]], "case " .. i .. ": " .. cjson.encode(problem))
      end
      -- A body on hide is refused the same way.
      local status, problem = t.api("POST", "/api/v1/comments/" .. fb_c.id .. "/hide", { reason = "spam" })
      assert.are.equal(422, status)
      assert.are.equal("unknown_field", field_codes(problem)["/reason"])
      assert.are.equal(before, moderation_ops())
      -- At the limits it is fine, in characters rather than bytes.
      assert.are.equal(202, (t.api("POST", "/api/v1/comments/" .. fb_c.id .. "/replies", { message = string.rep("ä", 8000) })))
      assert.are.equal(202, (t.api("POST", "/api/v1/comments/" .. ig_c.id .. "/replies", { message = string.rep("a", 2200) })))
    end)

    it("refuses an Instagram reply to a reply with a clear 422", function()
      local top = t.sandbox_comment(ig_target, "Top")
      local nested = t.sandbox_comment(ig_target, "Nested", { parentCommentId = top.id })
      local status, problem = t.api("POST", "/api/v1/comments/" .. nested.id .. "/replies", { message = "Hi" })
      assert.are.equal(422, status)
      assert.are.equal("validation_failed", problem.code)
      assert.are.equal("not_top_level_comment", problem.errors[1].code)
      assert.matches("top%-level", problem.errors[1].message)
      -- On Facebook the reply joins the thread of the top-level comment.
      local fb_top = t.sandbox_comment(fb_target, "FB top")
      local fb_nested = t.sandbox_comment(fb_target, "FB nested", { parentCommentId = fb_top.id })
      local _, body = t.api("POST", "/api/v1/comments/" .. fb_nested.id .. "/replies", { message = "Hi there" })
      local op = t.wait(body.operationId)
      assert.are.equal(fb_top.platformCommentId, t.get(op.result.commentId).parentPlatformCommentId)
    end)

    it("answers 404 for another company's comment, one of the other environment, or none", function()
      local c = t.sandbox_comment(fb_target, "Mine")
      local live = comment_stack.live_tenant(env, "Live neighbour")
      local before = moderation_ops()
      for _, who in ipairs { other, live } do
        for _, call in ipairs { { "POST", "/replies", { message = "Hi" } }, { "POST", "/hide" }, { "POST", "/unhide" },
            { "DELETE", "" } } do
          local status, problem = who.api(call[1], "/api/v1/comments/" .. c.id .. call[2], call[3])
          assert.are.equal(404, status)
          assert.are.equal("not_found", problem.code)
        end
      end
      assert.are.equal(404, (t.api("POST", "/api/v1/comments/cmt_nope/hide")))
      assert.are.equal(before, moderation_ops())
      assert.is_false(t.get(c.id).isHidden)
    end)

    it("needs comments:write", function()
      local c = t.sandbox_comment(fb_target, "Scoped")
      local key = stack.cli(env.sgw, { "client", "create", "--company", t.company, "--environment", "test",
        "--scopes", "comments:read" }).apiKey
      local status, problem, headers = env.sgw:json("POST", "/api/v1/comments/" .. c.id .. "/hide",
        { headers = { ["X-Api-Key"] = key } })
      assert.are.equal(403, status)
      assert.are.equal("insufficient_scope", problem.code)
      assert.matches('scope="comments:write"', headers["www-authenticate"])
    end)

    it("replays a request with the same Idempotency-Key and creates one operation", function()
      local c = t.sandbox_comment(fb_target, "Once please")
      local h = { ["Idempotency-Key"] = "reply-once-" .. math.random(1, 1e9) }
      local s1, b1 = t.api("POST", "/api/v1/comments/" .. c.id .. "/replies", { message = "Once" }, h)
      local s2, b2, h2 = t.api("POST", "/api/v1/comments/" .. c.id .. "/replies", { message = "Once" }, h)
      assert.are.equal(202, s1)
      assert.are.equal(202, s2)
      assert.are.equal(b1.operationId, b2.operationId)
      assert.are.equal("true", h2["idempotent-replayed"])
      t.wait(b1.operationId)
      local replies = env.count("SELECT count(*) FROM comments WHERE parent_platform_comment_id = '"
        .. c.platformCommentId .. "' AND text = 'Once'")
      assert.are.equal(1, replies)
    end)

    it("retries a scripted rate limit and fails at once on a final error", function()
      local c = t.sandbox_comment(fb_target, "Flaky platform")
      assert.are.equal(201, (t.api("POST", "/api/v1/sandbox/failures",
        { socialAccountId = t.fb.id, error = "rate_limited", count = 1 })))
      local _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/hide")
      assert.are.equal("succeeded", t.wait(body.operationId).status)
      assert.is_true(t.get(c.id).isHidden)

      assert.are.equal(201, (t.api("POST", "/api/v1/sandbox/failures",
        { socialAccountId = t.fb.id, error = "permission_missing", count = 1 })))
      _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/replies", { message = "Not allowed" })
      local op = t.wait(body.operationId)
      assert.are.equal("failed", op.status)
      assert.are.equal("permission_missing", op.error.code)
      assert.are.equal(cjson.null, op.result)
      assert.are.equal(0, env.count("SELECT count(*) FROM comments WHERE text = 'Not allowed'"))
    end)
  end)

  describe("against the fake Graph API", function()
    local t, post, target, fake

    -- A comment someone writes on the Page post, as sgw learns it by webhook.
    local function user_comment(message, extra)
      local body = { post_id = target.platformPostId, message = message, from = { id = "100" .. math.random(1e6, 9e6), name = "Ann" } }
      for k, v in pairs(extra or {}) do body[k] = v end
      local made = t.fake_comment(body)
      assert.are.equal(200, made.delivery.status, cjson.encode(made))
      return t.comment(post, made.comment.id), made.comment
    end

    -- The fake's comments under a comment, deleted ones left out.
    local function fake_replies(parent_id, message)
      local out = {}
      for _, c in ipairs(fake.control("GET", "comments?post_id=" .. target.platformPostId).data) do
        if c.parent_id == parent_id and not c.deleted and (not message or c.message == message) then out[#out + 1] = c end
      end
      return out
    end

    local function fake_state(id) return env.fake_state(id) end

    setup(function()
      fake = env.fake
      t = comment_stack.live_tenant(env, "Live Co")
      post, target = t.publish_text("Live post to moderate")
    end)

    before_each(function() fake.clear_failures() end)

    -- Replies to a new user comment while `failure` hits the reply's POST
    -- once: the operation succeeds with the one reply Meta has, sent once.
    local function reply_through(question, answer, failure)
      local c, fc = user_comment(question)
      failure.match, failure.count = { method = "POST", path = "/{comment}/comments" }, 1
      fake.fail(failure)
      local _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/replies", { message = answer })
      local op = t.wait(body.operationId, 30)
      assert.are.equal("succeeded", op.status, cjson.encode(op))
      local made = fake_replies(fc.id, answer)
      assert.are.equal(1, #made, "replies on the platform")
      assert.are.equal(made[1].id, op.result.platformCommentId)
      assert.are.equal(1, #fake.requests({ method = "POST", path = "/" .. fc.id .. "/comments" }), "one POST only")
      return c, fc, op, made, body
    end

    it("replies once even when the answer is lost after the platform made the reply", function()
      local c, fc, op, made, body = reply_through("Is this in stock?", "Yes, in stock.",
        { kind = "timeout_after_commit", delay_ms = 4000 })
      -- One comment in sgw too, although Meta's webhook for the Page's own reply races the job.
      env.deliveries_processed()
      local n = 0
      for _, x in ipairs(t.comments(post)) do
        if x.platformCommentId == made[1].id then
          n = n + 1
          assert.is_true(x.isFromAccount)
          assert.are.equal(fc.id, x.parentPlatformCommentId)
          assert.are.equal("Yes, in stock.", x.text)
        end
      end
      assert.are.equal(1, n)
      local event = replied_event(body.operationId)
      assert.are.equal(op.result.commentId, event.reply.id)
      assert.are.equal(c.id, event.commentId)
    end)

    it("replies once when Meta answers 500 after it made the reply", function()
      reply_through("Do you ship abroad?", "Yes, worldwide.", { kind = "error_after_commit", preset = "unknown" })
    end)

    it("does not take another operation's identical reply for its own", function()
      local c, fc = user_comment("Two identical answers?")
      local _, first = t.api("POST", "/api/v1/comments/" .. c.id .. "/replies", { message = "Same words" })
      assert.are.equal("succeeded", t.wait(first.operationId).status)
      -- The connection drops before Meta does anything: the first reply, same
      -- words and a minute old, must not pass for this one's.
      fake.fail({ match = { method = "POST", path = "/{comment}/comments" }, count = 1, kind = "close" })
      local _, second = t.api("POST", "/api/v1/comments/" .. c.id .. "/replies", { message = "Same words" })
      local op = t.wait(second.operationId, 30)
      assert.are.equal("succeeded", op.status)
      assert.are.equal(2, #fake_replies(fc.id, "Same words"))
      assert.are_not.equal(t.wait(first.operationId).result.platformCommentId, op.result.platformCommentId)
    end)

    it("hides, unhides and deletes on the platform, and the comment follows", function()
      local c, fc = user_comment("Buy followers at spam.example")
      local _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/hide")
      assert.are.equal("succeeded", t.wait(body.operationId).status)
      assert.is_true(fake_state(fc.id).hidden)
      assert.is_true(t.get(c.id).isHidden)
      -- Meta asks for can_hide to be read first.
      local read = fake.requests({ method = "GET", path = "/" .. fc.id })
      assert.are.equal(1, #read)
      assert.are.equal("can_hide", read[1].params.fields)
      _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/unhide")
      assert.are.equal("succeeded", t.wait(body.operationId).status)
      assert.is_false(fake_state(fc.id).hidden)
      assert.is_false(t.get(c.id).isHidden)
      _, body = t.api("DELETE", "/api/v1/comments/" .. c.id)
      assert.are.equal("succeeded", t.wait(body.operationId).status)
      assert.is_true(fake_state(fc.id).deleted)
      -- Meta's "remove" webhook for it changes nothing more.
      env.deliveries_processed()
      local got = t.get(c.id)
      assert.is_true(got.isDeleted)
      assert.is_false(got.isHidden)
    end)

    it("counts a delete whose answer was lost as done", function()
      local c, fc = user_comment("Delete me twice")
      fake.fail({ match = { method = "DELETE", path = "/{comment}" }, count = 1, kind = "timeout_after_commit", delay_ms = 4000 })
      local _, body = t.api("DELETE", "/api/v1/comments/" .. c.id)
      assert.are.equal("succeeded", t.wait(body.operationId, 30).status)
      assert.is_true(fake_state(fc.id).deleted)
      assert.is_true(t.get(c.id).isDeleted)
    end)

    it("keeps a user's comment theirs when the Page's hide comes back from the Page", function()
      local c, fc = user_comment("Is this a scam?")
      -- Hidden in Facebook itself: Meta's delivery names the Page as `from`.
      local hid = fake.control("POST", "comments/" .. fc.id .. "/hide", {})
      assert.are.equal(200, hid.delivery.status, cjson.encode(hid))
      local sent = fake.control("GET", "webhooks").deliveries
      local value = cjson.decode(sent[#sent].body).entry[1].changes[1].value
      assert.are.same({ "hide", t.page.id }, { value.verb, value.from.id })
      env.deliveries_processed()
      local now = t.get(c.id)
      assert.is_true(now.isHidden)
      assert.is_false(now.isFromAccount)
      assert.are.same(c.author, now.author)
      -- Still someone else's: it may be shown again.
      local _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/unhide")
      assert.are.equal("succeeded", t.wait(body.operationId).status)
      assert.is_false(fake_state(fc.id).hidden)
    end)

    it("hides a comment the sync read as hideable without reading can_hide again", function()
      local made = t.fake_comment({ post_id = target.platformPostId, message = "Only the sync saw me",
        from = { id = "100" .. math.random(1e6, 9e6), name = "Quiet" }, deliver = false })
      env.run_job("sync_comments")
      local c = t.comment(post, made.comment.id)
      local _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/hide")
      assert.are.equal("succeeded", t.wait(body.operationId).status)
      assert.is_true(fake_state(made.comment.id).hidden)
      assert.are.equal(0, #fake.requests({ method = "GET", path = "/" .. made.comment.id }))
    end)

    it("does not ask to hide a comment Meta says cannot be hidden, and says why", function()
      local c, fc = user_comment("Not hideable", { can_hide = false })
      local _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/hide")
      local op = t.wait(body.operationId)
      assert.are.equal("failed", op.status)
      assert.are.equal("content_rejected", op.error.code)
      assert.matches("can_hide is false", op.error.message)
      assert.are.equal(0, #fake.requests({ method = "POST", path = "/" .. fc.id }))
      assert.is_false(fake_state(fc.id).hidden)
      assert.is_false(t.get(c.id).isHidden)
    end)

    it("refuses to hide the Page's own reply before asking Meta", function()
      local c = user_comment("Thank you!")
      local _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/replies", { message = "You are welcome" })
      local op = t.wait(body.operationId)
      local status, problem = t.api("POST", "/api/v1/comments/" .. op.result.commentId .. "/hide")
      assert.are.equal(422, status)
      assert.are.equal("cannot_hide_own_comment", problem.code)
    end)

    it("replies on Instagram under the comment", function()
      local ig_post, ig_target = t.publish_image("Instagram post")
      local made = t.fake_comment({ media_id = ig_target.platformPostId, text = "Love it",
        from = { id = "17841400000000001", username = "fan" } })
      local c = t.comment(ig_post, made.comment.id)
      local _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/replies", { message = "Thanks, fan!" })
      local op = t.wait(body.operationId)
      assert.are.equal("succeeded", op.status, cjson.encode(op))
      local reply = t.get(op.result.commentId)
      assert.are.equal(made.comment.id, reply.parentPlatformCommentId)
      assert.is_true(reply.isFromAccount)
      local on_platform
      for _, x in ipairs(fake.control("GET", "comments?media_id=" .. ig_target.platformPostId).data) do
        if x.id == reply.platformCommentId then on_platform = x end
      end
      assert.are.equal(made.comment.id, on_platform.parent_id)
      assert.are.equal("Thanks, fan!", on_platform.message)
    end)

    it("retries a platform outage and fails at once on an expired token", function()
      local c, fc = user_comment("Outage?")
      fake.fail({ match = { method = "POST", path = "/{comment}" }, count = 2, preset = "transient" })
      local _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/hide")
      assert.are.equal("succeeded", t.wait(body.operationId, 30).status)
      assert.is_true(fake_state(fc.id).hidden)
      assert.are.equal(3, #fake.requests({ method = "POST", path = "/" .. fc.id }))

      fake.expire_token(t.page.access_token)
      _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/unhide")
      local op = t.wait(body.operationId)
      fake.expire_token(t.page.access_token, false)
      -- The refused token made the account reconnect_required: connect it again.
      stack.cli(env.sgw, { "account", "add", "--company", t.company, "--environment", "live", "--platform", "facebook",
        "--platform-account-id", t.page.id, "--name", t.page.name, "--access-token", t.page.access_token })
      assert.are.equal("failed", op.status)
      assert.are.equal("token_expired", op.error.code)
      assert.matches("^190", op.error.platformCode)
      assert.is_true(fake_state(fc.id).hidden)
      assert.is_true(t.get(c.id).isHidden)
    end)

    it("keeps Meta's code, subcode, trace id and user message on a failed operation", function()
      local c, fc = user_comment("Refused hide")
      fake.fail({ match = { method = "POST", path = "/{comment}" }, count = 1, error = { code = 100,
        subcode = 2534022, message = "(#100) Invalid parameter", error_user_msg = "This comment cannot be hidden." } })
      local _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/hide")
      local op = t.wait(body.operationId)
      assert.are.equal("failed", op.status)
      assert.are.equal("100/2534022", op.error.platformCode)
      local sent = fake.requests({ method = "POST", path = "/" .. fc.id })
      assert.are.same({ code = 100, subcode = 2534022, userMessage = "This comment cannot be hidden." },
        { code = op.error.platform.code, subcode = op.error.platform.subcode, userMessage = op.error.platform.userMessage })
      assert.matches("^[%w_%-]+$", op.error.platform.fbtraceId)
      assert.are.equal(1, #sent)
      assert.is_false(t.get(c.id).isHidden)
    end)

    -- Last: it moves sgw's clock forward for good.
    it("waits as long as a rate-limited platform asks, then replies", function()
      local c, fc = user_comment("Rate limits?")
      fake.fail({ match = { method = "POST", path = "/{comment}/comments" }, count = 1, preset = "rate_limited" })
      local _, body = t.api("POST", "/api/v1/comments/" .. c.id .. "/replies", { message = "After the wait" })
      stack.eventually(function()
        return #fake.requests({ method = "POST", path = "/" .. fc.id .. "/comments" }) == 1
          and env.count("SELECT count(*) FROM jobs WHERE kind = 'moderate_comment' AND run_at > now() + interval '30 seconds'") == 1
      end, 10, 0.05, "the reply to wait for the platform")
      local _, op = t.api("GET", "/api/v1/operations/" .. body.operationId)
      assert.are.equal("running", op.status)
      assert.are.equal(0, #fake_replies(fc.id, "After the wait"))
      -- Meanwhile a hide on the same account waits too, without a call to Meta.
      local c2, fc2 = user_comment("Hide me after the wait")
      local calls = #fake.requests({ method = "POST" })
      local _, hide = t.api("POST", "/api/v1/comments/" .. c2.id .. "/hide")
      stack.eventually(function()
        return env.count("SELECT count(*) FROM jobs WHERE kind = 'moderate_comment' AND run_at > now() + interval '30 seconds'") == 2
      end, 10, 0.05, "the hide to wait for the pause")
      assert.are.equal(calls, #fake.requests({ method = "POST" }))
      assert.are.equal(0, env.count("SELECT attempts FROM jobs WHERE payload->>'operationId' = '" .. hide.operationId
        .. "'"), "a wait for the pause is no attempt")
      assert.are.equal(200, (env.sgw:admin("POST", "/clock/advance?seconds=61")))
      op = t.wait(body.operationId, 30)
      assert.are.equal("succeeded", op.status, cjson.encode(op))
      assert.are.equal(1, #fake_replies(fc.id, "After the wait"))
      assert.are.equal("succeeded", t.wait(hide.operationId, 30).status)
      assert.is_true(t.get(c2.id).isHidden)
      assert.are.equal(1, #fake.requests({ method = "POST", path = "/" .. fc2.id }))
    end)
  end)
end)

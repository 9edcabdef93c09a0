-- Bulk comment actions end to end (POST /api/v1/comments/bulk): Facebook and
-- Instagram comments against the fake Graph API, refusals before anything
-- starts, Idempotency-Key, a platform failure on one item, deleted comments
-- skipped, company isolation, and a restart in the middle of a bulk.
local stack = require "stack"
local cjson = require "cjson.safe"
local comment_stack = require "comment_stack"

local keys, field_codes = comment_stack.keys, comment_stack.field_codes

describe("bulk comment actions", function()
  local env, t, fake, post, target, ig_post, ig_target

  setup(function()
    -- A Graph call may take long: the restart case holds one open while sgw dies.
    env = comment_stack.start({ name = "comments-bulk", set = { ["meta.request_timeout_seconds"] = 20 } })
    fake = env.fake
    t = comment_stack.live_tenant(env, "Bulk Co")
    post, target = t.publish_text("Bulk moderation")
    ig_post, ig_target = t.publish_image("Bulk on Instagram")
  end)

  teardown(function() comment_stack.stop() end)

  before_each(function() fake.clear_failures() end)

  local function bulk_ops()
    return env.count("SELECT count(*) FROM operations WHERE type = 'comment.bulk'")
  end

  local function item_ops()
    return env.count("SELECT count(*) FROM operations WHERE type LIKE 'comment.%' AND type <> 'comment.bulk'")
  end

  -- Someone's comment on the Page post (or the Instagram media), as sgw learns it.
  local function fb_comment(message)
    local made = t.fake_comment({ post_id = target.platformPostId, message = message,
      from = { id = "100" .. math.random(1e6, 9e6), name = "Ann" } })
    return t.comment(post, made.comment.id), made.comment
  end

  local function ig_comment(text)
    local made = t.fake_comment({ media_id = ig_target.platformPostId, text = text,
      from = { id = "1784" .. math.random(1e9, 9e9), username = "fan" } })
    return t.comment(ig_post, made.comment.id), made.comment
  end

  local function fake_state(id) return env.fake_state(id) end

  local function bulk(action, ids, headers)
    return t.api("POST", "/api/v1/comments/bulk", { action = action, commentIds = ids }, headers)
  end

  it("hides then deletes Facebook and Instagram comments, one operation per bulk, every item reported", function()
    local a, fa = fb_comment("Spam one")
    local b, fb = fb_comment("Spam two")
    local c, fc = ig_comment("Spam on Instagram")
    local status, body, headers = bulk("hide", { a.id, c.id, b.id })
    assert.are.equal(202, status, cjson.encode(body))
    assert.are.same({ "operationId", "requestId", "status" }, keys(body))
    assert.are.equal(headers["x-request-id"], body.requestId)
    assert.are.equal("queued", body.status)

    local op = t.wait(body.operationId)
    assert.are.equal("succeeded", op.status, cjson.encode(op))
    assert.are.equal("comment.bulk", op.type)
    assert.are.same({ type = "comment_bulk", id = body.operationId }, op.resource)
    assert.are.equal(cjson.null, op.error)
    assert.are.equal(3, #op.result.items)
    for i, want in ipairs { a, c, b } do
      local item = op.result.items[i]
      assert.are.same({ "commentId", "error", "operationId", "status" }, keys(item))
      assert.are.equal(want.id, item.commentId)
      assert.are.equal("succeeded", item.status)
      assert.are.equal(cjson.null, item.error)
      -- Each item is an ordinary hide the client can follow too.
      local _, single = t.api("GET", "/api/v1/operations/" .. item.operationId)
      assert.are.equal("comment.hide", single.type)
      assert.are.same({ type = "comment", id = want.id }, single.resource)
      assert.is_true(t.get(want.id).isHidden)
    end
    for _, f in ipairs { fa, fb, fc } do assert.is_true(fake_state(f.id).hidden, f.id) end

    _, body = bulk("delete", { b.id, c.id })
    op = t.wait(body.operationId)
    assert.are.equal("succeeded", op.status, cjson.encode(op))
    assert.is_true(fake_state(fb.id).deleted)
    assert.is_true(fake_state(fc.id).deleted)
    assert.is_true(t.get(b.id).isDeleted)
    assert.is_true(t.get(c.id).isDeleted)
    assert.is_false(t.get(a.id).isDeleted)
    -- One platform call per comment and action.
    assert.are.equal(1, #fake.requests({ method = "DELETE", path = "/" .. fb.id }))
    assert.are.equal(1, #fake.requests({ method = "POST", path = "/" .. fa.id }))
  end)

  it("emits for each comment what the single action emits", function()
    local single, bulked = fb_comment("Hide me alone"), fb_comment("Hide me in bulk")
    local _, one = t.api("POST", "/api/v1/comments/" .. single.id .. "/hide")
    local _, many = bulk("hide", { bulked.id })
    assert.are.equal("succeeded", t.wait(one.operationId).status)
    assert.are.equal("succeeded", t.wait(many.operationId).status)
    env.deliveries_processed()
    local function kinds(id)
      return env.sql("SELECT string_agg(type, ',' ORDER BY type) FROM events WHERE data->'comment'->>'id' = '" .. id
        .. "' OR data->>'commentId' = '" .. id .. "'")
    end
    assert.are.equal(kinds(single.id), kinds(bulked.id))
  end)

  it("skips a comment deleted already, and unhides the others", function()
    local a, fa = fb_comment("Hidden, then shown")
    local gone = fb_comment("Gone already")
    local _, body = bulk("delete", { gone.id })
    assert.are.equal("succeeded", t.wait(body.operationId).status)
    _, body = bulk("hide", { a.id })
    t.wait(body.operationId)

    local before = #fake.requests({ path = "/" .. gone.platformCommentId })
    _, body = bulk("unhide", { gone.id, a.id })
    local op = t.wait(body.operationId)
    assert.are.equal("succeeded", op.status, cjson.encode(op))
    assert.are.equal("skipped", op.result.items[1].status)
    assert.are.equal(cjson.null, op.result.items[1].operationId)
    assert.are.equal("comment_deleted", op.result.items[1].error.code)
    assert.is_false(op.result.items[1].error.retryable)
    assert.are.equal("succeeded", op.result.items[2].status)
    assert.is_false(fake_state(fa.id).hidden)
    assert.are.equal(before, #fake.requests({ path = "/" .. gone.platformCommentId }))
  end)

  it("refuses a malformed body with 422 and every problem's pointer, before anything starts", function()
    local a = fb_comment("Valid one")
    local many = {}
    for i = 1, 101 do many[i] = "cmt_" .. i end
    local before_bulk, before_items = bulk_ops(), item_ops()
    local cases = {
      { {}, { ["/action"] = "required", ["/commentIds"] = "required" } },
      { { action = "pin", commentIds = { a.id } }, { ["/action"] = "invalid_value" } },
      { { action = "hide", commentIds = {} }, { ["/commentIds"] = "invalid_value" } },
      { { action = "hide", commentIds = many }, { ["/commentIds"] = "invalid_value" } },
      { { action = "hide", commentIds = a.id }, { ["/commentIds"] = "invalid_value" } },
      { { action = "hide", commentIds = { a.id, 7, a.id } },
        { ["/commentIds/1"] = "invalid_value", ["/commentIds/2"] = "duplicate_comment" } },
      { { action = "hide", commentIds = { a.id, ("c"):rep(65) } }, { ["/commentIds/1"] = "invalid_value" } },
      { { action = "hide", commentIds = { a.id }, companyId = "cmp_x", why = 1 },
        { ["/companyId"] = "field_not_allowed", ["/why"] = "unknown_field" } },
    }
    for i, case in ipairs(cases) do
      local status, problem, headers = t.api("POST", "/api/v1/comments/bulk", case[1])
      assert.are.equal(422, status, "case " .. i .. ": " .. cjson.encode(problem))
      assert.are.equal("validation_failed", problem.code)
      assert.are.equal("application/problem+json", headers["content-type"])
      assert.are.same(case[2], field_codes(problem), "case " .. i)
    end
    assert.are.equal(before_bulk, bulk_ops())
    assert.are.equal(before_items, item_ops())
  end)

  it("answers 404 naming unknown and foreign ids, and 422 naming the account's own comments in a hide", function()
    local a = fb_comment("Mine to moderate")
    local other = comment_stack.live_tenant(env, "Other Co")
    local other_post, other_target = other.publish_text("Theirs")
    local made = other.fake_comment({ post_id = other_target.platformPostId, message = "Not yours",
      from = { id = "1009", name = "Bo" } })
    local foreign = other.comment(other_post, made.comment.id)
    local sandbox = comment_stack.test_tenant(env, "Sandbox Co")
    local _, sb_target = sandbox.publish(sandbox.fb, { type = "text", message = "Sandbox" })
    local test_env = sandbox.sandbox_comment(sb_target, "Other environment")
    local before_bulk, before_items = bulk_ops(), item_ops()

    local status, problem = bulk("hide", { a.id, "cmt_nope", foreign.id, test_env.id })
    assert.are.equal(404, status, cjson.encode(problem))
    assert.are.equal("not_found", problem.code)
    assert.are.same({ ["/commentIds/1"] = "not_found", ["/commentIds/2"] = "not_found", ["/commentIds/3"] = "not_found" },
      field_codes(problem))
    for _, id in ipairs { "cmt_nope", foreign.id, test_env.id } do assert.matches(id, problem.detail, 1, true) end
    assert.is_nil(problem.detail:find(a.id, 1, true))

    -- The other company cannot act on ours either.
    assert.are.equal(404, (other.api("POST", "/api/v1/comments/bulk", { action = "delete", commentIds = { a.id } })))

    -- The Page's own reply cannot be hidden or unhidden; deleting it is fine.
    local _, r = t.api("POST", "/api/v1/comments/" .. a.id .. "/replies", { message = "Our answer" })
    local own = t.get(t.wait(r.operationId).result.commentId)
    before_items = item_ops()
    for _, action in ipairs { "hide", "unhide" } do
      status, problem = bulk(action, { a.id, own.id })
      assert.are.equal(422, status, cjson.encode(problem))
      assert.are.equal("cannot_hide_own_comment", problem.code)
      assert.are.same({ ["/commentIds/1"] = "cannot_hide_own_comment" }, field_codes(problem))
      assert.matches(own.id, problem.detail, 1, true)
    end
    assert.are.equal(before_bulk, bulk_ops())
    assert.are.equal(before_items, item_ops())
    assert.is_false(t.get(a.id).isHidden)

    local _, body = bulk("delete", { own.id })
    assert.are.equal("succeeded", t.wait(body.operationId).status)
    -- Nor can another company read the bulk operation.
    assert.are.equal(404, (other.api("GET", "/api/v1/operations/" .. body.operationId)))
  end)

  it("replays the first answer for the same Idempotency-Key and refuses the key for another body", function()
    local a, fa = fb_comment("Idempotent hide")
    local b = fb_comment("Another")
    local key = { ["Idempotency-Key"] = "bulk-" .. math.random(1, 1e9) }
    local before = bulk_ops()
    local s1, b1 = bulk("hide", { a.id }, key)
    -- The same body, its keys in another order.
    local s2, b2, h2 = env.sgw:json("POST", "/api/v1/comments/bulk", { headers = { ["X-Api-Key"] = t.key,
      ["Idempotency-Key"] = key["Idempotency-Key"], ["Content-Type"] = "application/json" },
      body = '{"commentIds":["' .. a.id .. '"], "action":"hide"}' })
    assert.are.equal(202, s1)
    assert.are.equal(202, s2, cjson.encode(b2))
    assert.are.same(b1, b2)
    assert.are.equal("true", h2["idempotent-replayed"])
    local s3, b3 = bulk("hide", { a.id, b.id }, key)
    assert.are.equal(422, s3)
    assert.are.equal("idempotency_key_reused", b3.code)
    assert.are.equal("succeeded", t.wait(b1.operationId).status)
    assert.are.equal(before + 1, bulk_ops())
    assert.are.equal(1, #fake.requests({ method = "POST", path = "/" .. fa.id }))
  end)

  it("retries a passing outage on one item and reports a refused one, ending failed with the others done", function()
    local a, fa = fb_comment("Refused by Meta")
    local b, fb = fb_comment("Behind an outage")
    local c, fc = ig_comment("Fine")
    -- A refusal about this comment only (a permission error would mark the whole account).
    fake.fail({ match = { method = "POST", path = "/" .. fa.id }, count = 1,
      error = { code = 100, subcode = 2534022, message = "(#100) Invalid parameter" } })
    fake.fail({ match = { method = "POST", path = "/" .. fb.id }, count = 2, preset = "transient" })
    local _, body = bulk("hide", { a.id, b.id, c.id })
    local op = t.wait(body.operationId, 30)
    assert.are.equal("failed", op.status, cjson.encode(op))
    assert.are.equal("items_failed", op.error.code)
    assert.matches("1 of 3", op.error.message, 1, true, cjson.encode(op))
    local items = op.result.items
    assert.are.equal("failed", items[1].status)
    assert.are.same({ "code", "message", "platformCode", "retryable" }, keys(items[1].error))
    assert.are.equal("content_rejected", items[1].error.code)
    assert.are.equal("100/2534022", items[1].error.platformCode)
    assert.is_false(items[1].error.retryable)
    assert.are.equal("succeeded", items[2].status)
    assert.are.equal("succeeded", items[3].status)
    assert.are.equal(3, #fake.requests({ method = "POST", path = "/" .. fb.id }))
    assert.is_false(t.get(a.id).isHidden)
    assert.is_true(t.get(b.id).isHidden)
    assert.is_true(fake_state(fc.id).hidden)
  end)

  it("fails an item at once when its account must be reconnected", function()
    local a = fb_comment("Token trouble")
    local c, fc = ig_comment("Other account fine")
    env.sql("UPDATE social_accounts SET status = 'reconnect_required', status_reason = "
      .. "'{\"code\":\"token_expired\",\"message\":\"Reconnect.\",\"platformCode\":\"190/463\"}' WHERE id = '" .. t.fb.id .. "'")
    local _, body = bulk("hide", { a.id, c.id })
    local op = t.wait(body.operationId)
    env.sql("UPDATE social_accounts SET status = 'active', status_reason = NULL WHERE id = '" .. t.fb.id .. "'")
    assert.are.equal("failed", op.status, cjson.encode(op))
    assert.are.equal("failed", op.result.items[1].status)
    assert.are.equal("token_expired", op.result.items[1].error.code)
    assert.are.equal("succeeded", op.result.items[2].status)
    assert.are.equal(0, #fake.requests({ method = "POST", path = "/" .. a.platformCommentId }))
    assert.is_true(fake_state(fc.id).hidden)
  end)

  -- Last: it replaces the sgw instance.
  it("finishes after a crash mid-way without acting on a comment twice", function()
    local list, fakes = {}, {}
    for i = 1, 4 do list[i], fakes[i] = fb_comment("Crash " .. i) end
    -- The third comment's hide hangs at Meta until well after sgw is gone.
    fake.fail({ match = { method = "POST", path = "/" .. fakes[3].id }, count = 1, kind = "delay", delay_ms = 60000 })
    local ids = {}
    for i, c in ipairs(list) do ids[i] = c.id end
    local _, body = bulk("hide", ids)
    stack.eventually(function()
      local _, op = t.api("GET", "/api/v1/operations/" .. body.operationId)
      local done = 0
      for _, item in ipairs(op.result ~= cjson.null and op.result.items or {}) do
        if item.status == "succeeded" then done = done + 1 end
      end
      return done == 3 and #fake.requests({ method = "POST", path = "/" .. fakes[3].id }) == 1
    end, 20, 0.05, "three items done and the fourth in flight")
    local _, running = t.api("GET", "/api/v1/operations/" .. body.operationId)
    assert.are.equal("running", running.status)
    assert.are.equal("pending", running.result.items[3].status)

    env.restart()
    local op = t.wait(body.operationId, 30)
    assert.are.equal("succeeded", op.status, cjson.encode(op))
    for i, f in ipairs(fakes) do
      assert.is_true(t.get(list[i].id).isHidden)
      -- Asked once each; the one in flight once more by the new instance.
      assert.are.equal(i == 3 and 2 or 1, #fake.requests({ method = "POST", path = "/" .. f.id }), "comment " .. i)
    end
  end)
end)

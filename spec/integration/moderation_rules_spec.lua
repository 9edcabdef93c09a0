-- Moderation rules end to end: PUT/GET round trip, refusals with JSON
-- Pointers and nothing saved, a rule hiding a webhook comment on the (fake)
-- platform through a rule-triggered operation and telling the client, the
-- account's own comments untouched, flags as events, the test endpoint, and
-- one company's rules never touching another's comments.
local stack = require "stack"
local cjson = require "cjson.safe"
local comment_stack = require "comment_stack"

local function fields_of(problem)
  local out = {}
  for _, e in ipairs(problem.errors or {}) do out[#out + 1] = e.field .. " " .. e.code end
  table.sort(out)
  return out
end

describe("moderation rules", function()
  local env, live, sandbox, other

  setup(function()
    env = comment_stack.start({ name = "moderation-rules" })
    live = comment_stack.live_tenant(env, "Rules Co")
    sandbox = comment_stack.test_tenant(env, "Rules Sandbox")
    other = comment_stack.test_tenant(env, "Neighbour Co")
  end)

  teardown(function() comment_stack.stop() end)

  local function put(t, rules)
    return t.api("PUT", "/api/v1/moderation/rules", { rules = rules })
  end

  local function ops_on(comment_id)
    return env.count("SELECT count(*) FROM operations WHERE resource_id = '" .. comment_id .. "'")
  end

  it("stores the rules in order with defaults filled in, and takes back what GET gave", function()
    local status, saved = put(sandbox, {
      { id = "no-links", name = "No links", match = { links = true }, action = "hide",
        scope = { platforms = { "facebook" } } },
      { match = { keywords = { "refund" } }, action = "flag" },
    })
    assert.are.equal(200, status, cjson.encode(saved))
    assert.are.equal(2, #saved.rules)
    assert.are.same({ id = "no-links", name = "No links", enabled = true, match = { links = true }, action = "hide",
      scope = { socialAccountIds = cjson.null, platforms = { "facebook" } } }, saved.rules[1])
    local made = saved.rules[2]
    assert.matches("^rule_", made.id)
    assert.are.same({ name = cjson.null, enabled = true, scope = cjson.null },
      { name = made.name, enabled = made.enabled, scope = made.scope })

    local _, got = sandbox.api("GET", "/api/v1/moderation/rules")
    assert.are.same(saved, got)
    status = sandbox.api("PUT", "/api/v1/moderation/rules", got)
    assert.are.equal(200, status)
    local _, again = sandbox.api("GET", "/api/v1/moderation/rules")
    assert.are.same(got, again)
  end)

  it("refuses invalid rules with 422, every problem pointed at, and saves nothing", function()
    local _, before = sandbox.api("GET", "/api/v1/moderation/rules")
    local status, problem, headers = put(sandbox, {
      { id = "a", match = { regex = "(a+" }, action = "hide" },
      { id = "a", match = { keywords = {} }, action = "mute" },
      { match = { links = true }, action = "hide", scope = { socialAccountIds = { other.fb.id } } },
    })
    assert.are.equal(422, status)
    assert.are.equal("application/problem+json", headers["content-type"])
    assert.are.equal("validation_failed", problem.code)
    assert.are.same({ "/rules/0/match/regex invalid_value", "/rules/1/action invalid_value",
      "/rules/1/id duplicate_id", "/rules/1/match/keywords invalid_value" }, fields_of(problem))
    -- Well-formed but naming another company's account: refused too.
    -- Checked across every rule at once: only the foreign ids are pointed at.
    status, problem = put(sandbox, {
      { match = { links = true }, action = "hide", scope = { socialAccountIds = { other.fb.id } } },
      { match = { links = true }, action = "flag", scope = { socialAccountIds = { sandbox.fb.id, other.fb.id } } },
    })
    assert.are.equal(422, status)
    assert.are.same({ "/rules/0/scope/socialAccountIds/0 invalid_value",
      "/rules/1/scope/socialAccountIds/1 invalid_value" }, fields_of(problem))
    local _, after = sandbox.api("GET", "/api/v1/moderation/rules")
    assert.are.same(before, after)
  end)

  it("hides a webhook comment with a banned word on the platform, by a rule-triggered operation", function()
    local r = live.listen()
    local status = put(live, { { id = "ban-spam", match = { keywords = { "spam" } }, action = "hide" } })
    assert.are.equal(200, status)
    local post, target = live.publish_text("Rules apply here")
    local made = live.fake_comment({ post_id = target.platformPostId, message = "Cheap SPÄM, here!",
      from = { id = "100" .. math.random(1e6, 9e6), name = "Spammer" } })
    local c = live.comment(post, made.comment.id)

    local op_id
    stack.eventually(function()
      op_id = env.sql("SELECT id FROM operations WHERE resource_id = '" .. c.id .. "'")
      return op_id ~= ""
    end, 20, 0.05, "the rule's operation")
    local op = live.wait(op_id)
    assert.are.equal("succeeded", op.status, cjson.encode(op))
    assert.are.equal("comment.hide", op.type)
    assert.are.same({ type = "rule", ruleId = "ban-spam" }, op.trigger)
    assert.is_true(live.get(c.id).isHidden)
    local on_platform
    for _, x in ipairs(env.fake.control("GET", "comments").data) do
      if x.id == made.comment.id then on_platform = x end
    end
    assert.is_true(on_platform.hidden)

    local events
    stack.eventually(function()
      events = r.events("social.comment.hidden")
      return #events > 0
    end, 20, 0.05, "social.comment.hidden at the receiver")
    assert.are.equal(c.id, events[1].data.comment.id)
    assert.is_true(events[1].data.comment.isHidden)
    assert.are.equal("ban-spam", events[1].data.ruleId)
    assert.are.equal(op_id, events[1].data.operationId)

    -- The Page's own comment with the same word is left alone.
    local own = live.fake_comment({ post_id = target.platformPostId, message = "No spam here, promise",
      from = { id = live.page.id, name = live.page.name } })
    local mine = live.comment(post, own.comment.id)
    assert.is_true(mine.isFromAccount)
    env.deliveries_processed()
    assert.are.equal(0, ops_on(mine.id))
    -- An API-requested operation has no trigger.
    local _, asked = live.api("DELETE", "/api/v1/comments/" .. c.id)
    assert.are.equal(cjson.null, live.wait(asked.operationId).trigger)
  end)

  it("flags a sandbox comment with an event and nothing else", function()
    local r = sandbox.listen()
    assert.are.equal(200, (put(sandbox, { { id = "refunds", match = { keywords = { "refund" } }, action = "flag" } })))
    local _, target = sandbox.publish(sandbox.fb, { type = "text", message = "Flag me" })
    local c = sandbox.sandbox_comment(target, "I want a Refund now")
    local events
    stack.eventually(function()
      events = r.events("social.comment.flagged")
      return #events > 0
    end, 20, 0.05, "social.comment.flagged at the receiver")
    assert.are.equal(c.id, events[1].data.comment.id)
    assert.are.equal("refunds", events[1].data.ruleId)
    assert.is_nil(events[1].data.operationId)
    assert.are.equal(0, ops_on(c.id))
    assert.is_false(sandbox.get(c.id).isHidden)
  end)

  it("answers the test endpoint from the saved rules", function()
    assert.are.equal(200, (put(sandbox, {
      { id = "ig-only", scope = { platforms = { "instagram" } }, match = { keywords = { "promo" } }, action = "delete" },
      { id = "promo", match = { keywords = { "promo" } }, action = "hide" },
    })))
    local status, body = sandbox.api("POST", "/api/v1/moderation/rules/test",
      { text = "PROMÖ code inside", authorId = "42", socialAccountId = sandbox.fb.id })
    assert.are.equal(200, status, cjson.encode(body))
    assert.are.equal("promo", body.matched.id)
    assert.are.equal("hide", body.action)
    _, body = sandbox.api("POST", "/api/v1/moderation/rules/test", { text = "promo", platform = "instagram" })
    assert.are.equal("ig-only", body.matched.id)
    assert.are.equal("delete", body.action)
    _, body = sandbox.api("POST", "/api/v1/moderation/rules/test", { text = "nothing to see" })
    assert.are.same({ matched = cjson.null, action = cjson.null }, body)
    local problem
    status, problem = sandbox.api("POST", "/api/v1/moderation/rules/test", { text = "x", socialAccountId = other.fb.id })
    assert.are.equal(422, status)
    assert.are.same({ "/socialAccountId invalid_value" }, fields_of(problem))
  end)

  it("keeps each company's rules to itself", function()
    assert.are.equal(200, (put(sandbox, { { id = "ban", match = { keywords = { "banned" } }, action = "hide" } })))
    local _, theirs = other.api("GET", "/api/v1/moderation/rules")
    assert.are.same({ rules = {} }, theirs)
    local _, target = other.publish(other.fb, { type = "text", message = "Neighbour post" })
    local c = other.sandbox_comment(target, "a banned word")
    local _, mine = sandbox.publish(sandbox.fb, { type = "text", message = "My post" })
    local hit = sandbox.sandbox_comment(mine, "a banned word")
    stack.eventually(function() return sandbox.get(hit.id).isHidden end, 20, 0.05, "the rule to hide my comment")
    assert.are.equal(0, ops_on(c.id))
    assert.is_false(other.get(c.id).isHidden)
    local _, answer = other.api("POST", "/api/v1/moderation/rules/test", { text = "banned" })
    assert.are.equal(cjson.null, answer.matched)
  end)

  it("does not judge a comment first seen through the Page's hide, whose text is not known yet", function()
    assert.are.equal(200, put(live, { { id = "hide-all-short", match = { maxLength = 1000 }, action = "hide" } }))
    local post, target = live.publish_text("Hidden before it was announced")
    local made = live.fake_comment({ post_id = target.platformPostId, message = "Never announced",
      from = { id = "100" .. math.random(1e6, 9e6), name = "Quiet" }, deliver = false })
    -- The Page hides it in Facebook; that delivery, from the Page, is all sgw hears.
    assert.are.equal(200, env.fake.control("POST", "comments/" .. made.comment.id .. "/hide", {}).delivery.status)
    env.deliveries_processed()
    local c = live.comment(post, made.comment.id)
    assert.are.equal("", c.text)
    assert.is_true(c.isHidden)
    assert.is_false(c.isFromAccount)
    assert.are.equal(0, ops_on(c.id), "no rule acted on a text it does not know")
    assert.are.equal(200, put(live, {}))
  end)
end)

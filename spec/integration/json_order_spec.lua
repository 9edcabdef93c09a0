-- The bytes of JSON answers (issue 15): keys in the documented order (the
-- OpenAPI document, CONTRACT sections 2, 6, 7 and 9) and no `\/` anywhere,
-- read from raw bodies: a post and its targets, the 202 and its idempotent
-- replay, a comment, a problem, an event delivered to a webhook receiver,
-- and an operator command's output.
local stack = require "stack"
local cjson = require "cjson.safe"
local receiver = require "receiver"
local keys = require "json_keys"

local POST_KEYS = { "id", "status", "content", "media", "publishing", "externalReference", "createdAt", "updatedAt", "targets" }
local TARGET_KEYS = { "id", "socialAccountId", "platform", "status", "platformPostId", "permalinkUrl", "attempts",
  "nextAttemptAt", "publishedAt", "error" }
local COMMENT_KEYS = { "id", "platform", "socialAccountId", "postTargetId", "platformCommentId", "platformPostId",
  "parentPlatformCommentId", "text", "author", "isFromAccount", "isHidden", "isDeleted", "likeCount", "createdAt", "updatedAt" }

-- Slashes the answer must carry as they are.
local SLASHY = "orders/2026/17 and a back\\slash before /"

local function no_escaped_slash(text)
  -- A \/ not preceded by another backslash would be an escaped slash.
  assert.is_nil(text:find("[^\\]\\/"), "an escaped slash in " .. text)
end

-- The keys written come in the order of the list (those it names; absent
-- ones skipped, others after them).
local function in_order(list, written)
  local named, want, got = {}, {}, {}
  for _, k in ipairs(list) do named[k] = true end
  for _, k in ipairs(written) do if named[k] then got[#got + 1] = k end end
  local present = {}
  for _, k in ipairs(got) do present[k] = true end
  for _, k in ipairs(list) do if present[k] then want[#want + 1] = k end end
  assert.are.same(want, got)
  for i = 1, #got do assert.are.equal(got[i], written[i], "a key the list does not name comes first") end
end

describe("JSON key order and slashes", function()
  local sgw, r, client, account

  local function api(method, path, body, key)
    local headers = { ["X-Api-Key"] = client.apiKey }
    if method == "POST" then headers["Idempotency-Key"] = key or ("json-order-" .. math.random(1, 1e9)) end
    return sgw:json(method, path, { body = body, headers = headers })
  end

  setup(function()
    sgw = stack.start_sgw { name = "json-order", set = {
      ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
      ["webhooks.allow_private_targets"] = true,
      ["jobs.poll_interval_ms"] = 100,
    } }
    r = receiver.start()
    local company = stack.cli(sgw, { "company", "create", "--name", "Order Co" }).companyId
    local code, out = sgw:command({ "client", "create", "--company", company, "--environment", "test",
      "--scopes", "accounts:read posts:read posts:write operations:read comments:read sandbox:write", "--webhook-url", r.hook })
    assert.are.equal(0, code, out)
    out = out:match("(%b{})%s*$")
    assert.are.same({ "clientId", "apiKey", "clientSecret", "webhookSecret" }, keys.top(out))
    client = cjson.decode(out)
    r.config({ secret = client.webhookSecret })
    local status, acc = api("POST", "/api/v1/sandbox/accounts", { platform = "facebook", name = "Order page" })
    assert.are.equal(201, status)
    account = acc.id
  end)

  teardown(function()
    stack.cleanup()
    receiver.stop_all()
  end)

  it("writes an operator command's answer in the contract's order, the URL as it is", function()
    local code, out = sgw:command({ "client", "set-webhook", "--client", client.clientId, "--url", r.hook })
    assert.are.equal(0, code, out)
    out = out:match("(%b{})%s*$")
    assert.are.same({ "clientId", "webhookUrl", "webhookSecret" }, keys.top(out))
    assert.truthy(out:find('"webhookUrl":"' .. r.hook .. '"', 1, true), out)
    no_escaped_slash(out)
    client.webhookSecret = cjson.decode(out).webhookSecret
    r.config({ secret = client.webhookSecret })
  end)

  it("writes a post, its targets, the 202, its replay and the event in the documented order", function()
    local body = { targets = { { socialAccountId = account, platform = "facebook" } },
      content = { type = "link", link = "https://example.com/a/b?c=d/e", message = SLASHY },
      publishing = { mode = "immediate" }, externalReference = "orders/17" }
    local idem = "json-order-post-" .. math.random(1, 1e9)
    local status, accepted, _, raw = api("POST", "/api/v1/posts", body, idem)
    assert.are.equal(202, status, raw)
    assert.are.same({ "requestId", "operationId", "status", "externalReference", "resource" }, keys.top(raw))
    assert.truthy(raw:find('"externalReference":"orders/17"', 1, true), raw)
    local again_status, _, headers, again = api("POST", "/api/v1/posts", body, idem)
    assert.are.equal(202, again_status)
    assert.are.equal("true", headers["idempotent-replayed"])
    assert.are.equal(raw, again)

    stack.wait_operation(function(path) return api("GET", path) end, accepted.operationId)
    local s, post, _, text = api("GET", "/api/v1/posts/" .. accepted.resource.postId)
    assert.are.equal(200, s, text)
    assert.matches('^{"id":"post_', text)
    assert.are.same(POST_KEYS, keys.top(text))
    assert.are.same(TARGET_KEYS, keys.of(text, "targets"))
    in_order({ "type", "message", "link" }, keys.of(text, "content"))
    assert.are.equal(SLASHY, post.content.message)
    assert.truthy(text:find('"link":"https://example.com/a/b?c=d/e"', 1, true), text)
    no_escaped_slash(text)

    local _, _, _, page = api("GET", "/api/v1/posts?limit=5")
    assert.are.same({ "data", "nextCursor" }, keys.top(page))
    assert.are.same(POST_KEYS, keys.of(page, "data"))
    no_escaped_slash(page)

    local d = stack.eventually(function()
      for _, x in ipairs(r.deliveries()) do
        if x.verified and x.body:find('"social.post.published"', 1, true) then return x end
      end
    end, 30, 0.1, "the published event")
    assert.are.same({ "id", "type", "createdAt", "environment", "data" }, keys.top(d.body))
    assert.are.same({ "postId", "status", "targets", "operationId", "externalReference" }, keys.of(d.body, "data"))
    in_order({ "postTargetId", "status", "platformPostId", "error" }, keys.of(d.body, "targets"))
    assert.truthy(d.body:find('"externalReference":"orders/17"', 1, true), d.body)
    no_escaped_slash(d.body)

    -- A comment on the post, as created and as read.
    local cs, _, _, ctext = api("POST", "/api/v1/sandbox/comments", { postTargetId = post.targets[1].id,
      text = "see https://example.com/x/y", authorName = "Sandy/Co" })
    assert.are.equal(201, cs, ctext)
    assert.are.same(COMMENT_KEYS, keys.top(ctext))
    no_escaped_slash(ctext)
    local comment = cjson.decode(ctext)
    local gs, _, _, gtext = api("GET", "/api/v1/comments/" .. comment.id)
    assert.are.equal(200, gs)
    assert.are.same(keys.top(ctext), keys.top(gtext))
    assert.truthy(gtext:find('"text":"see https://example.com/x/y"', 1, true), gtext)
    local _, _, _, list = api("GET", "/api/v1/posts/" .. post.id .. "/comments")
    assert.are.same({ "data", "nextCursor" }, keys.top(list))
    assert.are.same(keys.top(ctext), keys.of(list, "data"))
  end)

  it("writes problems in the Problem schema's order, the type URI unescaped", function()
    local status, _, headers, text = api("GET", "/api/v1/posts/post_missing")
    assert.are.equal(404, status)
    assert.matches("^application/problem%+json", headers["content-type"])
    assert.are.same({ "type", "title", "status", "detail", "code", "requestId" }, keys.top(text))
    assert.matches('^{"type":"/docs/errors#not_found"', text)
    local s2, _, _, invalid = api("POST", "/api/v1/posts", { targets = { { platform = "myspace" } } })
    assert.are.equal(422, s2)
    assert.are.same({ "type", "title", "status", "detail", "code", "requestId", "errors" }, keys.top(invalid))
    assert.are.same({ "field", "code", "message" }, keys.of(invalid, "errors"))
    assert.truthy(invalid:find('"field":"/', 1, true), invalid)
    no_escaped_slash(invalid)
  end)
end)

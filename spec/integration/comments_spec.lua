-- Comments against the real stack: Meta's verification handshake, signed
-- deliveries (bad signatures, redelivery, reordering of add, edit, remove,
-- hide and unhide; an add and its edit dated the same second, in either
-- order, redelivered, split across two instances), Instagram comments, posts
-- we did not publish, listing
-- with cursors while comments arrive, tenancy, the sandbox comments tool,
-- and large batches.
local stack = require "stack"
local fake_graph = require "fake_graph"
local cjson = require "cjson.safe"

local ENCRYPTION_KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
local APP_SECRET = "spec-app-secret-" .. math.random(1, 1e9)
local VERIFY_TOKEN = "spec-verify-token"

local function cli(inst, argv)
  local code, out = inst:command(argv)
  assert(code == 0, table.concat(argv, " ") .. " failed: " .. out)
  return assert(cjson.decode(out:match("(%b{})%s*$")))
end

-- X-Hub-Signature-256 as Meta computes it, over the exact bytes.
local function signature(body, secret)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(body)
  f:close()
  local code, out = stack.sh("openssl dgst -sha256 -hmac " .. stack.shell_quote(secret or APP_SECRET) .. " -r "
    .. stack.shell_quote(path))
  os.remove(path)
  assert(code == 0, out)
  return "sha256=" .. assert(out:match("^(%x+)"))
end

local COMMENT_KEYS = { "author", "createdAt", "id", "isDeleted", "isFromAccount", "isHidden", "likeCount",
  "parentPlatformCommentId", "platform", "platformCommentId", "platformPostId", "postTargetId", "socialAccountId",
  "text", "updatedAt" }
local ISO = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$"

local function assert_shape(c)
  local keys = {}
  for k in pairs(c) do keys[#keys + 1] = k end
  table.sort(keys)
  assert.are.same(COMMENT_KEYS, keys)
  assert.matches("^cmt_", c.id)
  assert.matches(ISO, c.createdAt)
  assert.matches(ISO, c.updatedAt)
  local akeys = {}
  for k in pairs(c.author) do akeys[#akeys + 1] = k end
  table.sort(akeys)
  assert.are.same({ "name", "platformId" }, akeys)
  assert.is_boolean(c.isFromAccount)
  assert.is_boolean(c.isHidden)
  assert.is_boolean(c.isDeleted)
  assert.are.equal("number", type(c.likeCount))
end

local iso = stack.iso

describe("comments", function()
  local sgw, images, key, live_key, other_key, narrow_key
  local fb, ig, fb_post, fb_target, ig_post, ig_target
  local seq = 0
  local T0 = os.time() - 7200  -- comment times in the past, well apart from "now"

  local function api(method, path, body, h)
    local headers = { ["X-Api-Key"] = key }
    for k, v in pairs(h or {}) do headers[k] = v end
    if method == "POST" and path == "/api/v1/posts" then
      seq = seq + 1
      headers["Idempotency-Key"] = "comments-spec-" .. seq .. "-" .. math.random(1, 1e9)
    end
    return sgw:json(method, path, { body = body, headers = headers })
  end

  local function sql(q) return stack.psql(sgw.database_url, q) end
  local function count(q) return tonumber(sql(q)) end

  local function deliver(delivery, headers, instance)
    local body = type(delivery) == "string" and delivery or assert(cjson.encode(delivery))
    local h = { ["Content-Type"] = "application/json", ["X-Hub-Signature-256"] = signature(body) }
    for k, v in pairs(headers or {}) do h[k] = v or nil end
    return (instance or sgw):request("POST", "/webhooks/meta", { body = body, headers = h })
  end

  local function processed()
    stack.eventually(function()
      return count("SELECT count(*) FROM meta_webhook_deliveries WHERE processed_at IS NULL") == 0
    end, 30, 0.05, "every delivery to be processed")
  end

  -- Delivers and waits for the job.
  local function ingest(delivery)
    local status, body = deliver(delivery)
    assert.are.equal(200, status, body)
    assert.are.same({ received = true }, cjson.decode(body))
    processed()
  end

  local function publish(account, content)
    local status, body = api("POST", "/api/v1/posts", { targets = { { socialAccountId = account.id, platform = account.platform } },
      content = content, publishing = { mode = "immediate" } })
    assert.are.equal(202, status, cjson.encode(body))
    stack.eventually(function()
      local _, op = api("GET", "/api/v1/operations/" .. body.operationId)
      return op and op.status == "succeeded"
    end, 30, 0.1, "the post to publish")
    local _, post = api("GET", "/api/v1/posts/" .. body.resource.postId)
    return post, post.targets[1]
  end

  -- A page feed comment change.
  local function fb_change(verb, comment, t, extra)
    local v = { item = "comment", verb = verb, post_id = fb_target.platformPostId, comment_id = comment,
      parent_id = fb_target.platformPostId, created_time = t, from = { id = "100200300", name = "Ann Example" } }
    for k, val in pairs(extra or {}) do v[k] = val end
    return { field = "feed", value = v }
  end

  local function page(changes, time)
    return { object = "page", entry = { { id = fb.platformAccountId, time = time or os.time(), changes = changes } } }
  end

  local function comment_id(platform_comment_id)
    return sql("SELECT id FROM comments WHERE platform_comment_id = '" .. platform_comment_id .. "'")
  end

  local function get_comment(platform_comment_id)
    local status, c = api("GET", "/api/v1/comments/" .. comment_id(platform_comment_id))
    assert.are.equal(200, status)
    return c
  end

  local function fb_comment_id()
    seq = seq + 1
    return fb_target.platformPostId:match("_(%d+)$") .. "_" .. (900000 + seq)
  end

  local function settings(more)
    local set = {
      ["crypto.encryption_key"] = ENCRYPTION_KEY,
      ["meta.app_secret"] = APP_SECRET,
      ["meta.webhook_verify_token"] = VERIFY_TOKEN,
      ["api.rate_limit.per_minute"] = 1000000,
      ["jobs.poll_interval_ms"] = 100,
    }
    for k, v in pairs(more or {}) do set[k] = v end
    return set
  end

  setup(function()
    -- Only for the Instagram image, which sgw fetches when the post is created.
    images = fake_graph.start()
    sgw = stack.start_sgw { name = "comments", set = images:https_settings(settings()) }
    local company = cli(sgw, { "company", "create", "--name", "Comments Co" }).companyId
    local all = "accounts:read posts:read posts:write operations:read comments:read sandbox:write"
    key = cli(sgw, { "client", "create", "--company", company, "--environment", "test", "--scopes", all }).apiKey
    live_key = cli(sgw, { "client", "create", "--company", company, "--environment", "live", "--scopes", all }).apiKey
    narrow_key = cli(sgw, { "client", "create", "--company", company, "--environment", "test", "--scopes", "posts:read" }).apiKey
    local other = cli(sgw, { "company", "create", "--name", "Other Co" }).companyId
    other_key = cli(sgw, { "client", "create", "--company", other, "--environment", "test", "--scopes", all }).apiKey
    local _
    _, fb = api("POST", "/api/v1/sandbox/accounts", { platform = "facebook", name = "Comment page" })
    _, ig = api("POST", "/api/v1/sandbox/accounts", { platform = "instagram", name = "Comment IG" })
    fb_post, fb_target = publish(fb, { type = "text", message = "Comment on me" })
    ig_post, ig_target = publish(ig, { type = "image", imageUrl = images:instagram_image(), message = "IG" })
    assert.matches("^" .. fb.platformAccountId .. "_%d+$", fb_target.platformPostId)
    assert.matches("^%d+$", ig_target.platformPostId)
  end)

  teardown(function()
    stack.cleanup()
    fake_graph.stop_all()
  end)

  describe("verification", function()
    local function verify(mode, token, challenge)
      return sgw:request("GET", "/webhooks/meta?hub.mode=" .. mode .. "&hub.verify_token=" .. token
        .. "&hub.challenge=" .. challenge)
    end

    it("answers the challenge as plain text to the right token", function()
      local status, body, headers = verify("subscribe", VERIFY_TOKEN, "1158201444")
      assert.are.equal(200, status)
      assert.are.equal("1158201444", body)
      assert.matches("^text/plain", headers["content-type"])
    end)

    it("refuses a wrong token, another mode or no challenge with 403", function()
      for _, args in ipairs { { "subscribe", "wrong", "1" }, { "unsubscribe", VERIFY_TOKEN, "1" },
          { "subscribe", VERIFY_TOKEN, "" }, { "subscribe", "", "1" } } do
        local status, body, headers = verify(table.unpack(args))
        assert.are.equal(403, status, table.concat(args, " "))
        assert.are.equal("application/problem+json", headers["content-type"])
        assert.is_not.matches("^1$", body)
      end
      assert.are.equal(403, (sgw:request("GET", "/webhooks/meta")))
    end)
  end)

  describe("deliveries", function()
    it("refuses a bad or missing signature with 401 and stores nothing", function()
      local before = count("SELECT count(*) FROM meta_webhook_deliveries")
      local body = cjson.encode(page({ fb_change("add", fb_comment_id(), T0, { message = "unsigned" }) }))
      local cases = {
        { ["X-Hub-Signature-256"] = false },
        { ["X-Hub-Signature-256"] = signature(body, "another secret") },
        { ["X-Hub-Signature-256"] = "sha256=" .. string.rep("0", 64) },
        { ["X-Hub-Signature-256"] = signature(body):gsub("^sha256=", "sha1=") },
      }
      for i, h in ipairs(cases) do
        local headers = { ["Content-Type"] = "application/json", ["X-Hub-Signature-256"] = h["X-Hub-Signature-256"] or nil }
        local status, resp, rh = sgw:request("POST", "/webhooks/meta", { body = body, headers = headers })
        assert.are.equal(401, status, "case " .. i)
        assert.are.equal("unauthenticated", cjson.decode(resp).code)
        assert.are.equal("application/problem+json", rh["content-type"])
        assert.are.equal("Bearer", rh["www-authenticate"], "case " .. i)
      end
      -- A signature over other bytes (the same JSON re-serialised) does not count either.
      local status = sgw:request("POST", "/webhooks/meta", { body = body .. " ",
        headers = { ["Content-Type"] = "application/json", ["X-Hub-Signature-256"] = signature(body) } })
      assert.are.equal(401, status)
      assert.are.equal(before, count("SELECT count(*) FROM meta_webhook_deliveries"))
    end)

    it("refuses a signed body that is not JSON with 400 and stores nothing", function()
      local before = count("SELECT count(*) FROM meta_webhook_deliveries")
      for _, raw in ipairs { "{not json", "[1]", "[]", '"page"', "null" } do
        local status, body = deliver(raw)
        assert.are.equal(400, status, raw)
        assert.are.equal("invalid_json", cjson.decode(body).code, raw)
      end
      assert.are.equal(before, count("SELECT count(*) FROM meta_webhook_deliveries"))
    end)

    it("stores a signed body with a NUL byte or bad UTF-8 as skipped and answers 200 (Meta would retry a refusal)", function()
      for _, raw in ipairs { '{"object":"page","entry":[]}\0', '{"object":"page","x":"\255"}' } do
        local status, body = deliver(raw)
        assert.are.equal(200, status, body)
        assert.are.same({ received = true }, cjson.decode(body))
        local hex = raw:gsub(".", function(c) return string.format("%02x", c:byte()) end)
        assert.are.equal(1, count("SELECT count(*) FROM meta_webhook_deliveries WHERE body = '" .. hex
          .. "' AND processed_at IS NOT NULL AND error LIKE '%NUL%'"))
      end
    end)

    it("skips a change whose text holds a NUL and keeps the rest of the delivery", function()
      local bad, good = fb_comment_id(), fb_comment_id()
      ingest(page({ fb_change("add", bad, T0 + 1.5, { message = "a\0b" }), fb_change("add", good, T0 + 1.5) }))
      assert.is_truthy(get_comment(good))
      assert.are.equal(0, count("SELECT count(*) FROM comments WHERE platform_comment_id = '" .. bad .. "'"))
    end)

    it("creates the comment in the exact shape and tells the post's client", function()
      local id, t = fb_comment_id(), T0 + 1.0
      ingest(page({ fb_change("add", id, t, { message = "Grüße aus Köln 👋" }) }))
      local c = get_comment(id)
      assert_shape(c)
      assert.are.same({
        id = c.id, platform = "facebook", socialAccountId = fb.id, postTargetId = fb_target.id,
        platformCommentId = id, platformPostId = fb_target.platformPostId, parentPlatformCommentId = cjson.null,
        text = "Grüße aus Köln 👋", author = { platformId = "100200300", name = "Ann Example" },
        isFromAccount = false, isHidden = false, isDeleted = false, likeCount = 0,
        createdAt = iso(t), updatedAt = c.updatedAt,
      }, c)
      local event = sql("SELECT data::text FROM events WHERE type = 'social.comment.received' AND data->'comment'->>'id' = '"
        .. c.id .. "'")
      assert.are.same({ comment = c }, cjson.decode(event))
    end)

    it("checks the signature over the raw bytes Meta sent (escaped non-ASCII)", function()
      local id = fb_comment_id()
      local body = cjson.encode(page({ fb_change("add", id, T0 + 2, { message = "MARKER" }) }))
        :gsub("MARKER", "\\u00e4\\u00f6")
      ingest(body)
      assert.are.equal("äö", get_comment(id).text)
    end)

    it("does not duplicate a redelivered body, nor change it", function()
      local id = fb_comment_id()
      local body = cjson.encode(page({ fb_change("add", id, T0 + 3, { message = "once" }) }))
      ingest(body)
      local first = get_comment(id)
      ingest(body)
      ingest(body)
      assert.are.equal(1, count("SELECT count(*) FROM comments WHERE platform_comment_id = '" .. id .. "'"))
      assert.are.same(first, get_comment(id))
      assert.are.equal(1, count("SELECT count(*) FROM events WHERE data->'comment'->>'id' = '" .. first.id .. "'"))
    end)

    it("keeps an edit that arrived before its add", function()
      local id = fb_comment_id()
      ingest(page({ fb_change("edited", id, T0 + 20, { message = "after the edit" }) }))
      ingest(page({ fb_change("add", id, T0 + 4, { message = "as first written" }) }))
      local c = get_comment(id)
      assert.are.equal("after the edit", c.text)
      assert.are.equal(iso(T0 + 4), c.createdAt, "the add fills in the creation time")
      assert.are.equal("Ann Example", c.author.name)
      -- an older edit arriving now changes nothing; a newer one does
      ingest(page({ fb_change("edited", id, T0 + 10, { message = "stale" }) }))
      assert.are.equal("after the edit", get_comment(id).text)
      ingest(page({ fb_change("edited", id, T0 + 30, { message = "latest" }) }))
      assert.are.equal("latest", get_comment(id).text)
      -- The inbox's text search finds the text as it now stands, not as it was.
      local _, found = api("GET", "/api/v1/comments?q=LATEST")
      assert.are.same({ c.id }, { found.data[1] and found.data[1].id, found.data[2] and found.data[2].id })
      _, found = api("GET", "/api/v1/comments?q=after%20the%20edit")
      assert.are.same({}, found.data)
      assert.are.equal(1, count("SELECT count(*) FROM events WHERE type = 'social.comment.received' "
        .. "AND data->'comment'->>'id' = '" .. c.id .. "'"), "one social.comment.received, when the row was created")
      -- The add filled in, the stale edit changed nothing: one update, the latest.
      assert.are.equal("latest", sql("SELECT string_agg(data->'comment'->>'text', ',') FROM events "
        .. "WHERE type = 'social.comment.updated' AND data->'comment'->>'id' = '" .. c.id .. "'"))
    end)

    it("keeps a removal that arrived before its add", function()
      local id = fb_comment_id()
      ingest(page({ fb_change("remove", id, T0 + 20, { from = cjson.null }) }))
      assert.is_true(get_comment(id).isDeleted)
      ingest(page({ fb_change("hide", id, T0 + 25) }))
      assert.are.equal(iso(T0 + 20), get_comment(id).createdAt, "until the add, the first sighting stands in")
      ingest(page({ fb_change("add", id, T0 + 5, { message = "soon gone" }) }))
      local c = get_comment(id)
      assert.is_true(c.isDeleted)
      assert.are.equal("soon gone", c.text)
      assert.are.equal(iso(T0 + 5), c.createdAt)
      -- deletion is final, whatever comes later
      ingest(page({ fb_change("edited", id, T0 + 40, { message = "back?" }) }))
      assert.is_true(get_comment(id).isDeleted)
    end)

    it("orders hide and unhide by their time, not by arrival", function()
      local id = fb_comment_id()
      ingest(page({ fb_change("add", id, T0 + 6, { message = "hide me" }) }))
      ingest(page({ fb_change("unhide", id, T0 + 30) }))
      ingest(page({ fb_change("hide", id, T0 + 20) }))
      assert.is_false(get_comment(id).isHidden)
      ingest(page({ fb_change("hide", id, T0 + 40) }))
      assert.is_true(get_comment(id).isHidden)
      -- several changes of one comment in one delivery apply in time order too
      ingest(page({ fb_change("unhide", id, T0 + 60), fb_change("hide", id, T0 + 50) }))
      assert.is_false(get_comment(id).isHidden)
      assert.are.equal("hide me", get_comment(id).text)
    end)

    it("keeps replies under their parent and marks the Page's own comments", function()
      local parent, reply = fb_comment_id(), fb_comment_id()
      ingest(page({ fb_change("add", parent, T0 + 7, { message = "question" }),
        fb_change("add", reply, T0 + 8, { message = "answer", parent_id = parent,
          from = { id = fb.platformAccountId, name = "Comment page" } }) }))
      local r = get_comment(reply)
      assert.are.equal(parent, r.parentPlatformCommentId)
      assert.is_true(r.isFromAccount)
      assert.are.equal(0, count("SELECT count(*) FROM events WHERE data->'comment'->>'id' = '" .. r.id .. "'"),
        "no social.comment.received for the Page's own comment")
    end)

    it("stores Instagram comments and replies", function()
      local top, reply = "1790000" .. math.random(1e9, 9e9), "1790001" .. math.random(1e9, 9e9)
      ingest({ object = "instagram", entry = { { id = ig.platformAccountId, time = T0 + 9, changes = {
        { field = "comments", value = { from = { id = "17841499", username = "ann.example" }, id = top,
          media = { id = ig_target.platformPostId, media_product_type = "FEED" }, text = "Love it" } },
        { field = "comments", value = { from = { id = ig.platformAccountId, username = ig.username }, id = reply,
          parent_id = top, media = { id = ig_target.platformPostId }, text = "Thank you!" } },
      } } } })
      local c = get_comment(top)
      assert_shape(c)
      assert.are.equal("instagram", c.platform)
      assert.are.equal(ig.id, c.socialAccountId)
      assert.are.equal(ig_target.id, c.postTargetId)
      assert.are.equal("ann.example", c.author.name)
      assert.are.equal(cjson.null, c.parentPlatformCommentId)
      assert.are.equal(iso(T0 + 9), c.createdAt)
      local r = get_comment(reply)
      assert.are.equal(top, r.parentPlatformCommentId)
      assert.is_true(r.isFromAccount)
    end)

    it("accepts but ignores comments on posts we did not publish and unknown objects", function()
      local before = count("SELECT count(*) FROM comments")
      ingest(page({ fb_change("add", fb_comment_id(), T0, { post_id = fb.platformAccountId .. "_1234567890",
        parent_id = fb.platformAccountId .. "_1234567890", message = "not ours" }) }))
      ingest({ object = "page", entry = { { id = "999999999999999", time = T0, changes = { fb_change("add", "1_2", T0) } } } })
      ingest({ object = "instagram", entry = { { id = ig.platformAccountId, time = T0, changes = { { field = "comments",
        value = { id = "17999999999999999", media = { id = "17000000000000000" }, text = "other media" } } } } } })
      ingest({ object = "user", entry = { { id = "1", time = T0, changes = { { field = "photos", value = {} } } } } })
      ingest(page({ { field = "feed", value = { item = "reaction", verb = "add", post_id = fb_target.platformPostId } } }))
      assert.are.equal(before, count("SELECT count(*) FROM comments"))
      assert.are.equal("object user is not handled",
        sql("SELECT error FROM meta_webhook_deliveries WHERE error IS NOT NULL ORDER BY id DESC LIMIT 1"))
    end)

    it("takes nothing in for a disconnected account", function()
      local before = count("SELECT count(*) FROM comments")
      sql("UPDATE social_accounts SET status = 'disconnected', disconnected_at = now() WHERE id = '" .. fb.id .. "'")
      local ok, err = pcall(ingest, page({ fb_change("add", fb_comment_id(), T0, { message = "after the disconnect" }) }))
      sql("UPDATE social_accounts SET status = 'active', disconnected_at = NULL WHERE id = '" .. fb.id .. "'")
      assert(ok, err)
      assert.are.equal(before, count("SELECT count(*) FROM comments"))
      assert.are.equal("no connected account for " .. fb.platformAccountId,
        sql("SELECT result->'skipped'->0->>'reason' FROM meta_webhook_deliveries ORDER BY id DESC LIMIT 1"))
    end)

    it("takes a batch of 100 changes in one delivery", function()
      local changes, ids = {}, {}
      for i = 1, 100 do
        ids[i] = fb_comment_id()
        changes[i] = fb_change("add", ids[i], T0 + 100 + i, { message = "batch " .. i })
      end
      ingest(page(changes))
      assert.are.equal(100, count("SELECT count(*) FROM comments WHERE platform_comment_id IN ('"
        .. table.concat(ids, "','") .. "')"))
    end)

    it("accepts a delivery of 1,000 changes", function()
      local _, target = publish(fb, { type = "text", message = "A busy post" })
      local changes = {}
      for i = 1, 1000 do
        changes[i] = { field = "feed", value = { item = "comment", verb = "add", post_id = target.platformPostId,
          comment_id = target.platformPostId:match("_(%d+)$") .. "_" .. i, parent_id = target.platformPostId,
          created_time = T0 + i, from = { id = "u" .. i, name = "Commenter " .. i }, message = "Comment number " .. i } }
      end
      ingest(page(changes))
      assert.are.equal(1000, count("SELECT count(*) FROM comments WHERE post_target_id = '" .. target.id .. "'"))
    end)
  end)

  describe("listing", function()
    it("pages oldest first with a cursor that neither repeats nor skips while comments arrive", function()
      local post, target = publish(fb, { type = "text", message = "Listed" })
      local prefix = target.platformPostId:match("_(%d+)$") .. "_"
      local changes = {}
      for i = 1, 60 do
        changes[#changes + 1] = { field = "feed", value = { item = "comment", verb = "add", post_id = target.platformPostId,
          comment_id = prefix .. i, parent_id = i % 5 == 0 and (prefix .. (i - 1)) or target.platformPostId,
          created_time = T0 + i * 10, from = { id = "u" .. i, name = "U" .. i }, message = "c" .. i } }
      end
      changes[#changes + 1] = { field = "feed", value = { item = "comment", verb = "hide", post_id = target.platformPostId,
        comment_id = prefix .. 7, created_time = T0 + 1000 } }
      changes[#changes + 1] = { field = "feed", value = { item = "comment", verb = "remove", post_id = target.platformPostId,
        comment_id = prefix .. 8, created_time = T0 + 1000 } }
      ingest(page(changes))

      local seen, order, cursor, pages = {}, {}, nil, 0
      repeat
        local status, body = api("GET", "/api/v1/posts/" .. post.id .. "/comments?limit=7"
          .. (cursor and ("&cursor=" .. cursor) or ""))
        assert.are.equal(200, status, cjson.encode(body))
        pages = pages + 1
        for _, c in ipairs(body.data) do
          assert.is_nil(seen[c.platformCommentId], "repeated " .. c.platformCommentId)
          seen[c.platformCommentId] = c
          order[#order + 1] = c
        end
        cursor = body.nextCursor ~= cjson.null and body.nextCursor or nil
        -- Between pages: one comment that sorts last (now), one that sorts
        -- before the cursor (a late webhook); neither may disturb the rest.
        local s = api("POST", "/api/v1/sandbox/comments", { postTargetId = target.id, text = "arrived on page " .. pages })
        assert.are.equal(201, s)
        ingest(page({ { field = "feed", value = { item = "comment", verb = "add", post_id = target.platformPostId,
          comment_id = prefix .. "late" .. pages, parent_id = target.platformPostId, created_time = T0 + 1,
          message = "late" } } }))
      until not cursor or pages > 40
      for i = 1, 60 do assert.is_table(seen[prefix .. i], "skipped c" .. i) end
      for i = 2, #order do
        local a, b = order[i - 1], order[i]
        assert.is_true(a.createdAt < b.createdAt or (a.createdAt == b.createdAt and a.id < b.id), "oldest first")
      end
      assert.are.equal(prefix .. 4, seen[prefix .. 5].parentPlatformCommentId)
      assert.is_true(seen[prefix .. 7].isHidden)
      assert.is_true(seen[prefix .. 8].isDeleted)
      assert.are.equal("c8", seen[prefix .. 8].text)
    end)

    it("pages 25 by default and says null on the last page", function()
      local status, body = api("GET", "/api/v1/posts/" .. fb_post.id .. "/comments")
      assert.are.equal(200, status)
      assert.is_true(#body.data <= 25)
      local _, empty = api("GET", "/api/v1/posts/" .. ig_post.id .. "/comments?limit=100")
      assert.are.equal(cjson.null, empty.nextCursor)
      for _, c in ipairs(empty.data) do assert_shape(c) end
    end)

    it("writes each listed comment byte for byte as GET /api/v1/comments/{id} does", function()
      -- The listing writes its page straight from the database's result; a
      -- single comment goes through the Lua encoder. Texts that need escapes,
      -- a reply, an author without a name, a comment without text, the
      -- Page's own, hidden and removed ones.
      local post, target = publish(fb, { type = "text", message = "Listed bytes" })
      local function change(verb, n, extra)
        local v = { item = "comment", verb = verb, post_id = target.platformPostId,
          comment_id = target.platformPostId:match("_(%d+)$") .. "_b" .. n, parent_id = target.platformPostId,
          created_time = T0 + n, from = { id = "u" .. n, name = "U" .. n } }
        for k, val in pairs(extra or {}) do v[k] = val end
        return { field = "feed", value = v }
      end
      ingest(page({
        change("add", 1, { message = 'quote " backslash \\ slash / tab \t newline \n </script>' }),
        change("add", 2, { message = "Grüße 👋 \127 \1 \31", from = { id = "u2" },
          parent_id = target.platformPostId:match("_(%d+)$") .. "_b1" }),
        change("add", 3, { from = { id = fb.platformAccountId, name = "Comment page" } }),
        change("add", 4, { message = "hidden later" }),
        change("hide", 4, { created_time = T0 + 50 }),
        change("add", 5, { message = "removed later" }),
        change("remove", 5, { created_time = T0 + 60 }),
      }))
      local function raw(path)
        local status, body = sgw:request("GET", path, { headers = { ["X-Api-Key"] = key } })
        assert.are.equal(200, status, body)
        return body
      end
      local singles = {}
      for n = 1, 5 do
        singles[n] = raw("/api/v1/comments/" .. comment_id(target.platformPostId:match("_(%d+)$") .. "_b" .. n))
      end
      assert.matches('"text":""', singles[3], 1, true)
      assert.matches('"name":""', singles[2], 1, true)
      assert.are.equal('{"data":[' .. table.concat(singles, ",") .. '],"nextCursor":null}',
        raw("/api/v1/posts/" .. post.id .. "/comments"))
      local first = cjson.decode(raw("/api/v1/posts/" .. post.id .. "/comments?limit=2"))
      assert.are.equal(2, #first.data)
      assert.are.equal(
        '{"data":[' .. table.concat(singles, ",", 3, 5) .. '],"nextCursor":null}',
        raw("/api/v1/posts/" .. post.id .. "/comments?limit=3&cursor=" .. first.nextCursor))
    end)

    it("refuses a bad limit or cursor with 400", function()
      for _, q in ipairs { "limit=0", "limit=101", "limit=abc", "limit=2.5" } do
        local status, body = api("GET", "/api/v1/posts/" .. fb_post.id .. "/comments?" .. q)
        assert.are.equal(400, status, q)
        assert.are.equal("invalid_parameter", body.code)
      end
      local forged = "eyJ0Ijoibm90IGEgdGltZSIsImlkIjoieCJ9" -- {"t":"not a time","id":"x"}
      local month13 = "eyJ0IjoiMjAyNi0xMy0wMVQxMDowMDowMC4wMDAwMDBaIiwiaWQiOiJjbXRfeCJ9" -- {"t":"2026-13-01T10:00:00.000000Z","id":"cmt_x"}
      for _, c in ipairs { "not-a-cursor", forged, month13 } do
        local status, body = api("GET", "/api/v1/posts/" .. fb_post.id .. "/comments?cursor=" .. c)
        assert.are.equal(400, status, c)
        assert.are.equal("invalid_cursor", body.code)
      end
    end)

    it("needs comments:read", function()
      local status, body = api("GET", "/api/v1/posts/" .. fb_post.id .. "/comments", nil, { ["X-Api-Key"] = narrow_key })
      assert.are.equal(403, status)
      assert.are.equal("insufficient_scope", body.code)
    end)
  end)

  describe("tenancy", function()
    it("hides another company's or environment's posts and comments with 404", function()
      local id = fb_comment_id()
      ingest(page({ fb_change("add", id, T0 + 11, { message = "private" }) }))
      local cmt = comment_id(id)
      for _, k in ipairs { other_key, live_key } do
        for _, path in ipairs { "/api/v1/posts/" .. fb_post.id .. "/comments", "/api/v1/comments/" .. cmt,
            "/api/v1/comments/cmt_nope" } do
          local status, body = api("GET", path, nil, { ["X-Api-Key"] = k })
          assert.are.equal(404, status, path)
          assert.are.equal("not_found", body.code)
        end
      end
    end)
  end)

  describe("sandbox comments", function()
    it("creates a comment through the webhook path and answers 201 with it", function()
      local status, c = api("POST", "/api/v1/sandbox/comments", { postTargetId = fb_target.id, text = "From the sandbox",
        authorName = "Sandy" })
      assert.are.equal(201, status, cjson.encode(c))
      assert_shape(c)
      assert.are.equal("facebook", c.platform)
      assert.are.equal(fb_target.id, c.postTargetId)
      assert.are.equal(fb_target.platformPostId, c.platformPostId)
      assert.matches("^" .. fb_target.platformPostId:match("_(%d+)$") .. "_%d+$", c.platformCommentId)
      assert.are.equal("Sandy", c.author.name)
      assert.is_false(c.isFromAccount)
      local _, again = api("GET", "/api/v1/comments/" .. c.id)
      assert.are.same(c, again)
      assert.are.equal(1, count("SELECT count(*) FROM events WHERE type = 'social.comment.received' AND data->'comment'->>'id' = '"
        .. c.id .. "'"))

      local s2, reply = api("POST", "/api/v1/sandbox/comments", { postTargetId = fb_target.id, text = "Reply",
        parentCommentId = c.id, fromAccount = true })
      assert.are.equal(201, s2, cjson.encode(reply))
      assert.are.equal(c.platformCommentId, reply.parentPlatformCommentId)
      assert.is_true(reply.isFromAccount)
      assert.are.equal(fb.platformAccountId, reply.author.platformId)

      local s3, igc = api("POST", "/api/v1/sandbox/comments", { postTargetId = ig_target.id, text = "IG sandbox" })
      assert.are.equal(201, s3, cjson.encode(igc))
      assert.are.equal("instagram", igc.platform)
      assert.matches("^%d+$", igc.platformCommentId)
    end)

    it("refuses invalid requests with 422 and every problem", function()
      local status, body = api("POST", "/api/v1/sandbox/comments", { postTargetId = "tgt_nope", text = "x" })
      assert.are.equal(422, status)
      assert.are.same({ field = "/postTargetId", code = "invalid_value" },
        { field = body.errors[1].field, code = body.errors[1].code })
      status, body = api("POST", "/api/v1/sandbox/comments", { text = "", fromAccount = "yes", extra = 1 })
      assert.are.equal(422, status)
      local fields = {}
      for _, e in ipairs(body.errors) do fields[e.field] = e.code end
      assert.are.same({ ["/postTargetId"] = "required", ["/text"] = "required", ["/fromAccount"] = "invalid_value",
        ["/extra"] = "unknown_field" }, fields)
      local _, ig_comment = api("POST", "/api/v1/sandbox/comments", { postTargetId = ig_target.id, text = "on IG" })
      status, body = api("POST", "/api/v1/sandbox/comments", { postTargetId = fb_target.id, text = "x",
        parentCommentId = ig_comment.id })
      assert.are.equal(422, status)
      assert.are.equal("/parentCommentId", body.errors[1].field)
      -- another company's target is as unknown as a missing one
      status = api("POST", "/api/v1/sandbox/comments", { postTargetId = fb_target.id, text = "x" }, { ["X-Api-Key"] = other_key })
      assert.are.equal(422, status)
    end)

    it("is for test credentials only", function()
      local status, body = api("POST", "/api/v1/sandbox/comments", { postTargetId = fb_target.id, text = "x" },
        { ["X-Api-Key"] = live_key })
      assert.are.equal(403, status)
      assert.are.equal("sandbox_only", body.code)
    end)
  end)
  describe("same-second changes", function()
    local second

    setup(function()
      second = stack.start_sgw { name = "comments-second", database_url = sgw.database_url, migrate = false,
        set = settings() }
    end)

    -- The faults below need the only instance to be the one they start.
    teardown(function() assert(second:stop()) end)

    local function to(instance, body)
      local status, answer = deliver(body, nil, instance)
      assert.are.equal(200, status, answer)
    end

    local function events_of(id, type)
      return count("SELECT count(*) FROM events WHERE type = '" .. type .. "' AND data->'comment'->>'id' = '" .. id .. "'")
    end

    -- The text the client last heard of for a comment.
    local function last_heard(id)
      return sql("SELECT data->'comment'->>'text' FROM events WHERE data->'comment'->>'id' = '" .. id
        .. "' ORDER BY created_at DESC, id DESC LIMIT 1")
    end

    it("keeps an edit dated the same second as its add, in either order, redelivered, across two instances", function()
      for _, edit_first in ipairs { false, true } do
        local id, t = fb_comment_id(), T0 + 800 + seq
        local add = cjson.encode(page({ fb_change("add", id, t, { message = "first words" }) }))
        local edit = cjson.encode(page({ fb_change("edited", id, t, { message = "second thoughts" }) }))
        local first, later = add, edit
        if edit_first then first, later = edit, add end
        to(sgw, first)
        processed()
        to(second, later)
        processed()
        -- Meta redelivers both, to either instance, in the other order.
        to(sgw, later)
        to(second, first)
        to(second, later)
        processed()
        local c = get_comment(id)
        assert.are.equal("second thoughts", c.text, edit_first and "edit first" or "add first")
        assert.are.equal(iso(t), c.createdAt)
        assert.are.equal("Ann Example", c.author.name)
        assert.are.equal(1, count("SELECT count(*) FROM comments WHERE platform_comment_id = '" .. id .. "'"))
        assert.are.equal(1, events_of(c.id, "social.comment.received"))
        -- Received as edited when the edit came first; else received, then updated once.
        assert.are.equal(edit_first and 0 or 1, events_of(c.id, "social.comment.updated"))
        assert.are.equal("second thoughts", last_heard(c.id))
      end
    end)

    it("ends with the edit when the add and the edit reach two instances at once", function()
      for i = 1, 6 do
        local id, t = fb_comment_id(), T0 + 900 + seq
        local add = cjson.encode(page({ fb_change("add", id, t, { message = "quick" }) }))
        local edit = cjson.encode(page({ fb_change("edited", id, t, { message = "quicker" }) }))
        -- Both stored before either is processed, by two instances whose
        -- workers race to apply them.
        if i % 2 == 0 then add, edit = edit, add end
        to(sgw, add)
        to(second, edit)
        to(second, add)
        processed()
        local c = get_comment(id)
        assert.are.equal("quicker", c.text, "round " .. i)
        assert.are.equal(1, events_of(c.id, "social.comment.received"))
        assert.is_true(events_of(c.id, "social.comment.updated") <= 1)
        assert.are.equal("quicker", last_heard(c.id))
      end
    end)

    it("keeps a removal dated the same second as the add and the edit", function()
      local id, t = fb_comment_id(), T0 + 1000 + seq
      ingest(page({ fb_change("remove", id, t, { from = cjson.null }) }))
      ingest(page({ fb_change("edited", id, t, { message = "last words" }) }))
      ingest(page({ fb_change("add", id, t, { message = "words" }) }))
      local c = get_comment(id)
      assert.is_true(c.isDeleted)
      assert.are.equal("last words", c.text)
      assert.are.equal(iso(t), c.createdAt)
    end)
  end)

  describe("faults", function()
    it("keeps a delivery acknowledged just before sgw died, and stores each comment and event once", function()
      local database_url = sgw.database_url
      assert(sgw:stop())
      -- An instance that runs no jobs: it stores and acknowledges the
      -- delivery, and dies before anything processes it.
      sgw = stack.start_sgw { name = "comments-ingest-only", database_url = database_url, migrate = false,
        set = settings({ ["jobs.workers"] = 0 }) }
      local ids, changes = {}, {}
      for i = 1, 3 do
        ids[i] = fb_comment_id()
        changes[i] = fb_change("add", ids[i], T0 + 600 + i, { message = "just before the crash " .. i })
      end
      local delivery = cjson.encode(page(changes))
      assert.are.equal(200, (deliver(delivery)))
      assert.are.equal(137, sgw:kill())
      local pending = count("SELECT count(*) FROM meta_webhook_deliveries WHERE processed_at IS NULL")
      assert.are.equal(1, pending, "the acknowledged delivery is stored, not yet processed")

      sgw = stack.start_sgw { name = "comments-restarted", database_url = database_url, migrate = false, set = settings() }
      processed()
      -- Meta redelivers what it was unsure of: nothing changes.
      assert.are.equal(200, (deliver(delivery)))
      processed()
      for i, id in ipairs(ids) do
        assert.are.equal("just before the crash " .. i, get_comment(id).text)
        assert.are.equal(1, count("SELECT count(*) FROM comments WHERE platform_comment_id = '" .. id .. "'"))
        assert.are.equal(1, count("SELECT count(*) FROM events WHERE type = 'social.comment.received' "
          .. "AND data->'comment'->>'platformCommentId' = '" .. id .. "'"))
      end
    end)
  end)
end)

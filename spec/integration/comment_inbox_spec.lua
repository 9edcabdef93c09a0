-- The comment inbox (GET /api/v1/comments) against the real stack: every
-- filter, both orders, paging that never skips or repeats while comments
-- arrive, refusals of bad values, tenancy, and literal routes winning over
-- /comments/{commentId}.
local stack = require "stack"
local cjson = require "cjson.safe"
local comment_stack = require "comment_stack"

local function ids(list)
  local out = {}
  for i, c in ipairs(list) do out[i] = c.id end
  return out
end

local function escape(s)
  return (s:gsub("[^%w%-_.~]", function(ch) return ("%%%02X"):format(ch:byte()) end))
end

describe("comment inbox", function()
  local env, t, other, fb_post, fb_target, ig_post, ig_target
  local c = {}

  setup(function()
    env = comment_stack.start({ name = "inbox" })
    t = comment_stack.test_tenant(env, "Inbox Co")
    other = comment_stack.test_tenant(env, "Other Co")
    fb_post, fb_target = t.publish(t.fb, { type = "text", message = "Inbox post" })
    ig_post, ig_target = t.publish(t.ig, { type = "image", message = "IG", imageUrl = env.fake:instagram_image() })
    c.first = t.sandbox_comment(fb_target, "First! Great PRICE")
    c.discount = t.sandbox_comment(fb_target, "50% off? a_b")
    c.plain = t.sandbox_comment(fb_target, "50 percent off, abb")
    c.own = t.sandbox_comment(fb_target, "Thanks all", { fromAccount = true })
    c.ig = t.sandbox_comment(ig_target, "Ünïcode price ÉCLAIR")
    c.hidden = t.sandbox_comment(ig_target, "Hide me")
    c.deleted = t.sandbox_comment(fb_target, "Delete me")
    local _, h = t.api("POST", "/api/v1/comments/" .. c.hidden.id .. "/hide")
    assert.are.equal("succeeded", t.wait(h.operationId).status)
    local _, d = t.api("DELETE", "/api/v1/comments/" .. c.deleted.id)
    assert.are.equal("succeeded", t.wait(d.operationId).status)
    other.sandbox_comment(select(2, other.publish(other.fb, { type = "text", message = "Theirs" })), "Their price")
  end)

  teardown(function() comment_stack.stop() end)

  -- Every comment of the query, following nextCursor; asserts each page.
  local function all(query, limit, client)
    client = client or t
    local out, cursor = {}, nil
    repeat
      local status, page = client.api("GET", "/api/v1/comments?limit=" .. (limit or 100) .. (query ~= "" and "&" .. query or "")
        .. (cursor and "&cursor=" .. cursor or ""))
      assert.are.equal(200, status, cjson.encode(page))
      assert.is_true(#page.data <= (limit or 100))
      for _, x in ipairs(page.data) do out[#out + 1] = x end
      cursor = page.nextCursor ~= cjson.null and page.nextCursor or nil
    until not cursor
    return out
  end

  local EVERY = { "first", "discount", "plain", "own", "ig", "hidden", "deleted" }
  local function expect(names, order)
    local out = {}
    for i, n in ipairs(names) do out[i] = c[n].id end
    if order ~= "oldest" then
      local rev = {}
      for i = #out, 1, -1 do rev[#rev + 1] = out[i] end
      out = rev
    end
    return out
  end

  it("lists every comment of the company, hidden and deleted too, newest first by default", function()
    local status, page = t.api("GET", "/api/v1/comments")
    assert.are.equal(200, status)
    assert.are.equal(cjson.null, page.nextCursor)
    assert.are.same(expect(EVERY), ids(page.data))
    assert.are.same(t.get(c.first.id), page.data[#page.data])
    assert.are.same(expect(EVERY, "oldest"), ids(all("order=oldest")))
  end)

  it("writes each comment byte for byte as GET /api/v1/comments/{id} does", function()
    -- The page is written straight from the database's result; one comment
    -- goes through the Lua encoder.
    local function raw(path)
      local status, body = env.sgw:request("GET", path, { headers = { ["X-Api-Key"] = t.key } })
      assert.are.equal(200, status, body)
      return body
    end
    local singles = {}
    for i, id in ipairs(expect(EVERY)) do singles[i] = raw("/api/v1/comments/" .. id) end
    assert.are.equal('{"data":[' .. table.concat(singles, ",") .. '],"nextCursor":null}', raw("/api/v1/comments"))
    local first_two = '{"data":[' .. singles[1] .. "," .. singles[2] .. '],"nextCursor":"'
    local body = raw("/api/v1/comments?limit=2&order=newest")
    assert.are.equal(first_two, body:sub(1, #first_two))
  end)

  it("pages by limit without skipping or repeating, in both orders", function()
    assert.are.same(expect(EVERY), ids(all("", 2)))
    assert.are.same(expect(EVERY, "oldest"), ids(all("order=oldest", 3)))
    local _, page = t.api("GET", "/api/v1/comments?limit=3")
    assert.are.equal(3, #page.data)
    assert.is_string(page.nextCursor)
  end)

  it("filters by account, platform, post and state", function()
    assert.are.same(expect { "ig", "hidden" }, ids(all("socialAccountId=" .. t.ig.id)))
    assert.are.same(expect { "ig", "hidden" }, ids(all("platform=instagram")))
    assert.are.same(expect { "first", "discount", "plain", "own", "deleted" }, ids(all("platform=facebook")))
    assert.are.same(expect { "first", "discount", "plain", "own", "deleted" }, ids(all("postId=" .. fb_post)))
    assert.are.same(expect { "hidden" }, ids(all("isHidden=true")))
    assert.are.same(expect { "first", "discount", "plain", "own", "ig", "deleted" }, ids(all("isHidden=false")))
    assert.are.same(expect { "deleted" }, ids(all("isDeleted=true")))
    assert.are.same(expect { "own" }, ids(all("isFromAccount=true")))
    assert.are.same(expect { "ig", "hidden" }, ids(all("postId=" .. ig_post .. "&isDeleted=false")))
    assert.are.same({}, ids(all("platform=instagram&isFromAccount=true")))
  end)

  it("filters by creation time, both bounds inclusive", function()
    local since, till = escape(c.discount.createdAt), escape(c.ig.createdAt)
    assert.are.same(expect { "discount", "plain", "own", "ig" }, ids(all("createdSince=" .. since .. "&createdUntil=" .. till)))
    assert.are.same(expect { "hidden", "deleted" }, ids(all("createdSince=" .. escape(c.hidden.createdAt))))
    -- Any offset: the same instant written in another zone.
    assert.are.same(expect { "first" }, ids(all("createdUntil=" .. escape(c.first.createdAt:gsub("Z$", "+00:00")))))
    -- An offset RFC 3339 allows and PostgreSQL alone would refuse (past 15:59).
    assert.are.same({}, ids(all("createdSince=" .. escape("2100-01-01T20:00:00+20:00"))))
    assert.are.same(ids(all("")), ids(all("createdUntil=" .. escape("2100-01-01T20:00:00+20:00"))))
  end)

  it("finds text case-insensitively, LIKE wildcards taken literally", function()
    assert.are.same(expect { "first", "ig" }, ids(all("q=price")))
    assert.are.same(expect { "ig" }, ids(all("q=" .. escape("éclair"))))
    assert.are.same(expect { "discount" }, ids(all("q=" .. escape("50%"))))
    assert.are.same(expect { "discount" }, ids(all("q=a_b")))
    assert.are.same(expect { "plain" }, ids(all("q=" .. escape("50 "))))
    assert.are.same(expect { "discount", "plain" }, ids(all("q=OFF")))
  end)

  it("refuses a bad value with 400 invalid_parameter naming the parameter", function()
    for _, case in ipairs {
      { "isHidden", "yes" }, { "isDeleted", "1" }, { "isFromAccount", "" }, { "platform", "tiktok" },
      { "order", "random" }, { "limit", "0" }, { "limit", "101" }, { "limit", "2x" },
      { "createdSince", "yesterday" }, { "createdUntil", "2026-02-30T00:00:00Z" }, { "createdSince", "2026-01-01T00:00:00" },
      { "createdSince", "0000-01-01T00:00:00Z" }, { "createdUntil", "0001-01-01T00:00:00+01:00" },
      { "q", "" }, { "q", ("x"):rep(201) }, { "socialAccountId", "a b" }, { "postId", ("p"):rep(65) },
    } do
      local status, problem, headers = t.api("GET", "/api/v1/comments?" .. case[1] .. "=" .. escape(case[2]))
      assert.are.equal(400, status, case[1] .. "=" .. case[2])
      assert.are.equal("application/problem+json", headers["content-type"])
      assert.are.equal("invalid_parameter", problem.code)
      assert.are.equal(case[1], problem.errors[1].field)
      assert.matches(case[1], problem.detail, 1, true)
    end
    local status, problem = t.api("GET", "/api/v1/comments?cursor=bogus")
    assert.are.equal(400, status)
    assert.are.equal("invalid_cursor", problem.code)
    -- A cursor of one order is no position in the other.
    local _, page = t.api("GET", "/api/v1/comments?limit=1")
    status, problem = t.api("GET", "/api/v1/comments?order=oldest&cursor=" .. page.nextCursor)
    assert.are.equal(400, status)
    assert.are.equal("invalid_cursor", problem.code)
  end)

  it("shows one company nothing of another's", function()
    local theirs = all("", 100, other)
    for _, x in ipairs(theirs) do
      for _, mine in pairs(c) do assert.are_not.equal(mine.id, x.id) end
    end
    assert.are.same({}, ids(all("socialAccountId=" .. t.fb.id, 100, other)))
    assert.are.same({}, ids(all("postId=" .. fb_post, 100, other)))
  end)

  it("needs comments:read", function()
    local key = stack.cli(env.sgw, { "client", "create", "--company", t.company, "--environment", "test",
      "--scopes", "posts:read" }).apiKey
    local status, problem = env.sgw:json("GET", "/api/v1/comments", { headers = { ["X-Api-Key"] = key } })
    assert.are.equal(403, status)
    assert.are.equal("insufficient_scope", problem.code)
    status = env.sgw:json("GET", "/api/v1/comments")
    assert.are.equal(401, status)
  end)

  it("does not take /comments/changes or /comments/{id}/history for a comment id", function()
    local status, feed = t.api("GET", "/api/v1/comments/changes")
    assert.are.equal(200, status, cjson.encode(feed))
    assert.is_string(feed.nextCursor)
    local got
    status, got = t.api("GET", "/api/v1/comments/" .. c.first.id)
    assert.are.equal(200, status)
    assert.are.equal(c.first.id, got.id)
    status = t.api("GET", "/api/v1/comments/changes/history")
    assert.are.equal(404, status)
  end)
  -- Last: it adds comments the other tests do not expect.
  it("keeps its place while comments arrive between pages", function()
    local _, p1 = t.api("GET", "/api/v1/comments?order=oldest&limit=4")
    local late = t.sandbox_comment(fb_target, "Late arrival")
    local _, p2 = t.api("GET", "/api/v1/comments?order=oldest&limit=100&cursor=" .. p1.nextCursor)
    local seen = ids(p1.data)
    for _, x in ipairs(p2.data) do seen[#seen + 1] = x.id end
    local want = expect(EVERY, "oldest")
    want[#want + 1] = late.id
    assert.are.same(want, seen)
    -- Newest first, the newcomer is before the cursor: neither repeated nor shifted.
    local _, n1 = t.api("GET", "/api/v1/comments?limit=2")
    t.sandbox_comment(fb_target, "Later still")
    local _, n2 = t.api("GET", "/api/v1/comments?limit=100&cursor=" .. n1.nextCursor)
    seen = ids(n1.data)
    for _, x in ipairs(n2.data) do seen[#seen + 1] = x.id end
    local newest = expect(EVERY)
    table.insert(newest, 1, late.id)
    assert.are.same(newest, seen)
  end)
end)

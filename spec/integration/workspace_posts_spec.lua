-- The workspace's Posts page in headless Chromium against the real stack:
-- the company's sandbox posts newest first, paged, with each target's
-- account, status, error and permalink; Retry on a partially published
-- post, whose outcome shows without a reload; another company's posts out
-- of reach; the CSRF token required. Screenshots at 1280x800 and 390 px wide
-- go to <build>/test-artifacts/workspace-posts/.
local stack = require "stack"
local workspace_browser = require "workspace_browser"
local cjson = require "cjson.safe"

local SCOPES = "accounts:read posts:read posts:write operations:read sandbox:write"

describe("the workspace Posts page", function()
  local w, b
  local key, pages, posts = nil, {}, {}

  -- A sandbox client of a company with two test Pages; returns its key and the pages.
  local function tenant(company)
    local k = w.client(company, SCOPES)
    return k, { w.account(k, "facebook", "Shop Page"), w.account(k, "facebook", "Outlet Page") }
  end

  setup(function()
    w = workspace_browser.start { name = "workspace-posts", company = "Posting Co", email = "owner@posting.test" }
    b = w.b
    key, pages = tenant(w.company_id)

    -- Oldest first: 20 published posts, then one the Outlet Page refuses.
    for i = 1, 20 do posts[i] = w.publish(key, { pages[1] }, "Everyday post " .. i) end
    assert.are.equal(201, (w.api(key, "POST", "/api/v1/sandbox/failures",
      { socialAccountId = pages[2].id, error = "content_rejected", count = 1 })))
    posts.partial = w.publish(key, pages, "Summer sale <b>starts</b> today")
    assert.are.equal("partially_published", posts.partial.status)
  end)

  teardown(workspace_browser.stop)

  it("lists the company's posts newest first with each target's account, status, error and permalink", function()
    w.page("/workspace/posts")
    assert.matches("No Live posts yet", b:text("#empty"))
    b:click("#tab-test")
    b:wait_for("#posts")
    assert.are.equal("Posts", b:text("nav a[aria-current='page']"))
    local rows = b:find_all("#posts tbody tr")
    assert.are.equal(20, #rows)
    local first = b:text("#post-" .. posts.partial.id)
    assert.matches("Summer sale <b>starts</b> today", first, 1, true) -- shown as text, not markup
    assert.matches("partially published", first)
    assert.matches("Shop Page", first)
    assert.matches("Outlet Page", first)
    assert.matches("content_rejected", b:text("#post-" .. posts.partial.id .. " .target-error"))
    assert.are.equal(posts.partial.targets[1].permalinkUrl,
      b:attribute("#post-" .. posts.partial.id .. " a[href^='http']", "href"))
    assert.is_true(b:exists("#post-" .. posts.partial.id .. " button.retry"))
    -- The newest comes first; a published post has nothing to retry.
    assert.are.equal("post-" .. posts.partial.id, b:execute("return document.querySelector('#posts tbody tr').id"))
    assert.is_false(b:exists("#post-" .. posts[20].id .. " button.retry"))
    w.shot("posts", true)

    -- Paged: the oldest post is on the next page, alone.
    b:click("#older")
    b:wait_for("#newest")
    assert.are.equal(1, #b:find_all("#posts tbody tr"))
    assert.matches("Everyday post 1$", b:text("#post-" .. posts[1].id .. " .summary"))
    assert.is_false(b:exists("#older"))
    w.shot("posts-older", true)
  end)

  it("retries a partially published post and shows how it ended without a reload", function()
    w.page("/workspace/posts?env=test")
    b:execute("window.notReloaded = true")
    w.click("#post-" .. posts.partial.id .. " button.retry")
    stack.eventually(function()
      return b:text("#post-" .. posts.partial.id .. " .post-status") == "published"
    end, 20, 0.1, "the row to show the post published")
    assert.is_true(b:execute("return window.notReloaded === true"))
    assert.matches("Done: the post is published", b:text("#post-" .. posts.partial.id .. " .retry-outcome"))
    assert.is_false(b:exists("#post-" .. posts.partial.id .. " button.retry"))
    assert.is_false(b:exists("#post-" .. posts.partial.id .. " .target-error"))
    w.shot("posts-retried", true)

    -- The API shows the same: a post.retry operation, the published target untouched.
    local _, post = w.api(key, "GET", "/api/v1/posts/" .. posts.partial.id)
    assert.are.equal("published", post.status)
    assert.are.equal(posts.partial.targets[1].platformPostId, post.targets[1].platformPostId)
    assert.are.equal("post.retry", stack.psql(w.sgw.database_url, "SELECT o.type FROM posts p JOIN operations o ON o.id = p.operation_id WHERE p.id = '"
      .. posts.partial.id .. "'"))
    -- Again: nothing to retry, said in words.
    local status, body = w.fetch("POST", "/workspace/posts/" .. posts.partial.id .. "/retry", "csrf=" .. w.csrf())
    assert.are.equal(409, status)
    assert.matches("Nothing to retry", cjson.decode(body).message)
  end)

  it("keeps another company's posts out of reach, and needs the page's CSRF token", function()
    local other = stack.cli(w.sgw, { "company", "create", "--name", "Other Co" }).companyId
    local other_key, other_pages = tenant(other)
    assert.are.equal(201, (w.api(other_key, "POST", "/api/v1/sandbox/failures",
      { socialAccountId = other_pages[1].id, error = "content_rejected", count = 1 })))
    local theirs = w.publish(other_key, { other_pages[1] }, "Their failed post")
    assert.are.equal("failed", theirs.status)

    w.page("/workspace/posts?env=test")
    assert.is_nil(b:source():find(theirs.id, 1, true))
    local status = w.fetch("POST", "/workspace/posts/" .. theirs.id .. "/retry", "csrf=" .. w.csrf())
    assert.are.equal(404, status)
    assert.are.equal(404, (w.fetch("GET", "/workspace/posts/" .. theirs.id .. "/row")))
    -- Without the token nothing happens either, even to one of ours.
    assert.are.equal(403, (w.fetch("POST", "/workspace/posts/" .. theirs.id .. "/retry", "")))
    local _, still = w.api(other_key, "GET", "/api/v1/posts/" .. theirs.id)
    assert.are.equal("failed", still.status)
  end)
end)

-- The workspace's Posts page in headless Chromium against the real stack:
-- the company's sandbox posts newest first, paged, with each target's
-- account, status, error and permalink; Retry on a partially published
-- post, whose outcome shows without a reload; another company's posts out
-- of reach; the CSRF token required. Screenshots at 1280x800 and 390 px wide
-- go to <build>/test-artifacts/workspace-posts/.
local stack = require "stack"
local webdriver = require "webdriver"
local cjson = require "cjson.safe"

local PASSWORD = "correct horse battery"
local SCOPES = "accounts:read posts:read posts:write operations:read sandbox:write"

describe("the workspace Posts page", function()
  local sgw, driver, b, artifacts
  local key, pages, posts = nil, {}, {}

  local function page(path) b:go(sgw.base_url .. path) end

  local function shot(name)
    b:set_size(1280, 800)
    b:screenshot(artifacts .. "/" .. name .. "-desktop.png", { full = true })
    b:set_size(390, 844)
    b:screenshot(artifacts .. "/" .. name .. "-phone.png", { full = true })
    b:screenshot(artifacts .. "/" .. name .. "-phone-top.png")
    b:set_size(1280, 800)
  end

  local function api(k, method, path, body)
    return sgw:json(method, path, { body = body, headers = { ["X-Api-Key"] = k,
      ["Idempotency-Key"] = method == "POST" and ("ws-posts-" .. math.random(1, 1e9)) or nil } })
  end

  -- A sandbox client of a company with two test Pages; returns its key and the pages.
  local function tenant(company)
    local k = stack.cli(sgw, { "client", "create", "--company", company, "--environment", "test",
      "--scopes", SCOPES }).apiKey
    local out = {}
    for i, name in ipairs { "Shop Page", "Outlet Page" } do
      local status, account = api(k, "POST", "/api/v1/sandbox/accounts", { platform = "facebook", name = name })
      assert(status == 201, cjson.encode(account))
      out[i] = account
    end
    return k, out
  end

  -- Publishes to the given pages and waits for the post to end; returns it.
  local function publish(k, targets, message)
    local list = {}
    for i, p in ipairs(targets) do list[i] = { socialAccountId = p.id, platform = "facebook" } end
    local status, body = api(k, "POST", "/api/v1/posts", { targets = list,
      content = { type = "text", message = message }, publishing = { mode = "immediate" } })
    assert(status == 202, cjson.encode(body))
    stack.wait_operation(function(path) return api(k, "GET", path) end, body.operationId)
    local _, post = api(k, "GET", "/api/v1/posts/" .. body.resource.postId)
    return post
  end

  local function csrf_of_page()
    return b:execute("return document.querySelector('input[name=csrf]').value")
  end

  -- A request from the page, with its cookies, as its script would send it; returns status and text.
  local function fetch(method, path, body)
    return table.unpack(b:execute([[
      var x = new XMLHttpRequest();
      x.open(arguments[0], arguments[1], false);
      x.setRequestHeader("Accept", "application/json");
      x.setRequestHeader("Content-Type", "application/x-www-form-urlencoded");
      x.send(arguments[2] || null);
      return [x.status, x.responseText];
    ]], { method, path, body }))
  end

  setup(function()
    artifacts = stack.build_dir() .. "/test-artifacts/workspace-posts"
    os.execute("rm -rf " .. stack.shell_quote(artifacts) .. " && mkdir -p " .. stack.shell_quote(artifacts))
    sgw = stack.start_sgw { name = "workspace-posts", set = {
      ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
      ["workspace.rate_limit_per_minute"] = 100000,
      ["api.rate_limit.per_minute"] = 100000,
      ["jobs.poll_interval_ms"] = 100,
    } }
    driver = webdriver.start()
    b = driver:session()

    page("/workspace/signup")
    b:type("#company", "Posting Co")
    b:type("#email", "owner@posting.test")
    b:type("#password", PASSWORD)
    b:click("#sign-up")
    b:wait_url("/workspace/login")
    b:type("#email", "owner@posting.test")
    b:type("#password", PASSWORD)
    b:click("#sign-in")
    b:wait_url("/workspace/connections")
    local company = stack.psql(sgw.database_url, "SELECT company_id FROM users WHERE email = 'owner@posting.test'")
    key, pages = tenant(company)

    -- Oldest first: 20 published posts, then one the Outlet Page refuses.
    for i = 1, 20 do posts[i] = publish(key, { pages[1] }, "Everyday post " .. i) end
    assert.are.equal(201, (api(key, "POST", "/api/v1/sandbox/failures",
      { socialAccountId = pages[2].id, error = "content_rejected", count = 1 })))
    posts.partial = publish(key, pages, "Summer sale <b>starts</b> today")
    assert.are.equal("partially_published", posts.partial.status)
  end)

  teardown(function()
    webdriver.stop_all()
    stack.cleanup()
  end)

  it("lists the company's posts newest first with each target's account, status, error and permalink", function()
    page("/workspace/posts")
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
    shot("posts")

    -- Paged: the oldest post is on the next page, alone.
    b:click("#older")
    b:wait_for("#newest")
    assert.are.equal(1, #b:find_all("#posts tbody tr"))
    assert.matches("Everyday post 1$", b:text("#post-" .. posts[1].id .. " .summary"))
    assert.is_false(b:exists("#older"))
    shot("posts-older")
  end)

  it("retries a partially published post and shows how it ended without a reload", function()
    page("/workspace/posts?env=test")
    b:execute("window.notReloaded = true")
    -- Clicked by script: WebDriver's click would wait for a page load that never comes.
    b:execute("document.querySelector(arguments[0]).click()", { "#post-" .. posts.partial.id .. " button.retry" })
    stack.eventually(function()
      return b:text("#post-" .. posts.partial.id .. " .post-status") == "published"
    end, 20, 0.1, "the row to show the post published")
    assert.is_true(b:execute("return window.notReloaded === true"))
    assert.matches("Done: the post is published", b:text("#post-" .. posts.partial.id .. " .retry-outcome"))
    assert.is_false(b:exists("#post-" .. posts.partial.id .. " button.retry"))
    assert.is_false(b:exists("#post-" .. posts.partial.id .. " .target-error"))
    shot("posts-retried")

    -- The API shows the same: a post.retry operation, the published target untouched.
    local _, post = api(key, "GET", "/api/v1/posts/" .. posts.partial.id)
    assert.are.equal("published", post.status)
    assert.are.equal(posts.partial.targets[1].platformPostId, post.targets[1].platformPostId)
    assert.are.equal("post.retry", stack.psql(sgw.database_url, "SELECT o.type FROM posts p JOIN operations o ON o.id = p.operation_id WHERE p.id = '"
      .. posts.partial.id .. "'"))
    -- Again: nothing to retry, said in words.
    local status, body = fetch("POST", "/workspace/posts/" .. posts.partial.id .. "/retry", "csrf=" .. csrf_of_page())
    assert.are.equal(409, status)
    assert.matches("Nothing to retry", cjson.decode(body).message)
  end)

  it("keeps another company's posts out of reach, and needs the page's CSRF token", function()
    local other = stack.cli(sgw, { "company", "create", "--name", "Other Co" }).companyId
    local other_key, other_pages = tenant(other)
    assert.are.equal(201, (api(other_key, "POST", "/api/v1/sandbox/failures",
      { socialAccountId = other_pages[1].id, error = "content_rejected", count = 1 })))
    local theirs = publish(other_key, { other_pages[1] }, "Their failed post")
    assert.are.equal("failed", theirs.status)

    page("/workspace/posts?env=test")
    assert.is_nil(b:source():find(theirs.id, 1, true))
    local status = fetch("POST", "/workspace/posts/" .. theirs.id .. "/retry", "csrf=" .. csrf_of_page())
    assert.are.equal(404, status)
    assert.are.equal(404, (fetch("GET", "/workspace/posts/" .. theirs.id .. "/row")))
    -- Without the token nothing happens either, even to one of ours.
    assert.are.equal(403, (fetch("POST", "/workspace/posts/" .. theirs.id .. "/retry", "")))
    local _, still = api(other_key, "GET", "/api/v1/posts/" .. theirs.id)
    assert.are.equal("failed", still.status)
  end)
end)

-- Sandbox permalink pages end to end: a post published to sandbox pages has
-- a permalinkUrl that opens a page of sgw's own with the post and its
-- comments (threaded, escaped, hidden and removed ones marked), 404 for any
-- other token, and the same page in headless Chromium at desktop and phone
-- widths (PNGs under build/test-artifacts/sandbox-pages/).
local stack = require "stack"
local cjson = require "cjson.safe"
local webdriver = require "webdriver"

local SCOPES = "accounts:read uploads:write posts:read posts:write operations:read comments:read comments:write sandbox:write"

describe("sandbox permalink pages", function()
  local sgw, key, other_key, fb, ig, n = nil, nil, nil, nil, nil, 0

  local function api(k, method, path, body, headers)
    headers = headers or {}
    headers["X-Api-Key"] = k
    if method ~= "GET" then
      n = n + 1
      headers["Idempotency-Key"] = headers["Idempotency-Key"] or ("sandbox-pages-" .. n .. "-" .. math.random(1, 1e9))
    end
    return sgw:json(method, path, { body = body, headers = headers })
  end

  local function new_key(company)
    return stack.cli(sgw, { "client", "create", "--company", company, "--environment", "test", "--scopes", SCOPES }).apiKey
  end

  -- Publishes and waits; returns the post with its targets.
  local function publish(k, body)
    body.publishing = { mode = "immediate" }
    local status, accepted = api(k, "POST", "/api/v1/posts", body)
    assert.are.equal(202, status, cjson.encode(accepted))
    local op = stack.wait_operation(function(path) return api(k, "GET", path) end, accepted.operationId)
    assert.are.equal("succeeded", op.status, cjson.encode(op))
    local _, post = api(k, "GET", "/api/v1/posts/" .. accepted.resource.postId)
    assert.are.equal("published", post.status)
    return post
  end

  local function comment(target, fields)
    fields.postTargetId = target.id
    local status, c = api(key, "POST", "/api/v1/sandbox/comments", fields)
    assert.are.equal(201, status, cjson.encode(c))
    return c
  end

  local function moderate(path, method)
    local status, accepted = api(key, method or "POST", path, {})
    assert.are.equal(202, status, cjson.encode(accepted))
    local op = stack.wait_operation(function(p) return api(key, "GET", p) end, accepted.operationId)
    assert.are.equal("succeeded", op.status, cjson.encode(op))
  end

  local function read_file(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("a")
    f:close()
    return s
  end

  setup(function()
    sgw = stack.start_sgw { name = "sandbox-pages", set = {
      ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
      ["api.rate_limit.per_minute"] = 100000,
      ["api.rate_limit.anonymous_per_minute"] = 100000,
      ["jobs.poll_interval_ms"] = 100,
    } }
    key = new_key(stack.cli(sgw, { "company", "create", "--name", "Pages Co" }).companyId)
    other_key = new_key(stack.cli(sgw, { "company", "create", "--name", "Other Co" }).companyId)
    fb = select(2, api(key, "POST", "/api/v1/sandbox/accounts", { platform = "facebook", name = "Corner Bakery" })).id
    ig = select(2, api(key, "POST", "/api/v1/sandbox/accounts", { platform = "instagram", name = "Corner Bakery IG" })).id
  end)

  teardown(function()
    webdriver.stop_all()
    stack.cleanup()
  end)

  local fb_target, page_url

  it("gives a published sandbox post a permalink to a page with its message and comments, escaped", function()
    local post = publish(key, { targets = { { socialAccountId = fb, platform = "facebook" } },
      content = { type = "link", message = "Fresh bread at 7.\nSecond line & more", link = "https://example.com/bread?a=1&b=2" } })
    fb_target = post.targets[1]
    page_url = fb_target.permalinkUrl
    local token = page_url:match("^" .. sgw.base_url:gsub("%p", "%%%0") .. "/sandbox/posts/(%w+)$")
    assert.is_truthy(token, page_url)
    assert.are.equal(32, #token)
    -- Nothing the API shows anyone else is in it.
    for _, id in ipairs({ post.id, fb_target.id, fb_target.platformPostId, fb }) do
      assert.is_nil(token:find(id, 1, true))
      assert.is_nil(id:find(token, 1, true))
    end

    local c1 = comment(fb_target, { text = "<script>alert('x')</script> Is it sourdough?", authorName = "Mallory <b>" })
    comment(fb_target, { text = "Yes, every day.", parentCommentId = c1.id, fromAccount = true })
    local c3 = comment(fb_target, { text = "Buy cheap followers here", authorName = "Spammer" })
    local c4 = comment(fb_target, { text = "Something I regret", authorName = "Pat" })
    moderate("/api/v1/comments/" .. c3.id .. "/hide")
    moderate("/api/v1/comments/" .. c4.id, "DELETE")

    local status, html, headers = stack.request("GET", page_url)
    assert.are.equal(200, status, html)
    assert.matches("^text/html", headers["content-type"])
    assert.are.equal("no-store", headers["cache-control"])
    assert.matches("noindex", headers["x-robots-tag"])
    assert.are.equal("no-referrer", headers["referrer-policy"])
    assert.is_nil(headers["set-cookie"])
    assert.truthy(html:find("Corner Bakery", 1, true))
    assert.truthy(html:find('data-platform="facebook"', 1, true))
    assert.truthy(html:find("Fresh bread at 7.\nSecond line &amp; more", 1, true))
    assert.truthy(html:find('href="https://example.com/bread?a=1&amp;b=2"', 1, true))
    -- Comment text is the commenter's: escaped, never markup.
    assert.is_nil(html:find("<script>alert", 1, true))
    assert.is_nil(html:find("<b>", 1, true))
    assert.truthy(html:find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; Is it sourdough?", 1, true))
    assert.truthy(html:find("Mallory &lt;b&gt;", 1, true))
    -- The page's reply sits in the thread of the comment it answers.
    local thread = html:match('<li><div class="sb%-comment">.-Is it sourdough%?.-</ol></li>')
    assert.truthy(thread and thread:find("Yes, every day.", 1, true), html)
    assert.truthy(thread:find("Author", 1, true))
    -- Hidden: shown and marked; deleted: its place kept, its text gone.
    assert.truthy(html:find('is%-hidden">.-Spammer.-Hidden.-Buy cheap followers here'))
    assert.truthy(html:find('is%-deleted">.-Pat.-This comment was removed%.'))
    assert.is_nil(html:find("Something I regret", 1, true))
  end)

  it("answers 404 with the same page for any other token, malformed or not", function()
    local bodies = {}
    local real = page_url:match("(%w+)$")
    -- One character off the real token; the replacement must differ from the real last
    -- character, or a token ending in it would be the real address.
    local one_off = real:sub(1, 31) .. (real:sub(32) == "Z" and "Y" or "Z")
    for _, token in ipairs({ string.rep("A", 32), one_off,
      real:lower(), "x", fb_target.id, fb_target.platformPostId }) do
      local status, html, headers = stack.request("GET", sgw.base_url .. "/sandbox/posts/" .. token)
      assert.are.equal(404, status, token)
      assert.are.equal("no-store", headers["cache-control"])
      assert.matches("noindex", headers["x-robots-tag"])
      bodies[#bodies + 1] = html
    end
    for i = 2, #bodies do assert.are.equal(bodies[1], bodies[i]) end
    assert.truthy(bodies[1]:find("No sandbox post has this address", 1, true))
    assert.is_nil(bodies[1]:find("Corner Bakery", 1, true))
  end)

  it("shows an Instagram post's uploaded image through a signed media URL, to anyone with the link only", function()
    local jpeg = read_file(stack.repo_root() .. "/scripts/demo.jpg")
    local status, upload = api(key, "POST", "/api/v1/uploads", jpeg, { ["Content-Type"] = "image/jpeg" })
    assert.are.equal(201, status, cjson.encode(upload))
    local post = publish(key, { targets = { { socialAccountId = ig, platform = "instagram" } },
      content = { type = "image", message = "Morning batch #bread" },
      media = { { source = "upload", uploadId = upload.uploadId } } })
    local target = post.targets[1]
    comment(target, { text = "Looks great!", authorName = "sam.eats" })

    local _, html = stack.request("GET", target.permalinkUrl)
    assert.truthy(html:find('data-platform="instagram"', 1, true))
    assert.truthy(html:find("Morning batch #bread", 1, true))
    local src = assert(html:match('<img class="sb%-image" id="image" src="([^"]+)"'), html)
    src = src:gsub("&amp;", "&")
    assert.matches("/media/" .. upload.uploadId .. "%?exp=%d+&sig=", src)
    local img_status, bytes, img_headers = stack.request("GET", src)
    assert.are.equal(200, img_status)
    assert.matches("^image/jpeg", img_headers["content-type"])
    assert.are.equal(#jpeg, #bytes)

    -- Another company's client sees nothing of it through the API.
    assert.are.equal(404, (api(other_key, "GET", "/api/v1/posts/" .. post.id)))
  end)

  it("looks right in a browser, on a desktop and on a phone", function()
    local artifacts = stack.build_dir() .. "/test-artifacts/sandbox-pages"
    os.execute("mkdir -p " .. stack.shell_quote(artifacts))
    local b = webdriver.start():session()
    local function shot(name)
      b:set_size(1280, 800)
      b:screenshot(artifacts .. "/" .. name .. "-desktop.png", { full = true })
      b:set_size(390, 844)
      b:screenshot(artifacts .. "/" .. name .. "-phone.png", { full = true })
      -- Nothing overflows a phone's width.
      assert.is_true(b:execute("return document.documentElement.scrollWidth <= window.innerWidth"))
      b:set_size(1280, 800)
    end
    b:go(page_url)
    assert.are.equal("Corner Bakery", b:text("#account-name"))
    assert.truthy(b:text("#comments"):find("<script>alert('x')</script> Is it sourdough?", 1, true))
    -- The escaped script never ran.
    assert.is_false(b:execute("return document.querySelectorAll('#comments script').length > 0"))
    shot("facebook")
    local _, posts = api(key, "GET", "/api/v1/posts?limit=10")
    for _, p in ipairs(posts.data) do
      if p.targets[1].platform == "instagram" then b:go(p.targets[1].permalinkUrl) end
    end
    b:wait_for("#image")
    assert.is_true(b:execute("var i = document.querySelector('#image'); return i.complete && i.naturalWidth > 0"))
    shot("instagram")
    b:go(sgw.base_url .. "/sandbox/posts/" .. string.rep("A", 32))
    assert.truthy(b:text("main"):find("No sandbox post has this address", 1, true))
    shot("not-found")
    b:quit()
  end)
end)

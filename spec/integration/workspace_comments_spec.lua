-- The workspace's Comments and Rules pages in headless Chromium against the
-- real stack: the company's sandbox comments (never another company's),
-- filtered; Hide whose outcome shows without a reload and that the sandbox
-- post page, the API, the history and the change feed agree on; readable
-- refusals; hostile comment text shown as text; the Rules editor saving a
-- rule, showing a 422 error next to its field, and the Test box.
-- Screenshots at 1280x800 and 390 px wide go to <build>/test-artifacts/workspace-comments/.
local stack = require "stack"
local webdriver = require "webdriver"
local cjson = require "cjson.safe"

local PASSWORD = "correct horse battery"
local SCOPES = "accounts:read posts:read posts:write operations:read comments:read comments:write "
  .. "sandbox:write"
local HOSTILE = [[<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"> nice post]]

describe("the workspace Comments and Rules pages", function()
  local sgw, driver, b, artifacts
  local key, user_id, shop, outlet, target, comments = nil, nil, nil, nil, nil, {}

  local function page(path) b:go(sgw.base_url .. path) end

  local function shot(name)
    b:set_size(1280, 800)
    b:screenshot(artifacts .. "/" .. name .. "-desktop.png", { full = true })
    b:set_size(390, 844)
    b:screenshot(artifacts .. "/" .. name .. "-phone.png", { full = true })
    b:set_size(1280, 800)
  end

  local function api(k, method, path, body)
    return sgw:json(method, path, { body = body, headers = { ["X-Api-Key"] = k,
      ["Idempotency-Key"] = method == "POST" and ("ws-comments-" .. math.random(1, 1e9)) or nil } })
  end

  -- A sandbox client of a company with a test Page, a published post and
  -- the given comments on it; returns the key, the account, the target and the comments.
  local function tenant(company, page_name, texts)
    local k = stack.cli(sgw, { "client", "create", "--company", company, "--environment", "test",
      "--scopes", SCOPES }).apiKey
    local status, account = api(k, "POST", "/api/v1/sandbox/accounts", { platform = "facebook", name = page_name })
    assert(status == 201, cjson.encode(account))
    local s, op = api(k, "POST", "/api/v1/posts", { targets = { { socialAccountId = account.id, platform = "facebook" } },
      content = { type = "text", message = "Grand opening of the " .. page_name }, publishing = { mode = "immediate" } })
    assert(s == 202, cjson.encode(op))
    stack.wait_operation(function(path) return api(k, "GET", path) end, op.operationId)
    local _, post = api(k, "GET", "/api/v1/posts/" .. op.resource.postId)
    local list = {}
    for i, t in ipairs(texts) do
      local cs, c = api(k, "POST", "/api/v1/sandbox/comments", { postTargetId = post.targets[1].id, text = t[1],
        authorName = t[2], fromAccount = t[3] })
      assert(cs == 201, cjson.encode(c))
      list[i] = c
    end
    return k, account, post.targets[1], list
  end

  local function csrf_of_page()
    return b:execute("return document.querySelector('input[name=csrf]').value")
  end

  -- A request from the page, with its cookies, as its script would send it.
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

  -- Clicked by script: WebDriver's click would wait for a page load that never comes.
  local function click(css) b:execute("document.querySelector(arguments[0]).click()", { css }) end

  setup(function()
    artifacts = stack.build_dir() .. "/test-artifacts/workspace-comments"
    os.execute("rm -rf " .. stack.shell_quote(artifacts) .. " && mkdir -p " .. stack.shell_quote(artifacts))
    sgw = stack.start_sgw { name = "workspace-comments", set = {
      ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
      ["workspace.rate_limit_per_minute"] = 100000,
      ["api.rate_limit.per_minute"] = 100000,
      ["jobs.poll_interval_ms"] = 100,
    } }
    driver = webdriver.start()
    b = driver:session()

    page("/workspace/signup")
    b:type("#company", "Moderating Co")
    b:type("#email", "mod@moderating.test")
    b:type("#password", PASSWORD)
    b:click("#sign-up")
    b:wait_url("/workspace/login")
    b:type("#email", "mod@moderating.test")
    b:type("#password", PASSWORD)
    b:click("#sign-in")
    b:wait_url("/workspace/connections")
    local company = stack.psql(sgw.database_url, "SELECT company_id FROM users WHERE email = 'mod@moderating.test'")
    user_id = stack.psql(sgw.database_url, "SELECT id FROM users WHERE email = 'mod@moderating.test'")
    key, shop, target, comments = tenant(company, "Shop Page", {
      { "Where is my order?", "Ann Buyer" },
      { HOSTILE, "<b>Mallory</b>" },
      { "Thanks for asking, it ships today", nil, true },
      { "Buy followers at spam.example", "Spam Bot" },
    })
  end)

  teardown(function()
    webdriver.stop_all()
    stack.cleanup()
  end)

  it("lists the company's sandbox comments with their post and account, hostile text as text, and filters them", function()
    local other = stack.cli(sgw, { "company", "create", "--name", "Other Co" }).companyId
    local _, _, _, theirs = tenant(other, "Their Page", { { "Their private comment", "Eve" } })

    page("/workspace/comments?env=test")
    assert.are.equal("Comments", b:text("nav a[aria-current='page']"))
    assert.are.equal(4, #b:find_all("#comments li.comment"))
    assert.is_nil(b:source():find(theirs[1].id, 1, true))
    assert.is_nil(b:source():find("Their private comment", 1, true))
    -- Newest first; each with its author, account and post.
    assert.are.equal("comment-" .. comments[4].id, b:execute("return document.querySelector('#comments li').id"))
    local row = "#comment-" .. comments[1].id
    assert.are.equal("Ann Buyer", b:text(row .. " .comment-author"))
    assert.matches("Shop Page", b:text(row .. " .comment-account"))
    assert.are.equal("Grand opening of the Shop Page", b:text(row .. " .post-excerpt"))
    assert.are.equal(target.permalinkUrl, b:attribute(row .. " .comment-post a", "href"))
    -- Attacker-controlled text and names are text, never markup.
    local hostile = "#comment-" .. comments[2].id
    assert.are.equal(HOSTILE, b:text(hostile .. " .comment-text"))
    assert.are.equal("<b>Mallory</b>", b:text(hostile .. " .comment-author"))
    assert.is_true(b:execute("return window.pwned === undefined"))
    assert.is_false(b:exists(hostile .. " img"))
    -- The account's own comment: no Hide (Meta refuses it), and the server says so in words.
    local own = "#comment-" .. comments[3].id
    assert.matches("the account", b:text(own .. " .comment-head"))
    assert.is_false(b:exists(own .. " button.hide"))
    local status, body = fetch("POST", "/workspace/comments/" .. comments[3].id .. "/moderate",
      "action=hide&csrf=" .. csrf_of_page())
    assert.are.equal(422, status)
    assert.are.equal("cannot_hide_own_comment", cjson.decode(body).code)
    assert.matches("its own comments cannot be hidden", cjson.decode(body).message)
    -- Another company's comment is out of reach; without the page's token nothing happens.
    assert.are.equal(404, (fetch("POST", "/workspace/comments/" .. theirs[1].id .. "/moderate",
      "action=hide&csrf=" .. csrf_of_page())))
    assert.are.equal(403, (fetch("POST", "/workspace/comments/" .. comments[1].id .. "/moderate", "action=hide")))
    shot("comments")

    -- Text search and "written by" narrow the list.
    b:type("#q", "ORDER")
    b:click("#apply-filters")
    b:wait_for("#clear-filters")
    assert.are.equal(1, #b:find_all("#comments li.comment"))
    assert.is_true(b:exists("#comment-" .. comments[1].id))
    page("/workspace/comments?env=test&isFromAccount=true")
    assert.are.equal(1, #b:find_all("#comments li.comment"))
    assert.is_true(b:exists(own))
    page("/workspace/comments?env=test&q=" .. ("x"):rep(201))
    assert.matches("q must be 1 to 200 characters", b:text("#invalid-filter"))
  end)

  it("hides a comment without a reload, as the sandbox, the API, the history and the change feed then say", function()
    page("/workspace/comments?env=test")
    local row = "#comment-" .. comments[4].id
    b:execute("window.notReloaded = true")
    click(row .. " button.hide")
    stack.eventually(function()
      return b:exists(row .. " .comment-state") and b:text(row .. " .comment-state") == "hidden"
        and b:text(row .. " .moderate-outcome") == "Hidden.", b:text(row)
    end, 20, 0.1, "the row to show the comment hidden")
    assert.is_true(b:execute("return window.notReloaded === true"))
    assert.is_true(b:exists(row .. " button.unhide"))
    -- The history, opened: the signed-in user did it.
    click(row .. " details.history summary")
    assert.matches("mod@moderating.test hid it", b:text(row .. " details.history li"))
    assert.matches("succeeded", b:text(row .. " details.history li"))
    shot("comments-hidden")

    local _, c = api(key, "GET", "/api/v1/comments/" .. comments[4].id)
    assert.is_true(c.isHidden)
    local _, history = api(key, "GET", "/api/v1/comments/" .. comments[4].id .. "/history")
    assert.are.same({ type = "user", id = user_id }, history.data[1].actor)
    local _, feed = api(key, "GET", "/api/v1/comments/changes?limit=100")
    local hidden
    for _, change in ipairs(feed.data) do
      if change.type == "hidden" and change.comment.id == comments[4].id then hidden = change end
    end
    assert.are.same({ type = "user", id = user_id }, hidden.actor)
    -- The sandbox's post page shows it hidden too.
    page(target.permalinkUrl:gsub("^https?://[^/]+", ""))
    assert.matches("spam.example", b:text(".sb-comment.is-hidden"))

    -- Now deleted: a second delete is refused in words (409).
    page("/workspace/comments?env=test&isHidden=true")
    assert.are.equal(1, #b:find_all("#comments li.comment"))
    b:execute("window.confirm = function () { return true }")
    click(row .. " button.delete")
    stack.eventually(function()
      return b:exists(row .. ".is-deleted") and b:text(row .. " .moderate-outcome") == "Deleted."
    end, 20, 0.1, "the row to show the comment deleted")
    assert.is_false(b:exists(row .. " button.delete"))
    local status, body = fetch("POST", "/workspace/comments/" .. comments[4].id .. "/moderate",
      "action=delete&csrf=" .. csrf_of_page())
    assert.are.equal(409, status)
    assert.matches("was deleted", cjson.decode(body).message)
  end)

  it("saves a rule, shows a refused field next to it, and tests a sample text", function()
    page("/workspace/rules?env=test")
    assert.are.equal("Rules", b:text("nav a[aria-current='page']"))
    assert.is_true(b:exists("#no-rules:not([hidden])"))
    click("#add-rule")
    b:type("li.rule .rule-name", "No spam links")
    b:type("li.rule .rule-keywords", "followers, spam")
    b:type("li.rule .rule-regex", "([a-z")
    click("#add-rule")
    b:type("li.rule:nth-child(2) .rule-name", "Flag questions")
    b:type("li.rule:nth-child(2) .rule-keywords", "where")
    b:execute("document.querySelector('li.rule:nth-child(2) .rule-action').value = 'flag'")
    click("#save")
    stack.eventually(function() return b:exists("li.rule .field-error") end, 10, 0.1, "the regex error")
    local err = b:find_all("[data-error-for='/match/regex']")
    assert.are.equal(1, #err)
    assert.are.equal("true", b:attribute("li.rule:nth-child(1) .rule-regex", "aria-invalid"))
    assert.matches("regex", b:text("[data-error-for='/match/regex']"))
    assert.matches("nothing was saved", b:text("#rules-outcome"))
    local _, saved = api(key, "GET", "/api/v1/moderation/rules")
    assert.are.equal(0, #saved.rules)
    shot("rules-invalid")

    -- Fixed, moved down below the other, saved: the API has both, in order.
    b:execute("document.querySelector('li.rule .rule-regex').value = ''")
    click("li.rule:nth-child(1) .rule-down")
    assert.are.equal("Flag questions", b:execute("return document.querySelector('li.rule .rule-name').value"))
    click("#save")
    stack.eventually(function() return b:text("#rules-outcome"):find("Saved: 2 rules") ~= nil end, 10, 0.1, "saved")
    assert.is_false(b:exists(".field-error"))
    _, saved = api(key, "GET", "/api/v1/moderation/rules")
    assert.are.equal("Flag questions", saved.rules[1].name)
    assert.are.equal("flag", saved.rules[1].action)
    assert.are.same({ "followers", "spam" }, saved.rules[2].match.keywords)
    assert.are.equal("hide", saved.rules[2].action)

    -- The page shows what was saved; the Test box says which rule acts.
    page("/workspace/rules?env=test")
    assert.are.equal(2, #b:find_all("li.rule"))
    b:type("#test-text", "Cheap FOLLOWERS here")
    click("#run-test")
    stack.eventually(function() return b:text("#test-outcome"):find("matches") ~= nil end, 10, 0.1, "the test's answer")
    assert.matches("No spam links", b:text("#test-outcome"))
    assert.matches("would hide it", b:text("#test-outcome"))
    assert.are.equal(saved.rules[2].id, b:attribute("#test-outcome", "data-rule"))
    shot("rules")
    b:execute("document.getElementById('test-text').value = 'Lovely'")
    click("#run-test")
    stack.eventually(function() return b:text("#test-outcome"):find("No saved rule") ~= nil end, 10, 0.1, "no match")
  end)
end)

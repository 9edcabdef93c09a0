-- The workspace's Comments and Rules pages in headless Chromium against the
-- real stack: the company's sandbox comments (never another company's),
-- filtered; Reply, Hide, Unhide and Delete (on Facebook and Instagram
-- comments), each outcome shown without a reload and then agreed on by the
-- sandbox post page, the API, the history, the change feed and the database;
-- Delete only once confirmed; readable refusals; hostile comment text shown
-- as text; the Rules editor saving a rule, showing a 422 error next to its
-- field, and the Test box.
-- Screenshots at 1280x800 and 390 px wide go to <build>/test-artifacts/workspace-comments/.
local stack = require "stack"
local workspace_browser = require "workspace_browser"
local cjson = require "cjson.safe"

local SCOPES = "accounts:read uploads:write posts:read posts:write operations:read comments:read comments:write "
  .. "sandbox:write"
local HOSTILE = [[<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"> nice post]]

describe("the workspace Comments and Rules pages", function()
  local w, b
  local key, user_id, shop, target, comments = nil, nil, nil, nil, {}

  -- Sandbox comments on a target, each { text, author name, from the account };
  -- returns them.
  local function comment_on(k, on, texts)
    local list = {}
    for i, t in ipairs(texts) do
      local status, c = w.api(k, "POST", "/api/v1/sandbox/comments", { postTargetId = on.id, text = t[1],
        authorName = t[2], fromAccount = t[3] })
      assert(status == 201, cjson.encode(c))
      list[i] = c
    end
    return list
  end

  -- A sandbox client of a company with a test Page, a published post and
  -- the given comments on it; returns the key, the account, the target and the comments.
  local function tenant(company, page_name, texts)
    local k = w.client(company, SCOPES)
    local account = w.account(k, "facebook", page_name)
    local post = w.publish(k, { account }, "Grand opening of the " .. page_name)
    return k, account, post.targets[1], comment_on(k, post.targets[1], texts)
  end

  -- What an element shows now, or nil: read without waiting for it.
  local function shown(css)
    return b:execute("var e = document.querySelector(arguments[0]); return e ? e.innerText : null", { css })
  end

  -- Clicks a button of a comment's row (by script), waits until the row says
  -- `outcome` (the operation has ended) and checks the page never reloaded;
  -- returns the row's selector.
  local function act(id, button, outcome)
    local row = "#comment-" .. id
    b:execute("window.notReloaded = true")
    w.click(row .. " " .. button)
    stack.eventually(function()
      local said = shown(row .. " .moderate-outcome")
      return said == outcome, said
    end, 20, 0.1, "the row to say " .. outcome)
    assert.is_true(b:execute("return window.notReloaded === true"))
    return row
  end

  -- The comment's changes of one type in the change feed.
  local function changes(id, type)
    local _, feed = w.api(key, "GET", "/api/v1/comments/changes?limit=100")
    local out = {}
    for _, change in ipairs(feed.data) do
      if change.type == type and change.comment.id == id then out[#out + 1] = change end
    end
    return out
  end

  local function db(sql) return stack.psql(w.sgw.database_url, sql) end

  -- The comment of the target's sandbox post page whose author or text is
  -- the one given ({ author = ... } or { text = ... }): {class, author, text}, or nil.
  local function sandbox_comment(on, want)
    w.page(on.permalinkUrl:gsub("^https?://[^/]+", ""))
    for _, c in ipairs(b:execute([[
      return Array.prototype.map.call(document.querySelectorAll('.sb-comment'), function (c) {
        var author = c.querySelector('.sb-author'), text = c.querySelector('.sb-text');
        return { class: c.className, author: author ? author.textContent : '', text: text ? text.textContent : '' };
      });]])) do
      if (want.author and c.author == want.author) or (want.text and c.text == want.text) then return c end
    end
    return nil
  end

  setup(function()
    w = workspace_browser.start { name = "workspace-comments", company = "Moderating Co", email = "mod@moderating.test" }
    b, user_id = w.b, w.user_id
    key, shop, target, comments = tenant(w.company_id, "Shop Page", {
      { "Where is my order?", "Ann Buyer" },
      { HOSTILE, "<b>Mallory</b>" },
      { "Thanks for asking, it ships today", nil, true },
      { "Buy followers at spam.example", "Spam Bot" },
    })
  end)

  teardown(workspace_browser.stop)

  it("lists the company's sandbox comments with their post and account, hostile text as text, and filters them", function()
    local other = stack.cli(w.sgw, { "company", "create", "--name", "Other Co" }).companyId
    local _, _, _, theirs = tenant(other, "Their Page", { { "Their private comment", "Eve" } })

    w.page("/workspace/comments?env=test")
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
    local status, body = w.fetch("POST", "/workspace/comments/" .. comments[3].id .. "/moderate",
      "action=hide&csrf=" .. w.csrf())
    assert.are.equal(422, status)
    assert.are.equal("cannot_hide_own_comment", cjson.decode(body).code)
    assert.matches("its own comments cannot be hidden", cjson.decode(body).message)
    -- Another company's comment is out of reach; without the page's token nothing happens.
    assert.are.equal(404, (w.fetch("POST", "/workspace/comments/" .. theirs[1].id .. "/moderate",
      "action=hide&csrf=" .. w.csrf())))
    assert.are.equal(403, (w.fetch("POST", "/workspace/comments/" .. comments[1].id .. "/moderate", "action=hide")))
    w.shot("comments")

    -- Text search and "written by" narrow the list.
    b:type("#q", "ORDER")
    b:click("#apply-filters")
    b:wait_for("#clear-filters")
    assert.are.equal(1, #b:find_all("#comments li.comment"))
    assert.is_true(b:exists("#comment-" .. comments[1].id))
    w.page("/workspace/comments?env=test&isFromAccount=true")
    assert.are.equal(1, #b:find_all("#comments li.comment"))
    assert.is_true(b:exists(own))
    w.page("/workspace/comments?env=test&q=" .. ("x"):rep(201))
    assert.matches("q must be 1 to 200 characters", b:text("#invalid-filter"))
  end)

  it("hides a comment without a reload, as the sandbox, the API, the history and the change feed then say", function()
    w.page("/workspace/comments?env=test")
    local row = act(comments[4].id, "button.hide", "Hidden.")
    assert.are.equal("hidden", b:text(row .. " .comment-state"))
    assert.is_true(b:exists(row .. " button.unhide"))
    -- The history, opened: the signed-in user did it.
    w.click(row .. " details.history summary")
    assert.matches("mod@moderating.test hid it", b:text(row .. " details.history li"))
    assert.matches("succeeded", b:text(row .. " details.history li"))
    w.shot("comments-hidden")

    local _, c = w.api(key, "GET", "/api/v1/comments/" .. comments[4].id)
    assert.is_true(c.isHidden)
    local _, history = w.api(key, "GET", "/api/v1/comments/" .. comments[4].id .. "/history")
    assert.are.same({ type = "user", id = user_id }, history.data[1].actor)
    assert.are.same({ type = "user", id = user_id }, changes(comments[4].id, "hidden")[1].actor)
    -- The sandbox's post page shows it hidden too.
    assert.matches("is%-hidden", sandbox_comment(target, { author = "Spam Bot" }).class)

    -- Now deleted: a second delete is refused in words (409).
    w.page("/workspace/comments?env=test&isHidden=true")
    assert.are.equal(1, #b:find_all("#comments li.comment"))
    b:execute("window.confirm = function () { return true }")
    act(comments[4].id, "button.delete", "Deleted.")
    assert.is_true(b:exists(row .. ".is-deleted"))
    assert.is_false(b:exists(row .. " button.delete"))
    local status, body = w.fetch("POST", "/workspace/comments/" .. comments[4].id .. "/moderate",
      "action=delete&csrf=" .. w.csrf())
    assert.are.equal(409, status)
    assert.matches("was deleted", cjson.decode(body).message)
  end)

  it("replies to a comment without a reload: the reply is the account's comment under it", function()
    local id, text = comments[1].id, "It ships today, <b>Ann</b> & thanks!"
    w.page("/workspace/comments?env=test")
    local row = "#comment-" .. id
    w.click(row .. " details.reply summary")
    b:type("#reply-" .. id, text)
    act(id, "form.reply-form button", "Replied.")
    -- The row is fresh: the form closed and empty, the history says who replied.
    assert.is_false(b:execute("return document.querySelector(arguments[0]).open", { row .. " details.reply" }))
    assert.are.equal("", b:execute("return document.getElementById(arguments[0]).value", { "reply-" .. id }))
    w.click(row .. " details.history summary")
    assert.matches("mod@moderating.test replied", b:text(row .. " details.history li"))
    assert.matches("succeeded", b:text(row .. " details.history li"))

    -- The operation's result names the reply: the account's, under the comment, as typed.
    local op_id = db("SELECT id FROM operations WHERE resource_id = '" .. id .. "' AND type = 'comment.reply'")
    local _, op = w.api(key, "GET", "/api/v1/operations/" .. op_id)
    assert.are.equal("succeeded", op.status)
    local _, reply = w.api(key, "GET", "/api/v1/comments/" .. op.result.commentId)
    assert.are.equal(text, reply.text)
    assert.is_true(reply.isFromAccount)
    assert.are.equal(comments[1].platformCommentId, reply.parentPlatformCommentId)
    assert.are.equal("Shop Page", reply.author.name)
    assert.are.equal("t", db("SELECT is_from_account FROM comments WHERE id = '" .. reply.id .. "'"))
    local _, history = w.api(key, "GET", "/api/v1/comments/" .. id .. "/history")
    assert.are.same({ action = "comment.reply", actor = { type = "user", id = user_id }, outcome = "succeeded" },
      { action = history.data[1].action, actor = history.data[1].actor, outcome = history.data[1].outcome })
    assert.are.same({ type = "user", id = user_id }, changes(reply.id, "replied")[1].actor)
    -- The sandbox's post page shows the reply, and the list, next time, shows it as a reply.
    assert.is_not_nil(sandbox_comment(target, { text = text }))
    w.page("/workspace/comments?env=test")
    local listed = "#comment-" .. reply.id
    assert.are.equal(text, b:text(listed .. " .comment-text"))
    assert.matches("the account", b:text(listed .. " .comment-head"))
    assert.matches("reply", b:text(listed .. " .comment-head"))
  end)

  it("unhides a hidden comment without a reload, as the sandbox, the API, the history and the change feed then say", function()
    local id = comments[2].id
    local _, hidden = w.api(key, "POST", "/api/v1/comments/" .. id .. "/hide")
    assert.are.equal("succeeded", stack.wait_operation(function(path) return w.api(key, "GET", path) end,
      hidden.operationId).status)
    w.page("/workspace/comments?env=test")
    local row = "#comment-" .. id
    assert.are.equal("hidden", b:text(row .. " .comment-state"))
    assert.is_false(b:exists(row .. " button.hide"))
    act(id, "button.unhide", "Shown again.")
    assert.is_false(b:exists(row .. " .comment-state"))
    assert.is_false(b:exists(row .. ".is-hidden"))
    assert.is_false(b:exists(row .. " button.unhide"))
    assert.is_true(b:exists(row .. " button.hide"))
    -- Hostile text stays text in the fresh row.
    assert.are.equal(HOSTILE, b:text(row .. " .comment-text"))
    assert.is_true(b:execute("return window.pwned === undefined"))
    w.click(row .. " details.history summary")
    local entries = b:find_all(row .. " details.history li")
    assert.are.equal(2, #entries)
    assert.matches("^API client .* hid it", b:text(entries[1]))
    assert.matches("^mod@moderating.test unhid it", b:text(entries[2]))
    assert.matches("succeeded", b:text(entries[2]))
    w.shot("comments-unhidden")

    local _, c = w.api(key, "GET", "/api/v1/comments/" .. id)
    assert.is_false(c.isHidden)
    assert.are.equal("f", db("SELECT is_hidden FROM comments WHERE id = '" .. id .. "'"))
    local _, history = w.api(key, "GET", "/api/v1/comments/" .. id .. "/history")
    assert.are.same({ "comment.hide", "comment.unhide" }, { history.data[1].action, history.data[2].action })
    assert.are.same({ type = "user", id = user_id }, history.data[2].actor)
    assert.are.same({ type = "user", id = user_id }, changes(id, "unhidden")[1].actor)
    assert.is_nil(sandbox_comment(target, { author = "<b>Mallory</b>" }).class:find("is-hidden", 1, true))
  end)

  it("deletes a comment only once confirmed, without a reload, as the sandbox, the API and the change feed then say", function()
    local id = comments[1].id
    w.page("/workspace/comments?env=test")
    local row = "#comment-" .. id
    -- Not confirmed: nothing is sent (the handler stops before it says anything).
    b:execute("window.confirm = function (q) { window.asked = q; return false }")
    w.click(row .. " button.delete")
    assert.are.equal("Delete this comment on Facebook? It cannot be undone.", b:execute("return window.asked"))
    assert.are.equal("", shown(row .. " .moderate-outcome"))
    assert.is_false(b:execute("return document.querySelector(arguments[0]).disabled", { row .. " button.delete" }))
    assert.are.equal("0", db("SELECT count(*) FROM operations WHERE resource_id = '" .. id .. "' AND type = 'comment.delete'"))

    b:execute("window.confirm = function () { return true }")
    act(id, "button.delete", "Deleted.")
    assert.is_true(b:exists(row .. ".is-deleted"))
    assert.are.equal("deleted", b:text(row .. " .comment-state"))
    -- Nothing is left to do to it: no Reply, Hide or Delete.
    assert.is_false(b:exists(row .. " .comment-actions"))
    assert.are.equal("Where is my order?", b:text(row .. " .comment-text"))

    local _, c = w.api(key, "GET", "/api/v1/comments/" .. id)
    assert.is_true(c.isDeleted)
    assert.are.equal("t", db("SELECT is_deleted FROM comments WHERE id = '" .. id .. "'"))
    assert.are.same({ type = "user", id = user_id }, changes(id, "deleted")[1].actor)
    local removed = sandbox_comment(target, { author = "Ann Buyer" })
    assert.matches("is%-deleted", removed.class)
    assert.matches("This comment was removed", removed.text)
  end)

  it("shows an Instagram account's comments with their account and post, and acts on one", function()
    local ig = w.account(key, "instagram", "Shop IG")
    local jpeg = assert(io.open(stack.repo_root() .. "/scripts/demo.jpg", "rb"))
    local status, upload = w.api(key, "POST", "/api/v1/uploads", jpeg:read("a"), { ["Content-Type"] = "image/jpeg" })
    jpeg:close()
    assert.are.equal(201, status, cjson.encode(upload))
    local post = w.publish(key, { ig }, { type = "image", message = "New arrivals #shop" },
      { { source = "upload", uploadId = upload.uploadId } })
    assert.are.equal("published", post.status, cjson.encode(post))
    local ig_target = post.targets[1]
    local mine = comment_on(key, ig_target, { { "Love the colours", "ig.fan" }, { "Is this on sale?", "bargain.hunter" } })

    w.page("/workspace/comments?env=test&platform=instagram")
    assert.are.equal(2, #b:find_all("#comments li.comment"))
    local row = "#comment-" .. mine[2].id
    assert.are.equal("bargain.hunter", b:text(row .. " .comment-author"))
    assert.are.equal("@" .. ig.username .. " · Instagram", b:text(row .. " .comment-account"))
    assert.are.equal("New arrivals #shop", b:text(row .. " .post-excerpt"))
    assert.are.equal(ig_target.permalinkUrl, b:attribute(row .. " .comment-post a", "href"))
    assert.are.equal("Delete this comment on Instagram? It cannot be undone.",
      b:attribute(row .. " form[data-confirm]", "data-confirm"))

    act(mine[2].id, "button.hide", "Hidden.")
    assert.are.equal("hidden", b:text(row .. " .comment-state"))
    assert.is_true(b:exists(row .. " button.unhide"))
    w.shot("comments-instagram")
    local _, c = w.api(key, "GET", "/api/v1/comments/" .. mine[2].id)
    assert.is_true(c.isHidden)
    assert.are.equal("instagram", c.platform)
    assert.are.equal("t", db("SELECT is_hidden FROM comments WHERE id = '" .. mine[2].id .. "'"))
    assert.is_false(select(2, w.api(key, "GET", "/api/v1/comments/" .. mine[1].id)).isHidden)
    assert.matches("is%-hidden", sandbox_comment(ig_target, { author = "bargain.hunter" }).class)
  end)

  it("saves a rule, shows a refused field next to it, and tests a sample text", function()
    w.page("/workspace/rules?env=test")
    assert.are.equal("Rules", b:text("nav a[aria-current='page']"))
    assert.is_true(b:exists("#no-rules:not([hidden])"))
    w.click("#add-rule")
    b:type("li.rule .rule-name", "No spam links")
    b:type("li.rule .rule-keywords", "followers, spam")
    b:type("li.rule .rule-regex", "([a-z")
    w.click("#add-rule")
    b:type("li.rule:nth-child(2) .rule-name", "Flag questions")
    b:type("li.rule:nth-child(2) .rule-keywords", "where")
    b:execute("document.querySelector('li.rule:nth-child(2) .rule-action').value = 'flag'")
    w.click("#save")
    stack.eventually(function() return b:exists("li.rule .field-error") end, 10, 0.1, "the regex error")
    local err = b:find_all("[data-error-for='/match/regex']")
    assert.are.equal(1, #err)
    assert.are.equal("true", b:attribute("li.rule:nth-child(1) .rule-regex", "aria-invalid"))
    assert.matches("regex", b:text("[data-error-for='/match/regex']"))
    assert.matches("nothing was saved", b:text("#rules-outcome"))
    local _, saved = w.api(key, "GET", "/api/v1/moderation/rules")
    assert.are.equal(0, #saved.rules)
    w.shot("rules-invalid")

    -- Fixed, moved down below the other, saved: the API has both, in order.
    b:execute("document.querySelector('li.rule .rule-regex').value = ''")
    w.click("li.rule:nth-child(1) .rule-down")
    assert.are.equal("Flag questions", b:execute("return document.querySelector('li.rule .rule-name').value"))
    w.click("#save")
    stack.eventually(function() return b:text("#rules-outcome"):find("Saved: 2 rules") ~= nil end, 10, 0.1, "saved")
    assert.is_false(b:exists(".field-error"))
    _, saved = w.api(key, "GET", "/api/v1/moderation/rules")
    assert.are.equal("Flag questions", saved.rules[1].name)
    assert.are.equal("flag", saved.rules[1].action)
    assert.are.same({ "followers", "spam" }, saved.rules[2].match.keywords)
    assert.are.equal("hide", saved.rules[2].action)

    -- The page shows what was saved; the Test box says which rule acts.
    w.page("/workspace/rules?env=test")
    assert.are.equal(2, #b:find_all("li.rule"))
    b:type("#test-text", "Cheap FOLLOWERS here")
    w.click("#run-test")
    stack.eventually(function() return b:text("#test-outcome"):find("matches") ~= nil end, 10, 0.1, "the test's answer")
    assert.matches("No spam links", b:text("#test-outcome"))
    assert.matches("would hide it", b:text("#test-outcome"))
    assert.are.equal(saved.rules[2].id, b:attribute("#test-outcome", "data-rule"))
    w.shot("rules")
    b:execute("document.getElementById('test-text').value = 'Lovely'")
    w.click("#run-test")
    stack.eventually(function() return b:text("#test-outcome"):find("No saved rule") ~= nil end, 10, 0.1, "no match")
  end)
end)

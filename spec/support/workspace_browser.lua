-- spec/support/workspace_browser.lua — what the workspace's page specs in
-- headless Chromium share (Comments, Posts): one sgw, one browser session
-- signed in as the first user of a new company, and helpers to open pages,
-- take screenshots, call the API with a sandbox client's key, send requests
-- from the page as its script would, click by script and publish.
local stack = require "stack"
local webdriver = require "webdriver"
local cjson = require "cjson.safe"

local M = {}

M.PASSWORD = "correct horse battery"

--- Starts sgw and Chromium, signs up opts.company with opts.email and signs
--- in. opts.name names the instance, the Idempotency-Keys and the folder of
--- screenshots (<build>/test-artifacts/<name>/, emptied first).
--- Returns w: sgw, b (the browser session), artifacts, company_id, user_id,
--- and the functions below (w.page, w.shot, ...).
function M.start(opts)
  local w = { artifacts = stack.build_dir() .. "/test-artifacts/" .. opts.name }
  os.execute("rm -rf " .. stack.shell_quote(w.artifacts) .. " && mkdir -p " .. stack.shell_quote(w.artifacts))
  local sgw = stack.start_sgw { name = opts.name, set = {
    ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
    ["workspace.rate_limit_per_minute"] = 100000,
    ["api.rate_limit.per_minute"] = 100000,
    ["jobs.poll_interval_ms"] = 100,
  } }
  local b = webdriver.start():session()
  w.sgw, w.b = sgw, b

  function w.page(path) b:go(sgw.base_url .. path) end

  --- Saves <name>-desktop.png (1280x800) and <name>-phone.png (390 px wide),
  --- whole pages; with top, also <name>-phone-top.png, what a phone shows first.
  function w.shot(name, top)
    b:set_size(1280, 800)
    b:screenshot(w.artifacts .. "/" .. name .. "-desktop.png", { full = true })
    b:set_size(390, 844)
    b:screenshot(w.artifacts .. "/" .. name .. "-phone.png", { full = true })
    if top then b:screenshot(w.artifacts .. "/" .. name .. "-phone-top.png") end
    b:set_size(1280, 800)
  end

  --- The API with a client's key; a POST gets an Idempotency-Key of its own.
  function w.api(key, method, path, body, headers)
    headers = headers or {}
    headers["X-Api-Key"] = key
    if method == "POST" and not headers["Idempotency-Key"] then
      headers["Idempotency-Key"] = opts.name .. "-" .. math.random(1, 1e9)
    end
    return sgw:json(method, path, { body = body, headers = headers })
  end

  --- A test client of the company with these scopes; returns its API key.
  function w.client(company_id, scopes)
    return stack.cli(sgw, { "client", "create", "--company", company_id, "--environment", "test",
      "--scopes", scopes }).apiKey
  end

  --- A sandbox account of the key's company; returns it.
  function w.account(key, platform, name)
    local status, account = w.api(key, "POST", "/api/v1/sandbox/accounts", { platform = platform, name = name })
    assert(status == 201, cjson.encode(account))
    return account
  end

  --- Publishes content (a table, or a text's message; media: the post's media
  --- list, if any) to the accounts at once and waits for the post to end;
  --- returns the post with its targets.
  function w.publish(key, accounts, content, media)
    local targets = {}
    for i, a in ipairs(accounts) do targets[i] = { socialAccountId = a.id, platform = a.platform } end
    if type(content) == "string" then content = { type = "text", message = content } end
    local status, body = w.api(key, "POST", "/api/v1/posts", { targets = targets, content = content, media = media,
      publishing = { mode = "immediate" } })
    assert(status == 202, cjson.encode(body))
    stack.wait_operation(function(path) return w.api(key, "GET", path) end, body.operationId)
    local _, post = w.api(key, "GET", "/api/v1/posts/" .. body.resource.postId)
    return post
  end

  --- The CSRF token of the page shown.
  function w.csrf()
    return b:execute("return document.querySelector('input[name=csrf]').value")
  end

  --- A request from the page, with its cookies, as its script would send it;
  --- returns the status and the text of the answer.
  function w.fetch(method, path, body)
    return table.unpack(b:execute([[
      var x = new XMLHttpRequest();
      x.open(arguments[0], arguments[1], false);
      x.setRequestHeader("Accept", "application/json");
      x.setRequestHeader("Content-Type", "application/x-www-form-urlencoded");
      x.send(arguments[2] || null);
      return [x.status, x.responseText];
    ]], { method, path, body }))
  end

  --- Clicked by script: WebDriver's click would wait for a page load that never comes.
  function w.click(css) b:execute("document.querySelector(arguments[0]).click()", { css }) end

  w.page("/workspace/signup")
  b:type("#company", opts.company)
  b:type("#email", opts.email)
  b:type("#password", M.PASSWORD)
  b:click("#sign-up")
  b:wait_url("/workspace/login")
  b:type("#email", opts.email)
  b:type("#password", M.PASSWORD)
  b:click("#sign-in")
  b:wait_url("/workspace/connections")
  local email = opts.email:gsub("'", "''")
  w.company_id = stack.psql(sgw.database_url, "SELECT company_id FROM users WHERE email = '" .. email .. "'")
  w.user_id = stack.psql(sgw.database_url, "SELECT id FROM users WHERE email = '" .. email .. "'")
  return w
end

--- Stops Chromium and everything the stack started (for teardown).
function M.stop()
  webdriver.stop_all()
  stack.cleanup()
end

return M

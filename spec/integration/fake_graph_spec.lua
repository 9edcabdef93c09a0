-- The fake Graph API (spec/support/fake_graph.py) is faithful enough to test
-- sgw's adapters against: the paths, parameters, response and error shapes,
-- usage headers and behaviours of the Graph API notes, and scripted failures
-- that do what they say (in particular a time-out after the post was made).
-- Needs only python3; runs under the integration harness like the others.
local stack = require("stack")
local fake_graph = require("fake_graph")
local cjson = require("cjson")

local TIME_PATTERN = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%+0000$"

local ERROR_KEYS = {
  message = true, type = true, code = true, error_subcode = true, is_transient = true,
  error_user_title = true, error_user_msg = true, fbtrace_id = true,
}

--- Asserts a Graph-shaped error with that HTTP status, code and subcode
--- (nil: none); returns the error object.
local function assert_graph_error(status, body, want_status, code, subcode)
  assert.equal(want_status, status, "HTTP status; body: " .. cjson.encode(body or {}))
  assert.is_table(body, "no JSON body")
  local e = body.error
  assert.is_table(e, "no error object")
  for k in pairs(e) do
    assert.truthy(ERROR_KEYS[k], "unexpected key in the error: " .. k)
  end
  assert.is_string(e.message)
  assert.is_string(e.type)
  assert.is_string(e.fbtrace_id)
  assert.is_boolean(e.is_transient)
  assert.equal(code, e.code)
  assert.equal(subcode, e.error_subcode)
  return e
end

local function decode_header(headers, name)
  local raw = headers[name]
  assert.is_string(raw, "missing header " .. name)
  return cjson.decode(raw)
end

describe("fake Graph API", function()
  local fake

  setup(function()
    fake = fake_graph.start()
  end)

  teardown(function()
    fake.stop()
  end)

  before_each(function()
    fake.reset()
  end)

  it("starts on the given port and says so on stdout", function()
    assert.truthy(fake.log():find("fake-graph listening on " .. fake.port, 1, true))
    assert.equal(fake.url .. "/v21.0", fake.graph_url)
  end)

  -- ---------------------------------------------------------------- Facebook

  describe("Facebook Page feed", function()
    local page

    before_each(function()
      page = fake.add_page({ name = "Shop" })
    end)

    it("creates a post, {page_id}_{post_id}, and records it", function()
      local status, body = fake.graph("POST", "/" .. page.id .. "/feed",
        { message = "Hello", link = "https://example.com/a" }, page.access_token)
      assert.equal(200, status)
      local page_part, post_part = body.id:match("^(%d+)_(%d+)$")
      assert.equal(page.id, page_part)
      assert.truthy(post_part)

      local pub = fake.published()
      assert.equal(1, pub.total)
      assert.equal(1, pub.counts[page.id])
      local p = pub.data[1]
      assert.same({ "facebook", page.id, body.id, "Hello", "https://example.com/a" },
        { p.platform, p.account_id, p.id, p.message, p.link })
      assert.matches(TIME_PATTERN, p.created_time)
    end)

    it("takes parameters as JSON and the token as a Bearer header", function()
      local status, body = fake.graph("POST", "/" .. page.id .. "/feed", { message = "As JSON" },
        page.access_token, { json = true, bearer = true })
      assert.equal(200, status)
      local _, post = fake.graph("GET", "/" .. body.id, { fields = "message" }, page.access_token)
      assert.equal("As JSON", post.message)
    end)

    it("lists posts newest first, with cursors, and no next link on the last page", function()
      for i = 1, 3 do
        assert.equal(200, (fake.graph("POST", "/" .. page.id .. "/feed", { message = "post " .. i }, page.access_token)))
      end
      local status, first = fake.graph("GET", "/" .. page.id .. "/published_posts",
        { fields = "id,message,created_time", limit = 2 }, page.access_token)
      assert.equal(200, status)
      assert.equal(2, #first.data)
      assert.same({ "post 3", "post 2" }, { first.data[1].message, first.data[2].message })
      assert.matches(TIME_PATTERN, first.data[1].created_time)
      assert.is_string(first.paging.cursors.before)
      assert.is_string(first.paging.cursors.after)
      assert.is_string(first.paging.next)

      -- The next link works as given (it carries the token, like Meta's).
      local st2, second = stack.json("GET", first.paging.next)
      assert.equal(200, st2)
      assert.equal(1, #second.data)
      assert.equal("post 1", second.data[1].message)
      assert.is_nil(second.paging.next)

      -- ... and so does the after cursor by hand, on /feed too.
      local _, again = fake.graph("GET", "/" .. page.id .. "/feed",
        { fields = "id,message", limit = 2, after = first.paging.cursors.after }, page.access_token)
      assert.equal("post 1", again.data[1].message)
    end)

    it("filters a listing with since (what a time-out recovery asks for)", function()
      assert.equal(200, (fake.graph("POST", "/" .. page.id .. "/feed", { message = "old" }, page.access_token)))
      fake.config({ clock_offset_s = 120 }) -- two minutes later
      assert.equal(200, (fake.graph("POST", "/" .. page.id .. "/feed", { message = "new" }, page.access_token)))
      local since = os.time() + 60
      local _, list = fake.graph("GET", "/" .. page.id .. "/published_posts",
        { fields = "id,message,created_time", since = since }, page.access_token)
      assert.equal(1, #list.data)
      assert.equal("new", list.data[1].message)
    end)

    it("gives a post's permalink_url", function()
      local _, created = fake.graph("POST", "/" .. page.id .. "/feed", { message = "Link me" }, page.access_token)
      local post_id = created.id:match("_(%d+)$")
      local status, post = fake.graph("GET", "/" .. created.id,
        { fields = "id,permalink_url,message,created_time" }, page.access_token)
      assert.equal(200, status)
      assert.equal("https://www.facebook.com/" .. page.id .. "/posts/" .. post_id, post.permalink_url)
      assert.equal(created.id, post.id)
    end)

    it("refuses the same message twice in a row with 506", function()
      local path = "/" .. page.id .. "/feed"
      assert.equal(200, (fake.graph("POST", path, { message = "Same" }, page.access_token)))
      local status, body = fake.graph("POST", path, { message = "Same" }, page.access_token)
      assert_graph_error(status, body, 400, 506, nil)
      assert.equal(200, (fake.graph("POST", path, { message = "Other" }, page.access_token)))
      assert.equal(2, fake.published().total)
    end)

    it("refuses a post with neither message nor link", function()
      local status, body = fake.graph("POST", "/" .. page.id .. "/feed", {}, page.access_token)
      assert_graph_error(status, body, 400, 100, nil)
    end)
  end)

  describe("Facebook photos by URL", function()
    local page

    before_each(function()
      page = fake.add_page({})
    end)

    local function post_photo(url)
      return fake.graph("POST", "/" .. page.id .. "/photos", { url = url, caption = "A photo" }, page.access_token)
    end

    it("fetches a JPEG and answers id and post_id", function()
      local status, body = post_photo(fake.asset("tiny.jpg"))
      assert.equal(200, status)
      assert.matches("^%d+$", body.id)
      assert.matches("^" .. page.id .. "_%d+$", body.post_id)
      local p = fake.published().data[1]
      assert.same({ "photo", body.post_id, body.id, "A photo", fake.asset("tiny.jpg") },
        { p.kind, p.id, p.photo_id, p.message, p.url })
      -- The photo's post is in the feed with its caption.
      local _, feed = fake.graph("GET", "/" .. page.id .. "/feed", { fields = "id,message" }, page.access_token)
      assert.equal(body.post_id, feed.data[1].id)
      assert.equal("A photo", feed.data[1].message)
    end)

    it("takes PNG too", function()
      assert.equal(200, (post_photo(fake.asset("tiny.png"))))
    end)

    it("fetches from any server, as Meta does", function()
      -- A throwaway static server holding a real JPEG made by the fake.
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir -p " .. stack.shell_quote(dir)))
      local _, jpeg = stack.request("GET", fake.asset("tiny.jpg"))
      local f = assert(io.open(dir .. "/cat.jpg", "wb"))
      f:write(jpeg)
      f:close()
      local port = stack.free_port()
      local p = assert(io.popen("cd " .. stack.shell_quote(dir) .. " && exec python3 -m http.server "
        .. port .. " --bind 127.0.0.1 >/dev/null 2>&1 & echo $!"))
      local pid = p:read("l")
      p:close()
      local ok, err = pcall(function()
        stack.eventually(function()
          return stack.request("GET", "http://127.0.0.1:" .. port .. "/cat.jpg", { timeout = 1 }) == 200
        end, 10, 0.05, "static server up")
        local status, body = post_photo("http://127.0.0.1:" .. port .. "/cat.jpg")
        assert.equal(200, status, cjson.encode(body or {}))
        local missing_status, missing = post_photo("http://127.0.0.1:" .. port .. "/missing.jpg")
        assert_graph_error(missing_status, missing, 400, 324, nil)
      end)
      os.execute("kill " .. pid .. " 2>/dev/null; rm -rf " .. stack.shell_quote(dir))
      assert(ok, err)
    end)

    it("answers 324 when the image cannot be fetched", function()
      local status, body = post_photo("http://127.0.0.1:" .. stack.free_port() .. "/gone.jpg")
      local e = assert_graph_error(status, body, 400, 324, nil)
      assert.equal("(#324) Missing or invalid image file", e.message)
      status, body = fake.graph("POST", "/" .. page.id .. "/photos", {}, page.access_token)
      assert_graph_error(status, body, 400, 324, nil)
    end)

    it("answers 100/1366046 for what is not a JPEG or PNG, or over 4 MB", function()
      local status, body = post_photo(fake.asset("not-an-image.txt"))
      assert_graph_error(status, body, 400, 100, 1366046)
      status, body = post_photo(fake.asset("large.jpg"))
      assert_graph_error(status, body, 400, 100, 1366046)
      assert.equal(0, fake.published().total)
    end)
  end)

  -- ---------------------------------------------------------------- Instagram

  describe("Instagram content publishing", function()
    local page, ig

    before_each(function()
      page = fake.add_page({ instagram_business_account = { username = "shop.ig" } })
      ig = page.instagram_business_account
      fake.config({ container_ready_ms = 150 })
    end)

    local function create(params)
      return fake.graph("POST", "/" .. ig.id .. "/media", params, page.access_token)
    end

    local function status_of(container)
      local _, body = fake.graph("GET", "/" .. container, { fields = "status_code" }, page.access_token)
      return body.status_code
    end

    local function publish(container)
      return fake.graph("POST", "/" .. ig.id .. "/media_publish", { creation_id = container }, page.access_token)
    end

    local function wait_for(container, wanted)
      return stack.eventually(function()
        local s = status_of(container)
        return s == wanted, s
      end, 10, 0.05, "container " .. container .. " " .. wanted)
    end

    it("uses Instagram-like ids", function()
      assert.matches("^%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d?$", ig.id)
      assert.equal("shop.ig", ig.username)
    end)

    it("creates a container, refuses to publish it early, publishes it once ready, and never twice", function()
      fake.config({ container_ready_ms = 500 }) -- time enough for the early calls
      local status, created = create({ image_url = fake.asset("tiny.jpg"), caption = "Hi #fake" })
      assert.equal(200, status)
      local container = created.id
      assert.matches("^%d+$", container)

      local st, body = fake.graph("GET", "/" .. container, { fields = "status_code" }, page.access_token)
      assert.equal(200, st)
      assert.same({ status_code = "IN_PROGRESS", id = container }, body)

      local early_status, early = publish(container)
      assert_graph_error(early_status, early, 400, 9007, 2207027)

      wait_for(container, "FINISHED")
      local pub_status, published = publish(container)
      assert.equal(200, pub_status)
      assert.matches("^%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d?$", published.id)
      assert.equal("PUBLISHED", status_of(container))

      local again_status, again = publish(container)
      local e = assert_graph_error(again_status, again, 400, 9007, 2207008)
      assert.truthy(e.error_user_title:lower():find("already published"))

      local pub = fake.published()
      assert.equal(1, pub.counts[ig.id])
      assert.same({ "instagram", published.id, container, "Hi #fake" },
        { pub.data[1].platform, pub.data[1].id, pub.data[1].container_id, pub.data[1].caption })

      local _, media = fake.graph("GET", "/" .. published.id, { fields = "id,permalink,caption,timestamp" }, page.access_token)
      assert.matches("^https://www%.instagram%.com/p/[%w_%-]+/$", media.permalink)
      assert.matches(TIME_PATTERN, media.timestamp)
    end)

    it("publishes a container once when media_publish calls race", function()
      fake.config({ container_ready_ms = 0 })
      local _, c = create({ image_url = fake.asset("tiny.jpg") })
      wait_for(c.id, "FINISHED")
      -- Eight simultaneous calls (LuaSocket is blocking, so Python's threads).
      local racer = [[
import sys, threading, urllib.error, urllib.parse, urllib.request
url, cid, tok = sys.argv[1:4]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
codes, lock = [], threading.Lock()
def go():
    data = urllib.parse.urlencode({"creation_id": cid, "access_token": tok}).encode()
    try:
        code = opener.open(url, data=data, timeout=10).status
    except urllib.error.HTTPError as e:
        code = e.code
    with lock:
        codes.append(code)
threads = [threading.Thread(target=go) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(" ".join(str(c) for c in sorted(codes)))
]]
      local code, out = stack.sh("python3 -c " .. stack.shell_quote(racer) .. " "
        .. stack.shell_quote(fake.graph_url .. "/" .. ig.id .. "/media_publish") .. " "
        .. stack.shell_quote(c.id) .. " " .. stack.shell_quote(page.access_token))
      assert.equal(0, code, out)
      assert.equal("200 400 400 400 400 400 400 400", (out:gsub("%s+$", "")))
      assert.equal(1, fake.published().counts[ig.id])
    end)

    it("lists media newest first", function()
      for i = 1, 2 do
        local _, c = create({ image_url = fake.asset("tiny.jpg"), caption = "n" .. i })
        wait_for(c.id, "FINISHED")
        assert.equal(200, (publish(c.id)))
      end
      local status, list = fake.graph("GET", "/" .. ig.id .. "/media", { fields = "id,caption,timestamp" }, page.access_token)
      assert.equal(200, status)
      assert.same({ "n2", "n1" }, { list.data[1].caption, list.data[2].caption })
      assert.matches(TIME_PATTERN, list.data[1].timestamp)
      assert.is_nil(list.paging.next)
    end)

    it("turns a PNG into an ERROR container, refused at publish with 36001/2207005", function()
      local _, c = create({ image_url = fake.asset("tiny.png") })
      wait_for(c.id, "ERROR")
      local status, body = publish(c.id)
      assert_graph_error(status, body, 400, 36001, 2207005)
      assert.equal(0, fake.published().total)
    end)

    it("turns an image it cannot fetch into an ERROR container (9004/2207052)", function()
      local _, c = create({ image_url = "http://127.0.0.1:" .. stack.free_port() .. "/gone.jpg" })
      wait_for(c.id, "ERROR")
      local status, body = publish(c.id)
      assert_graph_error(status, body, 400, 9004, 2207052)
    end)

    it("refuses an aspect ratio outside 4:5 to 1.91:1 (36003/2207009)", function()
      local _, c = create({ image_url = fake.asset("wide.jpg") })
      wait_for(c.id, "ERROR")
      local status, body = publish(c.id)
      assert_graph_error(status, body, 400, 36003, 2207009)
    end)

    it("applies the caption rules (36004/2207010)", function()
      local url = fake.asset("tiny.jpg")
      assert.equal(200, (create({ image_url = url, caption = string.rep("x", 2200) })))
      local status, body = create({ image_url = url, caption = string.rep("x", 2201) })
      assert_graph_error(status, body, 400, 36004, 2207010)
      local tags, mentions = {}, {}
      for i = 1, 31 do
        tags[i] = "#t" .. i
      end
      for i = 1, 21 do
        mentions[i] = "@u" .. i
      end
      status, body = create({ image_url = url, caption = table.concat(tags, " ") })
      assert_graph_error(status, body, 400, 36004, 2207010)
      table.remove(tags)
      assert.equal(200, (create({ image_url = url, caption = table.concat(tags, " ") })))
      status, body = create({ image_url = url, caption = table.concat(mentions, " ") })
      assert_graph_error(status, body, 400, 36004, 2207010)
    end)

    it("reports the publishing quota and enforces it (9/2207042)", function()
      fake.config({ ig_quota = 1 })
      local _, c1 = create({ image_url = fake.asset("tiny.jpg"), caption = "one" })
      local _, c2 = create({ image_url = fake.asset("tiny.jpg"), caption = "two" })
      wait_for(c1.id, "FINISHED")
      wait_for(c2.id, "FINISHED")
      assert.equal(200, (publish(c1.id)))

      local status, limit = fake.graph("GET", "/" .. ig.id .. "/content_publishing_limit",
        { fields = "quota_usage,config" }, page.access_token)
      assert.equal(200, status)
      assert.same({ data = { { quota_usage = 1, config = { quota_total = 1, quota_duration = 86400 } } } }, limit)

      local st, body = publish(c2.id)
      assert_graph_error(st, body, 400, 9, 2207042)
      assert.equal("FINISHED", status_of(c2.id))
      assert.equal(1, fake.published().total)
    end)

    it("does not publish another account's container", function()
      local other = fake.add_page({ instagram_business_account = true })
      local _, c = fake.graph("POST", "/" .. other.instagram_business_account.id .. "/media",
        { image_url = fake.asset("tiny.jpg") }, other.access_token)
      local status, body = publish(c.id)
      assert_graph_error(status, body, 400, 24, 2207008)
    end)
  end)

  -- ---------------------------------------------------------------- tokens, errors

  describe("tokens", function()
    local page

    before_each(function()
      page = fake.add_page({ access_token = "page-token-1" })
    end)

    it("answers 190/467 for an unknown token", function()
      local status, body, headers = fake.graph("GET", "/" .. page.id .. "/feed", {}, "nonsense")
      local e = assert_graph_error(status, body, 400, 190, 467)
      assert.equal("OAuthException", e.type)
      assert.truthy(headers["www-authenticate"])
    end)

    it("answers 190/463 once the token is expired, and works again when revived", function()
      fake.expire_token("page-token-1")
      local status, body = fake.graph("POST", "/" .. page.id .. "/feed", { message = "x" }, "page-token-1")
      local e = assert_graph_error(status, body, 400, 190, 463)
      assert.truthy(e.message:find("expired"))
      fake.expire_token("page-token-1", false)
      assert.equal(200, (fake.graph("POST", "/" .. page.id .. "/feed", { message = "x" }, "page-token-1")))
    end)

    it("answers 104 without a token", function()
      local status, body = fake.graph("GET", "/" .. page.id .. "/feed", {})
      assert_graph_error(status, body, 400, 104, nil)
    end)

    it("refuses another Page's token: 403/200 on writes, 100/33 on reads", function()
      local other = fake.add_page({})
      local status, body = fake.graph("POST", "/" .. page.id .. "/feed", { message = "x" }, other.access_token)
      assert_graph_error(status, body, 403, 200, nil)
      status, body = fake.graph("GET", "/" .. page.id .. "/feed", {}, other.access_token)
      assert_graph_error(status, body, 400, 100, 33)
      assert.equal(0, fake.published().total)
    end)
  end)

  describe("errors", function()
    local page

    before_each(function()
      page = fake.add_page({})
    end)

    it("answers 100/33 GraphMethodException for an object that does not exist", function()
      local status, body = fake.graph("GET", "/1234567890", {}, page.access_token)
      local e = assert_graph_error(status, body, 400, 100, 33)
      assert.equal("GraphMethodException", e.type)
    end)

    it("answers 100 for a field the node does not have", function()
      local status, body = fake.graph("GET", "/" .. page.id, { fields = "id,no_such_field" }, page.access_token)
      local e = assert_graph_error(status, body, 400, 100, nil)
      assert.truthy(e.message:find("no_such_field", 1, true))
    end)

    it("answers for another API version with an error, not silently", function()
      local status, body = stack.json("GET", fake.url .. "/v2.0/" .. page.id .. "?access_token=" .. page.access_token)
      assert_graph_error(status, body, 400, 2635, nil)
    end)

    it("answers a broken JSON body and an oversized body in Graph's shape", function()
      local status, body = stack.json("POST", fake.graph_url .. "/" .. page.id .. "/feed", {
        headers = { ["content-type"] = "application/json", authorization = "Bearer " .. page.access_token },
        body = "{not json",
      })
      assert_graph_error(status, body, 400, 100, nil)
      status, body = stack.json("POST", fake.graph_url .. "/" .. page.id .. "/feed", {
        headers = { ["content-type"] = "application/x-www-form-urlencoded" },
        body = "message=" .. string.rep("x", 3 * 1024 * 1024),
      })
      assert.equal(413, status)
      assert.equal(1, body.error.code)
    end)
  end)

  -- ---------------------------------------------------------------- usage headers

  describe("usage headers", function()
    it("come with every Graph answer; Business Use Case usage keyed by the account", function()
      local page = fake.add_page({ instagram_business_account = true })
      local status, _, headers = fake.graph("GET", "/" .. page.id, {}, page.access_token)
      assert.equal(200, status)
      local app = decode_header(headers, "x-app-usage")
      assert.is_number(app.call_count)
      assert.is_number(app.total_time)
      assert.is_number(app.total_cputime)
      local buc = decode_header(headers, "x-business-use-case-usage")[page.id]
      assert.equal(1, #buc)
      assert.equal("pages", buc[1].type)
      for _, k in ipairs({ "call_count", "total_cputime", "total_time", "estimated_time_to_regain_access" }) do
        assert.is_number(buc[1][k], k)
      end

      -- on errors too
      local _, _, err_headers = fake.graph("GET", "/" .. page.id, {}, "bad-token")
      assert.truthy(err_headers["x-app-usage"])

      local ig_id = page.instagram_business_account.id
      local _, _, ig_headers = fake.graph("GET", "/" .. ig_id .. "/media", {}, page.access_token)
      assert.equal("instagram", decode_header(ig_headers, "x-business-use-case-usage")[ig_id][1].type)
    end)

    it("grow with calls against the configured budgets", function()
      local page = fake.add_page({})
      fake.config({ account_call_budget = 10, app_call_budget = 20 })
      local headers
      for _ = 1, 5 do
        _, _, headers = fake.graph("GET", "/" .. page.id, {}, page.access_token)
      end
      assert.equal(50, decode_header(headers, "x-business-use-case-usage")[page.id][1].call_count)
      assert.equal(25, decode_header(headers, "x-app-usage").call_count)
      fake.config({ buc_usage_min = 95 })
      _, _, headers = fake.graph("GET", "/" .. page.id, {}, page.access_token)
      assert.equal(95, decode_header(headers, "x-business-use-case-usage")[page.id][1].call_count)
    end)
  end)

  -- ---------------------------------------------------------------- scripted failures

  describe("scripted failures", function()
    local page

    before_each(function()
      page = fake.add_page({ instagram_business_account = true })
    end)

    local function feed_post(message, opts)
      return fake.graph("POST", "/" .. page.id .. "/feed", { message = message }, page.access_token, opts)
    end

    it("fail the next N matching calls, then let calls through; others are untouched", function()
      fake.fail({ match = { method = "POST", path = "/{page}/feed" }, count = 2,
        error = { code = 32, http = 400, message = "Page request limit reached", retry_after_minutes = 1 } })
      -- not matching: another method, another edge
      assert.equal(200, (fake.graph("GET", "/" .. page.id .. "/feed", {}, page.access_token)))
      assert.equal(200, (fake.graph("GET", "/" .. page.id, {}, page.access_token)))
      for i = 1, 2 do
        local status, body = feed_post("try " .. i)
        local e = assert_graph_error(status, body, 400, 32, nil)
        assert.equal("Page request limit reached", e.message)
      end
      assert.equal(200, (feed_post("try 3")))
      assert.same({}, fake.failures())
      assert.equal(1, fake.published().total)
    end)

    it("can match one account only", function()
      local other = fake.add_page({})
      fake.fail({ match = { account = other.id }, preset = "transient", count = 5 })
      assert.equal(200, (feed_post("mine")))
      local status, body = fake.graph("POST", "/" .. other.id .. "/feed", { message = "theirs" }, other.access_token)
      assert_graph_error(status, body, 500, 2, nil)
    end)

    it("typed placeholders tell a container from a media", function()
      fake.config({ container_ready_ms = 0 })
      local ig = page.instagram_business_account.id
      local _, c = fake.graph("POST", "/" .. ig .. "/media", { image_url = fake.asset("tiny.jpg") }, page.access_token)
      fake.fail({ match = { method = "GET", path = "/{media}" }, preset = "unknown" })
      -- a container is not a {media}: this GET is not failed
      assert.equal(200, (fake.graph("GET", "/" .. c.id, { fields = "status_code" }, page.access_token)))
      assert.equal(1, #fake.failures())
    end)

    local presets = {
      { "rate_limited", 400, 32, nil, true },
      { "rate_limited_app", 403, 4, nil, true },
      { "rate_limited_user", 400, 17, nil, true },
      { "rate_limited_613", 400, 613, nil, true },
      { "rate_limited_pages", 400, 80001, nil, true },
      { "transient", 500, 2, nil, true },
      { "unknown", 500, 1, nil, true },
      { "token_expired", 400, 190, 463, false },
      { "permission", 403, 200, nil, false },
      { "duplicate", 400, 506, nil, false },
      { "media", 400, 324, nil, false },
    }
    for _, p in ipairs(presets) do
      local name, http, code, subcode, transient = p[1], p[2], p[3], p[4], p[5]
      it("preset " .. name .. " answers " .. http .. " with code " .. code, function()
        fake.fail({ match = { path = "/{page}/feed" }, preset = name })
        local status, body, headers = feed_post("x")
        local e = assert_graph_error(status, body, http, code, subcode)
        assert.equal(transient, e.is_transient)
        if name:match("^rate_limited") then
          if code == 4 then
            assert.truthy(decode_header(headers, "x-app-usage").call_count >= 100)
          else
            local buc = decode_header(headers, "x-business-use-case-usage")[page.id][1]
            assert.truthy(buc.call_count >= 100)
            assert.equal(1, buc.estimated_time_to_regain_access)
          end
        end
        assert.equal(0, fake.published().total)
      end)
    end

    it("preset media on an Instagram account answers 36001/2207005", function()
      local ig = page.instagram_business_account.id
      fake.fail({ match = { path = "/{ig}/media_publish" }, preset = "media" })
      local status, body = fake.graph("POST", "/" .. ig .. "/media_publish", { creation_id = "1" }, page.access_token)
      assert_graph_error(status, body, 400, 36001, 2207005)
    end)

    it("a scripted rate limit reports its wait in the usage header", function()
      fake.fail({ preset = "rate_limited_pages", error = { retry_after_minutes = 7 } })
      local _, body, headers = feed_post("x")
      assert.equal(80001, body.error.code)
      local buc = decode_header(headers, "x-business-use-case-usage")[page.id][1]
      assert.equal(7, buc.estimated_time_to_regain_access)
      assert.truthy(buc.call_count >= 100)
    end)

    it("kind http answers a raw status and body", function()
      fake.fail({ kind = "http", status = 502, body = "<html>Bad Gateway</html>" })
      local status, body = stack.request("GET", fake.graph_url .. "/" .. page.id .. "?access_token=" .. page.access_token)
      assert.equal(502, status)
      assert.equal("<html>Bad Gateway</html>", body)
    end)

    it("kind close drops the connection before doing anything", function()
      fake.fail({ kind = "close", match = { path = "/{page}/feed" } })
      local status, err = feed_post("never")
      assert.is_nil(status)
      assert.is_string(err)
      assert.equal(0, fake.published().total)
      local log = fake.requests({ path = "/" .. page.id .. "/feed" })
      assert.equal("closed", log[#log].outcome)
      -- the next call goes through
      assert.equal(200, (feed_post("now")))
    end)

    it("kind timeout_after_commit publishes, then answers too late for the client", function()
      fake.fail({ kind = "timeout_after_commit", delay_ms = 2500, match = { path = "/{page}/feed" } })
      local started = stack.now()
      local status, err = feed_post("Did it post?", { timeout = 0.5 })
      assert.is_nil(status)
      assert.equal("timeout", err)
      assert.truthy(stack.now() - started < 2, "the client should give up after its own time-out")
      -- the post exists: on the inspection API and in the Page's feed
      local pub = fake.published()
      assert.equal(1, pub.counts[page.id])
      assert.equal("Did it post?", pub.data[1].message)
      local _, feed = fake.graph("GET", "/" .. page.id .. "/feed", { fields = "id,message,created_time" }, page.access_token)
      assert.equal(pub.data[1].id, feed.data[1].id)
    end)

    it("kind timeout_after_commit on media_publish leaves the container PUBLISHED", function()
      fake.config({ container_ready_ms = 0 })
      local ig = page.instagram_business_account.id
      local _, c = fake.graph("POST", "/" .. ig .. "/media", { image_url = fake.asset("tiny.jpg") }, page.access_token)
      stack.eventually(function()
        local _, s = fake.graph("GET", "/" .. c.id, { fields = "status_code" }, page.access_token)
        return s.status_code == "FINISHED"
      end, 10, 0.05)
      fake.fail({ kind = "timeout_after_commit", delay_ms = 2000, match = { path = "/{ig}/media_publish" } })
      local status = fake.graph("POST", "/" .. ig .. "/media_publish", { creation_id = c.id }, page.access_token,
        { timeout = 0.5 })
      assert.is_nil(status)
      local _, s = fake.graph("GET", "/" .. c.id, { fields = "status_code" }, page.access_token)
      assert.equal("PUBLISHED", s.status_code)
      assert.equal(1, fake.published().counts[ig])
    end)

    it("kind delay slows the matching call only", function()
      fake.fail({ kind = "delay", delay_ms = 400, match = { method = "GET" } })
      local since = #fake.requests()
      local t0 = stack.now()
      assert.equal(200, (fake.graph("GET", "/" .. page.id, {}, page.access_token)))
      assert.truthy(stack.now() - t0 >= 0.38)
      assert.equal(200, (fake.graph("GET", "/" .. page.id, {}, page.access_token)))
      -- The fake's own log says which call the failure (count 1) slowed: not
      -- a time measured on a busy machine.
      local log = fake.requests()
      assert.is_not_nil(log[since + 1].failure)
      assert.is_nil(log[since + 2].failure)
    end)

    it("refuses a malformed failure", function()
      assert.has_error(function() fake.fail({ preset = "no_such_preset" }) end)
      assert.has_error(function() fake.fail({ kind = "explode" }) end)
      assert.has_error(function() fake.fail({ match = { pathh = "/x" }, preset = "transient" }) end)
    end)
  end)

  -- ---------------------------------------------------------------- latency, log

  it("honours latency set through config", function()
    local page = fake.add_page({})
    fake.config({ latency_ms = 300 })
    local t0 = stack.now()
    assert.equal(200, (fake.graph("GET", "/" .. page.id, {}, page.access_token)))
    assert.truthy(stack.now() - t0 >= 0.28)
    -- Control calls are never slowed down: with a latency far past their
    -- own 10 s time limit, they still answer.
    fake.config({ latency_ms = 60000 })
    assert.is_table(fake.published())
    fake.config({ latency_ms = 0 })
  end)

  it("logs calls without their tokens", function()
    local page = fake.add_page({ access_token = "secret-token" })
    fake.graph("POST", "/" .. page.id .. "/feed", { message = "logged" }, page.access_token)
    fake.graph("GET", "/" .. page.id, { fields = "id" }, page.access_token, { bearer = true })
    local log = fake.requests()
    assert.equal(2, #log)
    assert.same({ "POST", "/" .. page.id .. "/feed", "logged", "param", 200, "v21.0", page.id },
      { log[1].method, log[1].path, log[1].params.message, log[1].auth, log[1].status, log[1].version, log[1].account })
    assert.equal("header", log[2].auth)
    for _, entry in ipairs(log) do
      assert.is_nil(entry.params.access_token)
    end
    assert.falsy(cjson.encode(log):find("secret-token", 1, true))
    assert.equal(1, #fake.requests({ method = "GET" }))
  end)
end)

describe("fake Graph API started with --latency-ms", function()
  it("delays every Graph call", function()
    local fake = fake_graph.start({ latency_ms = 250 })
    local ok, err = pcall(function()
      local page = fake.add_page({})
      local t0 = stack.now()
      assert.equal(200, (fake.graph("GET", "/" .. page.id, {}, page.access_token)))
      assert.truthy(stack.now() - t0 >= 0.23)
    end)
    fake.stop()
    assert(ok, err)
    assert.is_false(fake.alive())
  end)
end)

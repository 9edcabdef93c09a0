-- lib/platforms/graph_pause.lua through graph.call against a scripted `http`:
-- once Meta throttles the app or a token, no call is made for it until the
-- wait Meta announced has passed. (Against the fake Graph API and Redis:
-- publishing_faults_spec.)
local fake_host = require "fake_host"
local cjson = require "cjson"
local graph_script = require "scripted_graph"

local BASE, TOKEN, T0 = graph_script.BASE, graph_script.TOKEN, 1700000000
local OTHER = "EAAB-another-page-token"
local calls, script, on, ok, graph_error = graph_script.calls, graph_script.script, graph_script.on,
  graph_script.ok, graph_script.graph_error

local function buc(minutes, call_count)
  return { ["x-business-use-case-usage"] = cjson.encode({ ["1001"] = { { type = "pages",
    call_count = call_count or 100, total_cputime = 1, total_time = 1, estimated_time_to_regain_access = minutes } } }) }
end

local function throttled(code, minutes)
  local answer = graph_error(400, { message = "(#" .. code .. ") limit reached", code = code })
  answer.headers = minutes and buc(minutes) or {}
  return answer
end

describe("graph_pause", function()
  local graph

  before_each(function()
    fake_host.install({ ["meta.graph_base_url"] = BASE })
    clock.set(T0)
    graph_script.install()
    graph = require "platforms.graph"
  end)
  after_each(function() assert.same({}, script) end)

  it("makes no call with a token Meta throttles until the wait it announced has passed", function()
    on("POST 1001/feed", throttled(80001, 5))
    local _, err = graph.call("POST", "1001/feed", { message = "a" }, TOKEN)
    assert.equal("rate_limited", err.code)
    assert.equal(300, err.retry_after)

    clock.set(T0 + 120)
    local value, paused, sent = graph.call("POST", "1001/feed", { message = "b" }, TOKEN)
    assert.is_nil(value)
    assert.is_false(sent)
    assert.same({ code = "rate_limited", paused = true, throttle = "token", retry_after = 180,
      message = "Meta is throttling calls for this account; sgw makes no call until " .. clock.iso(T0 + 300)
        .. ", when Meta said access comes back." }, paused)
    assert.equal(1, #calls)

    -- Another account's token is not held back.
    on("GET 2002", ok({ id = "2002" }))
    assert.same({ id = "2002" }, (graph.call("GET", "2002", {}, OTHER)))

    clock.set(T0 + 300)
    on("POST 1001/feed", ok({ id = "1001_9" }))
    assert.same({ id = "1001_9" }, (graph.call("POST", "1001/feed", { message = "c" }, TOKEN)))
  end)

  it("holds back every token's calls while the app's own limit (code 4) is reached", function()
    -- The business header speaks for this account's business, not the app:
    -- the app waits Meta's default.
    on("GET 1001", throttled(4, 30))
    graph.call("GET", "1001", {}, TOKEN)
    clock.set(T0 + 30)
    local _, paused = graph.call("GET", "2002", {}, OTHER)
    assert.is_true(paused.paused)
    assert.equal("app", paused.throttle)
    assert.equal(30, paused.retry_after)
    assert.matches("Meta is throttling this app's calls", paused.message, 1, true)
    local _, app_call = graph.call("GET", "debug_token", { input_token = "x" }, nil)
    assert.is_true(app_call.paused)
    clock.set(T0 + 60)
    on("GET 2002", ok({ id = "2002" }))
    assert.same({ id = "2002" }, (graph.call("GET", "2002", {}, OTHER)))
  end)

  it("stops the app's calls once X-App-Usage reaches 100, before Meta refuses them", function()
    on("GET 1001", ok({ id = "1001" }, { ["x-app-usage"] = cjson.encode({ call_count = 99, total_time = 40, total_cputime = 12 }) }))
    graph.call("GET", "1001", {}, TOKEN)
    on("GET 1001", ok({ id = "1001" }, { ["x-app-usage"] = cjson.encode({ call_count = 64, total_time = 100, total_cputime = 12 }) }))
    assert.same({ id = "1001" }, (graph.call("GET", "1001", {}, TOKEN)), "99 % is not full yet")
    local _, paused = graph.call("GET", "2002", {}, OTHER)
    assert.same({ true, "app", 60 }, { paused.paused, paused.throttle, paused.retry_after })
    clock.set(T0 + 60)
    on("GET 2002", ok({ id = "2002" }))
    assert.same({ id = "2002" }, (graph.call("GET", "2002", {}, OTHER)))
  end)

  it("never shortens a pause: a later, shorter one leaves the longer standing", function()
    on("POST 1001/feed", throttled(80001, 10))
    graph.call("POST", "1001/feed", {}, TOKEN)
    -- Another instance meets a shorter throttle meanwhile, or a success says less.
    require("platforms.graph_pause").observe(TOKEN, nil, 60)
    clock.set(T0 + 120)
    local _, paused = graph.call("GET", "1001", {}, TOKEN)
    assert.equal(480, paused.retry_after)
  end)

  it("also waits when a successful answer says access is held back for a while", function()
    on("GET 1001/published_posts", ok({ data = {} }, buc(2, 100)))
    assert.same({ data = {} }, (graph.call("GET", "1001/published_posts", {}, TOKEN)))
    local _, paused = graph.call("GET", "1001/published_posts", {}, TOKEN)
    assert.equal(120, paused.retry_after)
    -- A usage header without a wait pauses nothing.
    on("GET 2002", ok({ id = "2002" }, buc(0, 95)))
    graph.call("GET", "2002", {}, OTHER)
    on("GET 2002", ok({ id = "2002" }))
    assert.same({ id = "2002" }, (graph.call("GET", "2002", {}, OTHER)))
  end)

  it("does not pause for Instagram's publishing quota, which is no throttle of calls", function()
    on("POST 1001/media_publish", graph_error(400, { message = "quota", code = 9, error_subcode = 2207042 }))
    graph.call("POST", "1001/media_publish", { creation_id = "c" }, TOKEN)
    on("GET 1001/content_publishing_limit", ok({ data = {} }))
    graph.call("GET", "1001/content_publishing_limit", {}, TOKEN)
  end)

  it("keeps only a digest of the token, and calls on when Redis cannot say", function()
    on("POST 1001/feed", throttled(32, 1))
    graph.call("POST", "1001/feed", {}, TOKEN)
    local keys = {}
    for k in pairs(graph_script.redis) do keys[#keys + 1] = k end
    assert.equal(1, #keys)
    assert.is_nil(keys[1]:find(TOKEN, 1, true))
    redis.call = function() return nil, "Connection refused", "unavailable" end
    on("POST 1001/feed", ok({ id = "1001_1" }))
    assert.same({ id = "1001_1" }, (graph.call("POST", "1001/feed", {}, TOKEN)))
  end)
end)

-- lib/webhooks.lua: the retry schedule and the delivery body.
require("fake_host").install({
  ["webhooks.retry.base_seconds"] = 5,
  ["webhooks.retry.max_seconds"] = 3600,
  ["webhooks.retry.max_age_hours"] = 24,
})
local cjson = require "cjson"
local webhooks = require "webhooks"

local function lowest() return 0 end
local function highest() return 1 end

describe("webhooks.next_retry_in", function()
  it("doubles from the base up to the cap, with jitter between half and all of it", function()
    for attempt, full in ipairs({ 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600 }) do
      assert.are.equal(full / 2, webhooks.next_retry_in(attempt, 0, 0, lowest))
      assert.are.equal(full, webhooks.next_retry_in(attempt, 0, 0, highest))
    end
  end)

  it("makes a last attempt at max_age_hours after the event, then gives up", function()
    local day = 24 * 3600
    assert.are.equal(100, webhooks.next_retry_in(20, 0, day - 100, highest))
    assert.is_nil(webhooks.next_retry_in(21, 0, day, highest))
    assert.is_nil(webhooks.next_retry_in(1, 0, day + 1, highest))
  end)
end)

describe("webhooks.body", function()
  it("is the Standard Webhooks envelope with its fields in a fixed order", function()
    local body = webhooks.body("evt_1", "social.post.published", 1700000000, "test", '{"postId":"post_1"}')
    assert.are.equal('{"id":"evt_1","type":"social.post.published","createdAt":"2023-11-14T22:13:20.000Z",'
      .. '"environment":"test","data":{"postId":"post_1"}}', body)
    assert.are.same({ postId = "post_1" }, cjson.decode(body).data)
  end)
end)

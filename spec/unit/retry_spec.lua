-- lib/retry.lua: growing delays with jitter, and which failures get another attempt.
require("fake_host").install({
  ["publishing.retry.base_seconds"] = 30,
  ["publishing.retry.max_seconds"] = 900,
  ["publishing.retry.max_attempts"] = 5,
})
local retry = require "retry"

local function lowest() return 0 end
local function highest() return 1 end

describe("retry.delay", function()
  it("doubles from the base up to the cap, with jitter between half and all of it", function()
    for attempt, full in ipairs({ 30, 60, 120, 240, 480, 900, 900 }) do
      assert.equal(full / 2, retry.delay(attempt, { random = lowest }))
      assert.equal(full, retry.delay(attempt, { random = highest }))
    end
  end)

  it("takes base and max from opts before configuration", function()
    assert.equal(8, retry.delay(4, { base = 1, max = 100, random = highest }))
    assert.equal(5, retry.delay(10, { base = 1, max = 5, random = highest }))
  end)

  it("stays within its bounds with the real random source", function()
    for _ = 1, 200 do
      local d = retry.delay(3)
      assert.is_true(d >= 60 and d <= 120, tostring(d))
    end
  end)

  it("waits at least as long as the platform asks", function()
    assert.equal(3600, retry.delay(1, { retry_after = 3600, random = highest }))
    assert.equal(60, retry.delay(2, { retry_after = 10, random = highest }))
  end)
end)

describe("retry.should_retry", function()
  it("retries retryable classes until max_attempts attempts were made", function()
    assert.is_true(retry.should_retry("rate_limited", 1))
    assert.is_true(retry.should_retry("platform_unavailable", 4))
    assert.is_false(retry.should_retry("platform_unavailable", 5))
    assert.is_false(retry.should_retry("rate_limited", 2, 2))
  end)

  it("never retries final classes", function()
    for _, class in ipairs({ "token_expired", "permission_missing", "media_rejected", "content_rejected",
      "duplicate_content", "invalid_request" }) do
      assert.is_false(retry.should_retry(class, 1), class)
    end
  end)
end)

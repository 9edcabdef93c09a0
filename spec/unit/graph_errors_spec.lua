-- lib/platforms/graph_errors.lua: Graph errors, as Meta sends them, to sgw's classes.
require("fake_host").install()
local cjson = require "cjson"
local errors = require "platforms.graph_errors"

local function response(status, err, headers)
  return { status = status, headers = headers or {}, body = cjson.encode({ error = err }) }
end

local function class_of(status, err, headers)
  return errors.from_response(response(status, err, headers))
end

local function buc(entries)
  return { ["x-business-use-case-usage"] = cjson.encode({ ["1234567890"] = entries }) }
end

describe("graph_errors.from_response", function()
  it("classifies rate limits, with retry_after from the business use case header", function()
    local e = class_of(403, { message = "(#4) Application request limit reached", type = "OAuthException",
      is_transient = true, code = 4, fbtrace_id = "AbCdEf" })
    assert.same({ code = "rate_limited", message = "(#4) Application request limit reached",
      platform_code = "4", retry_after = errors.DEFAULT_RETRY_AFTER, throttle = "app",
      platform = { code = 4, fbtrace_id = "AbCdEf" } }, e)

    e = class_of(400, { message = "(#80001) There have been too many calls to this Page account. Wait a bit and try again.",
      type = "OAuthException", code = 80001, fbtrace_id = "X" }, buc({
        { type = "pages", call_count = 100, total_cputime = 12, total_time = 30, estimated_time_to_regain_access = 5 },
        { type = "pages", call_count = 20, total_cputime = 2, total_time = 3, estimated_time_to_regain_access = 12 },
      }))
    assert.equal("rate_limited", e.code)
    assert.equal("80001", e.platform_code)
    assert.equal(12 * 60, e.retry_after)

    for _, code in ipairs({ 17, 32, 341, 613, 80002, 80009 }) do
      e = class_of(400, { message = "limit", code = code })
      assert.equal("rate_limited", e.code, code)
      assert.equal("token", e.throttle, code)
    end
    -- Instagram's publishing quota is no throttle of calls.
    assert.is_nil(class_of(400, { message = "quota", code = 9, error_subcode = 2207042 }).throttle)
  end)

  it("gives Instagram's daily publishing quota a long wait", function()
    local e = class_of(400, { message = "Application request limit reached", type = "OAuthException",
      is_transient = false, code = 9, error_subcode = 2207042, error_user_title = "Cannot publish",
      error_user_msg = "You reached maximum number of posts that is allowed to be published by Content Publishing API." })
    assert.equal("rate_limited", e.code)
    assert.equal("9/2207042", e.platform_code)
    assert.equal(errors.QUOTA_RETRY_AFTER, e.retry_after)
  end)

  it("classifies transient failures as platform_unavailable", function()
    assert.same({ code = "platform_unavailable",
      message = "An unexpected error has occurred. Please retry your request later.", platform_code = "2",
      platform = { code = 2, fbtrace_id = "A" } },
      class_of(500, { message = "An unexpected error has occurred. Please retry your request later.",
        type = "OAuthException", is_transient = true, code = 2, fbtrace_id = "A" }))
    assert.equal("platform_unavailable", class_of(500, { message = "An unknown error occurred", code = 1, error_subcode = 99 }).code)
    assert.equal("platform_unavailable", class_of(400, { message = "An unexpected error has occurred.",
      code = -1, error_subcode = 2207001, is_transient = true }).code)
    assert.equal("platform_unavailable", class_of(400, { message = "The media download timed out.",
      code = -2, error_subcode = 2207003 }).code)
    assert.equal("platform_unavailable", class_of(400, { message = "Odd", code = 12, is_transient = true }).code)
    assert.equal("platform_unavailable", class_of(400, { message = "Media ID is not available",
      code = 9007, error_subcode = 2207027 }).code)
  end)

  it("classifies expired and invalid tokens", function()
    for _, sub in ipairs({ 458, 460, 463, 467 }) do
      local e = class_of(400, { message = "Error validating access token: Session has expired on Friday, 21-Nov-25.",
        type = "OAuthException", code = 190, error_subcode = sub, fbtrace_id = "B" })
      assert.equal("token_expired", e.code)
      assert.equal("190/" .. sub, e.platform_code)
      assert.is_nil(e.retry_after)
    end
    assert.equal("token_expired", class_of(400, { message = "Invalid OAuth access token.", code = 190 }).code)
    assert.equal("token_expired", class_of(400, { message = "Session key invalid or no longer valid", code = 102 }).code)
  end)

  it("never passes on a token Meta quotes in its message", function()
    local token = "EAAB" .. ("x1Y"):rep(60)
    local e = class_of(400, { message = "Malformed access token " .. token, code = 190,
      error_user_msg = "Token " .. token .. " cannot be used" })
    assert.equal("Malformed access token [redacted]", e.message)
    assert.is_nil(cjson.encode(e):find(token:sub(1, 20), 1, true))
    -- Ids and words are left alone.
    e = class_of(400, { message = "(#100) Object with ID '1234567890123456_987654321098765' does not exist", code = 100 })
    assert.equal("(#100) Object with ID '1234567890123456_987654321098765' does not exist", e.message)
    e = class_of(400, { message = "Invalid parameter https://x.example/?access_token=abc&y=1", code = 100 })
    assert.equal("Invalid parameter https://x.example/?access_token=[redacted]&y=1", e.message)
  end)

  it("tells Instagram's suspected spam (4/2207051) from the app's rate limit (4), and never retries it", function()
    local e = class_of(400, { message = "We restrict certain activity to protect our community.", code = 4,
      error_subcode = 2207051 })
    assert.equal("content_rejected", e.code)
    assert.equal("4/2207051", e.platform_code)
    assert.is_false(errors.retryable(e.code))
  end)

  it("retries Instagram's temporary publishing error (24/2207008)", function()
    local e = class_of(400, { message = "Temporary error publishing a container", code = 24, error_subcode = 2207008 })
    assert.equal("platform_unavailable", e.code)
    assert.is_true(errors.retryable(e.code))
  end)

  it("classifies missing permissions", function()
    assert.equal("permission_missing", class_of(403, { message = "(#200) The user hasn't authorized the application to perform this action",
      type = "OAuthException", code = 200 }).code)
    assert.equal("permission_missing", class_of(403, { message = "(#10) Application does not have permission for this action",
      code = 10 }).code)
    assert.equal("permission_missing", class_of(403, { message = "(#299) ...", code = 299 }).code)
  end)

  it("classifies refused media", function()
    local cases = {
      { code = 324, message = "(#324) Requires upload file" },
      { code = 100, error_subcode = 1366046, message = "(#100) The photo is too large." },
      { code = 36001, error_subcode = 2207005, message = "The image format is not supported." },
      { code = 36000, error_subcode = 2207004, message = "The image is too large to download." },
      { code = 36003, error_subcode = 2207009, message = "The submitted image with aspect ratio ('3:1') cannot be published." },
      { code = 9004, error_subcode = 2207052, message = "Only photo or video can be accepted as media type." },
      { code = -2, error_subcode = 2207020, message = "The media you are trying to access has expired." },
    }
    for _, c in ipairs(cases) do
      assert.equal("media_rejected", class_of(400, c).code, c.message)
    end
  end)

  it("classifies refused content, duplicates and requests for missing objects", function()
    assert.equal("content_rejected", class_of(400, { message = "The action attempted has been deemed abusive or is otherwise disallowed",
      code = 368, error_subcode = 1390008 }).code)
    assert.equal("content_rejected", class_of(400, { message = "The caption is too long.", code = 36004,
      error_subcode = 2207010 }).code)
    assert.equal("content_rejected", class_of(400, { message = "(#100) Invalid parameter", code = 100 }).code)
    local dup = class_of(400, { message = "(#506) Duplicate status message", code = 506 })
    assert.same({ code = "duplicate_content", message = "(#506) Duplicate status message", platform_code = "506",
      platform = { code = 506 } }, dup)
    local missing = class_of(400, { message = "Unsupported post request. Object with ID '17841400000000000' does not exist, "
      .. "cannot be loaded due to missing permissions, or does not support this operation.",
      type = "GraphMethodException", code = 100, error_subcode = 33 })
    assert.equal("invalid_request", missing.code)
    assert.equal("100/33", missing.platform_code)
  end)

  it("falls back on the HTTP status for codes it does not know", function()
    assert.equal("invalid_request", class_of(400, { message = "Something new", code = 4242 }).code)
    assert.equal("platform_unavailable", class_of(503, { message = "Something new", code = 4242 }).code)
  end)

  it("classifies answers without a Graph error body", function()
    assert.equal("platform_unavailable", errors.from_response({ status = 502, headers = {}, body = "<html>Bad Gateway</html>" }).code)
    assert.equal("platform_unavailable", errors.from_response({ status = 500, headers = {}, body = "" }).code)
    local limited = errors.from_response({ status = 429, headers = { ["retry-after"] = "120" }, body = "" })
    assert.same({ "rate_limited", 120 }, { limited.code, limited.retry_after })
    assert.equal("invalid_request", errors.from_response({ status = 404, headers = {}, body = "not found" }).code)
  end)

  it("never lets a token into a message", function()
    local e = errors.from_failure("Failed to connect to graph?access_token=EAAB123secret&x=1", "connect")
    assert.equal("platform_unavailable", e.code)
    assert.falsy(e.message:find("EAAB123secret", 1, true))
  end)
end)

describe("graph_errors.public_detail", function()
  it("keeps Meta's code, subcode, trace id and message for the user, with nulls where Meta said nothing", function()
    local e = class_of(400, { message = "Invalid parameter", type = "OAuthException", code = 100, error_subcode = 2207010,
      fbtrace_id = "A1b2C3", error_user_title = "Caption too long", error_user_msg = "The caption is too long." })
    assert.same({ code = 100, subcode = 2207010, fbtraceId = "A1b2C3", userMessage = "The caption is too long." },
      errors.public_detail(e))
    e = class_of(400, { message = "(#4) Application request limit reached", code = 4 })
    assert.same({ code = 4, subcode = cjson.null, fbtraceId = cjson.null, userMessage = cjson.null },
      errors.public_detail(e))
  end)

  it("is null for failures that did not come from Meta, whose messages say what happened", function()
    local e = errors.from_response({ status = 502, headers = {}, body = "<html>Bad gateway</html>" })
    assert.equal(cjson.null, errors.public_detail(e))
    assert.matches("HTTP 502", e.message)
    e = errors.from_failure("Operation timed out after 30000 milliseconds", "timeout")
    assert.equal(cjson.null, errors.public_detail(e))
    assert.matches("did not answer in time", e.message)
    assert.equal(cjson.null, errors.public_detail(nil))
  end)
end)

describe("graph_errors.from_failure", function()
  it("makes connection failures and time-outs platform_unavailable", function()
    assert.equal("platform_unavailable", errors.from_failure("Connection refused", "connect").code)
    local e = errors.from_failure("Operation timed out after 30001 milliseconds", "timeout")
    assert.equal("platform_unavailable", e.code)
    assert.truthy(e.message:find("in time", 1, true))
  end)

  it("makes a call the host did not send for its job's lease a wait that spends no attempt", function()
    local e = errors.from_failure("not sent: the job's lease (jobs.lease_seconds) was last confirmed 41000 ms ago", "lease")
    assert.equal("platform_unavailable", e.code)
    assert.is_true(e.paused)
    assert.equal(require("jobs").LEASE_RETRY_SECONDS, e.retry_after)
    assert.truthy(e.message:find("^No call made to the Graph API %(not sent: the job.s lease"), e.message)
  end)
end)

describe("graph_errors.retryable", function()
  it("is true only for rate_limited and platform_unavailable", function()
    assert.is_true(errors.retryable("rate_limited"))
    assert.is_true(errors.retryable("platform_unavailable"))
    for _, class in ipairs({ "token_expired", "permission_missing", "media_rejected", "content_rejected",
      "duplicate_content", "invalid_request", "nonsense" }) do
      assert.is_false(errors.retryable(class), class)
    end
  end)
end)

describe("graph_errors.usage_pressure", function()
  it("is the highest percent of any usage header", function()
    assert.equal(0, errors.usage_pressure({}))
    assert.equal(0, errors.usage_pressure(nil))
    assert.equal(28, errors.usage_pressure({ ["x-app-usage"] = '{"call_count":28,"total_time":25,"total_cputime":25}' }))
    assert.equal(95, errors.usage_pressure({
      ["x-app-usage"] = '{"call_count":28,"total_time":25,"total_cputime":25}',
      ["x-business-use-case-usage"] = '{"1234":[{"type":"pages","call_count":95,"total_cputime":20,'
        .. '"total_time":20,"estimated_time_to_regain_access":0}],"5678":[{"type":"instagram","call_count":3,'
        .. '"total_cputime":40,"total_time":1}]}',
    }))
    assert.equal(61, errors.usage_pressure({ ["X-Page-Usage"] = '{"call_count":5,"total_time":61,"total_cputime":2}' }))
  end)

  it("ignores headers it cannot read", function()
    assert.equal(0, errors.usage_pressure({ ["x-app-usage"] = "not json", ["x-business-use-case-usage"] = '{"1":"x"}' }))
  end)

  it("reads the time to regain access in minutes", function()
    assert.is_nil(errors.regain_access_seconds({}))
    assert.equal(180, errors.regain_access_seconds(buc({ { type = "pages", call_count = 100, estimated_time_to_regain_access = 3 } })))
  end)
end)

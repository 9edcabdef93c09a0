-- content.imageUrl of posts with Instagram targets (CONTRACT 11), against the real
-- stack: sgw fetches the URL once at creation, over https from the fake Graph API's
-- TLS port, and refuses with 422 what Instagram would refuse later; unreachable URLs
-- and non-public addresses are refused with safe messages, the latter before any
-- connection is made.
local stack = require "stack"
local fake_graph = require "fake_graph"
local cjson = require "cjson.safe"

local cli = stack.cli

describe("Instagram image URLs", function()
  local fake, lenient, strict

  -- One company with a Facebook Page and its Instagram account on an instance.
  local function tenant(inst, name)
    local company = cli(inst, { "company", "create", "--name", name }).companyId
    local key = cli(inst, { "client", "create", "--company", company, "--environment", "live",
      "--scopes", "accounts:read posts:read posts:write operations:read" }).apiKey
    local page = fake.add_page({ name = name .. " page", instagram_business_account = true })
    local function add(platform, id)
      return cli(inst, { "account", "add", "--company", company, "--environment", "live", "--platform", platform,
        "--platform-account-id", id, "--name", name .. " " .. platform, "--access-token", page.access_token }).accountId
    end
    local t = { fb = add("facebook", page.id), ig = add("instagram", page.instagram_business_account.id) }
    local n = 0
    function t.api(method, path, body)
      n = n + 1
      return inst:json(method, path, { body = body, timeout = 20,
        headers = { ["X-Api-Key"] = key, ["Idempotency-Key"] = name:gsub("%W", "") .. "-" .. n .. "-" .. math.random(1, 1e9) } })
    end
    -- POST /api/v1/posts of an image; accounts: "ig", "fb" or both. Scheduled a day
    -- ahead unless `now`, so that only the creation fetches.
    function t.create(url, accounts, now)
      local targets = {}
      for _, a in ipairs(accounts or { "ig" }) do
        targets[#targets + 1] = { socialAccountId = t[a], platform = a == "ig" and "instagram" or "facebook" }
      end
      return t.api("POST", "/api/v1/posts", {
        targets = targets,
        content = { type = "image", message = "A picture", imageUrl = url },
        publishing = now and { mode = "immediate" }
          or { mode = "scheduled", scheduledAt = os.date("!%Y-%m-%dT%H:%M:%SZ", os.time() + 86400) },
      })
    end
    return t
  end

  local settings = function(more)
    local set = {
      ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
      ["meta.graph_base_url"] = fake.graph_url,
      ["meta.request_timeout_seconds"] = 2,
      ["meta.instagram_container_first_poll_seconds"] = 0.2,
      ["meta.instagram_container_poll_seconds"] = 0.2,
      ["api.rate_limit.per_minute"] = 1000000,
      ["posts.image_fetch_timeout_seconds"] = 1,
      ["http.ca_file"] = fake.ca_file,
    }
    for k, v in pairs(more or {}) do set[k] = v end
    return set
  end

  local function refusal(status, body)
    assert.are.equal(422, status, cjson.encode(body))
    assert.are.equal("validation_failed", body.code, cjson.encode(body))
    return body.errors
  end

  local function only_error(status, body, code)
    local errors = refusal(status, body)
    assert.are.equal(1, #errors, cjson.encode(errors))
    assert.are.equal("/content/imageUrl", errors[1].field)
    assert.are.equal(code, errors[1].code, cjson.encode(errors))
    return errors[1].message
  end

  setup(function()
    fake = fake_graph.start({ latency_ms = 0 })
    lenient = stack.start_sgw { name = "image-url", set = settings { ["posts.allow_private_image_urls"] = true,
      ["uploads.max_bytes"] = 9000000, ["uploads.max_request_bytes"] = 9100000 } }
    strict = stack.start_sgw { name = "image-url-strict", set = settings() }
    lenient.t = tenant(lenient, "Images Co")
    strict.t = tenant(strict, "Strict Co")
  end)

  teardown(function()
    stack.cleanup()
    fake_graph.stop_all()
  end)

  it("refuses each of Meta's image rules with the measured value", function()
    local t = lenient.t
    local cases = {
      { "image.png?w=640&h=640", "image_not_jpeg", "image/png" },
      { "not-an-image.txt", "image_not_jpeg", "not a JPEG" },
      { "multi-picture.jpg", "image_not_jpeg", "this image is a multi-picture JPEG (MPO)" },
      -- Fetched whole (uploads.max_bytes is raised), so measured exactly.
      { "image.jpg?w=640&h=640&bytes=8388700", "image_too_large", "The image has 8388700 bytes (8.0 MiB)" },
      -- Past uploads.max_bytes the download stops.
      { "huge.jpg", "image_too_large", "more than 9000000 bytes" },
      { "image.jpg?w=1000&h=400", "image_aspect_ratio", "1000x400 px: aspect ratio 2.50" },
      { "image.jpg?w=400&h=600", "image_aspect_ratio", "400x600 px: aspect ratio 0.67" },
      { "image.jpg?w=300&h=300", "image_too_small", "300 px wide" },
    }
    for _, c in ipairs(cases) do
      local status, body = t.create(fake:https_asset(c[1]))
      local message = only_error(status, body, c[2])
      assert.truthy(message:find(c[3], 1, true), c[1] .. ": " .. message)
    end
    -- Exactly at the limits passes: 4:5, 1.91:1, 320 px wide.
    for _, ok in ipairs({ "image.jpg?w=320&h=400", "image.jpg?w=1910&h=1000", "image.jpg?w=320&h=320" }) do
      local status, body = t.create(fake:https_asset(ok))
      assert.are.equal(202, status, ok .. ": " .. cjson.encode(body))
    end
  end)

  it("refuses an unreachable URL with a message that tells nothing about the network", function()
    local t = lenient.t
    local closed = stack.free_port()
    local cases = {
      { "https://127.0.0.1:" .. closed .. "/a.jpg", "no connection could be made" },
      { fake:https_asset("nothing-here.jpg"), "the server answered HTTP 404" },
      { fake:https_asset("image.jpg?w=640&h=640&delay_ms=3000"), "it took longer than the 1 s allowed" },
      { fake:https_asset("redirect"), "it redirects more than 3 times" },
      { fake:https_asset("redirect?to=" .. fake:asset("tiny.jpg")), "it redirects to a URL that is not https" },
      -- The plain port spoken to as https: a TLS failure, told without curl's words.
      { "https://127.0.0.1:" .. fake.port .. "/_fake/assets/tiny.jpg", "the transfer failed" },
    }
    for _, c in ipairs(cases) do
      local status, body = t.create(c[1])
      local message = only_error(status, body, "image_url_unreachable")
      assert.truthy(message:find("could not be fetched: " .. c[2], 1, true), c[1] .. ": " .. message)
      assert.falsy(message:find(tostring(closed), 1, true), message)
      assert.falsy(message:lower():find("refused") or message:find("curl") or message:find("SSL"), message)
    end
  end)

  it("follows a redirect to the image", function()
    local status, body = lenient.t.create(fake:https_asset("redirect?to=/_fake/assets/image.jpg%3Fw%3D640%26h%3D640"))
    assert.are.equal(202, status, cjson.encode(body))
  end)

  it("refuses a non-public address before connecting to it", function()
    local t = strict.t
    fake:clear_tls()
    local path = "/_fake/assets/image.jpg?w=640&h=640"
    for _, host in ipairs({ "127.0.0.1", "2130706433", "0x7f000001", "localhost", "[::ffff:127.0.0.1]" }) do
      local status, body = t.create("https://" .. host .. ":" .. fake.https_port .. path)
      local message = only_error(status, body, "image_url_unreachable")
      assert.truthy(message:find("not a public internet address", 1, true), host .. ": " .. message)
    end
    assert.are.equal(0, fake:tls().connections)
  end)

  it("does not fetch for Facebook-only posts, and fetches once for a mixed post", function()
    local t = lenient.t
    fake:clear_tls()
    local status, body = t.create(fake:https_asset("not-an-image.txt?n=facebook"), { "fb" })
    assert.are.equal(202, status, cjson.encode(body))
    assert.are.same({}, fake:tls().requests)

    status, body = t.create(fake:https_asset("image.jpg?w=640&h=640&n=mixed"), { "fb", "ig" })
    assert.are.equal(202, status, cjson.encode(body))
    assert.are.same({ "/_fake/assets/image.jpg?w=640&h=640&n=mixed" }, fake:tls().requests)

    -- A refusal for Instagram refuses the whole post, Facebook target included.
    status, body = t.create(fake:https_asset("image.jpg?w=300&h=300&n=mixed-small"), { "fb", "ig" })
    local errors = refusal(status, body)
    assert.are.equal("image_too_small", errors[1].code)
  end)

  it("publishes a valid image", function()
    local t = lenient.t
    local status, body = t.create(fake:instagram_image(), { "ig" }, true)
    assert.are.equal(202, status, cjson.encode(body))
    local op = stack.wait_operation(function(path) return t.api("GET", path) end, body.operationId, 30)
    assert.are.equal("succeeded", op.status, cjson.encode(op))
  end)
end)

-- lib/post_rules.lua: every rule of a create-post body, each wrong in every way, and
-- all problems reported in one call. Pure: no host globals needed.
local post_rules = require "post_rules"
local cjson = require "cjson"

local NOW = 1763719200 -- 2025-11-21T10:00:00Z
local DAY = 86400

local ACCOUNTS = {
  acc_fb = { id = "acc_fb", platform = "facebook", status = "active" },
  acc_ig = { id = "acc_ig", platform = "instagram", status = "active" },
  acc_gone = { id = "acc_gone", platform = "facebook", status = "disconnected" },
}
for i = 1, 21 do
  ACCOUNTS["acc_" .. i] = { id = "acc_" .. i, platform = "facebook", status = "active" }
end

local UPLOADS = {
  upl_jpg = { id = "upl_jpg", mime_type = "image/jpeg", size_bytes = 1000, width = 1080, height = 1080 },
  upl_png = { id = "upl_png", mime_type = "image/png", size_bytes = 1000, width = 1080, height = 1080 },
  upl_mpo = { id = "upl_mpo", mime_type = "image/jpeg", jpeg_variant = "mpo", size_bytes = 1000, width = 1080, height = 1080 },
  upl_big = { id = "upl_big", mime_type = "image/jpeg", size_bytes = 8 * 1048576 + 1, width = 1080, height = 1080 },
  upl_tall = { id = "upl_tall", mime_type = "image/jpeg", size_bytes = 1000, width = 500, height = 1000 },
  upl_wide = { id = "upl_wide", mime_type = "image/jpeg", size_bytes = 1000, width = 1920, height = 1000 },
  upl_4x5 = { id = "upl_4x5", mime_type = "image/jpeg", size_bytes = 8 * 1048576, width = 1080, height = 1350 },
  upl_191 = { id = "upl_191", mime_type = "image/jpeg", size_bytes = 1000, width = 1910, height = 1000 },
  upl_small = { id = "upl_small", mime_type = "image/jpeg", size_bytes = 1000, width = 300, height = 300 },
}

local lookups
local function env(over)
  lookups = 0
  local e = {
    now = NOW,
    max_schedule_days = 365,
    find_account = function(id) lookups = lookups + 1; return ACCOUNTS[id] end,
    find_upload = function(id) return UPLOADS[id] end,
  }
  for k, v in pairs(over or {}) do e[k] = v end
  return e
end

-- Bodies come from JSON text, as the handler gets them (null, [] and {} included).
local function decode(text) return cjson.decode(text) end

local function fb_text(message)
  return {
    targets = { { socialAccountId = "acc_fb", platform = "facebook" } },
    content = { type = "text", message = message or "Hello" },
    publishing = { mode = "immediate" },
  }
end

local function ig_image(content, media)
  return {
    targets = { { socialAccountId = "acc_ig", platform = "instagram" } },
    content = content or { type = "image", imageUrl = "https://cdn.example.com/a.jpg" },
    media = media,
    publishing = { mode = "immediate" },
  }
end

local function problems(body, e)
  local normalized, errors = post_rules.validate(body, e or env())
  assert.is_table(errors)
  if #errors == 0 then assert.is_table(normalized) else assert.is_nil(normalized) end
  for _, err in ipairs(errors) do
    assert.is_string(err.field)
    assert.is_string(err.code)
    assert.matches("^%S.+%.$", err.message) -- a sentence
  end
  return errors
end

-- The problems as "field code" lines, in the order reported.
local function found(body, e)
  local out = {}
  for i, err in ipairs(problems(body, e)) do out[i] = err.field .. " " .. err.code end
  return out
end

local function ok(body, e)
  local normalized, errors = post_rules.validate(body, e or env())
  assert.same({}, errors)
  return normalized
end

local function expect(body, wanted, e) assert.same(wanted, found(body, e)) end

local function message_of(body, field)
  for _, err in ipairs(problems(body)) do
    if err.field == field then return err.message end
  end
end

describe("post_rules.validate", function()
  describe("valid bodies", function()
    it("normalises an immediate Facebook text post", function()
      local body = fb_text("Hello")
      body.externalReference = "order-17"
      assert.same({
        targets = { { account_id = "acc_fb", platform = "facebook" } },
        content = { type = "text", message = "Hello" },
        publishing = { mode = "immediate" },
        external_reference = "order-17",
      }, ok(body))
    end)

    it("normalises a scheduled link post to several accounts", function()
      local n = ok(decode([[{
        "targets": [{"socialAccountId": "acc_fb", "platform": "facebook"},
                    {"socialAccountId": "acc_1", "platform": "facebook"}],
        "content": {"type": "link", "link": "https://example.com/a?b=c#d", "message": null},
        "media": [],
        "publishing": {"mode": "scheduled", "scheduledAt": "2025-11-21T11:30:00.5+01:00"},
        "externalReference": null
      }]]))
      assert.same({ { account_id = "acc_fb", platform = "facebook" }, { account_id = "acc_1", platform = "facebook" } },
        n.targets)
      assert.same({ type = "link", link = "https://example.com/a?b=c#d" }, n.content)
      assert.same({ mode = "scheduled", scheduled_at = NOW + 1800.5 }, n.publishing)
      assert.is_nil(n.image)
      assert.is_nil(n.external_reference)
    end)

    it("normalises image posts by URL and by upload", function()
      local n = ok(ig_image({ type = "image", imageUrl = "https://cdn.example.com/a.jpg", message = "Caption" }))
      assert.same({ source = "url", url = "https://cdn.example.com/a.jpg" }, n.image)
      assert.same({ type = "image", message = "Caption" }, n.content)
      assert.same({ { account_id = "acc_ig", platform = "instagram" } }, n.targets)

      n = ok(ig_image({ type = "image" }, { { source = "upload", uploadId = "upl_jpg" } }))
      assert.same({ source = "upload", upload_id = "upl_jpg", mime_type = "image/jpeg" }, n.image)
    end)

    it("treats an empty optional message as none", function()
      local n = ok(ig_image({ type = "image", imageUrl = "https://cdn.example.com/a.jpg", message = "" }))
      assert.is_nil(n.content.message)
    end)
  end)

  describe("the body", function()
    it("must be a JSON object", function()
      for _, text in ipairs({ "[1, 2]", '"post"', "42", "null", "true" }) do
        expect(decode(text), { " invalid_value" })
      end
      expect(nil, { " invalid_value" })
    end)

    it("refuses unknown top-level fields and names the allowed ones", function()
      local body = fb_text()
      body.schedule = "now"
      expect(body, { "/schedule unknown_field" })
      assert.matches("content, externalReference, media, publishing, targets", message_of(body, "/schedule"))
    end)

    it("escapes odd field names in the pointer", function()
      local body = fb_text()
      body["a/b~c"] = 1
      expect(body, { "/a~1b~0c unknown_field" })
    end)

    it("refuses companyId at every depth, once each, never as unknown_field", function()
      local body = decode([[{
        "companyId": "cmp_1",
        "targets": [{"socialAccountId": "acc_fb", "platform": "facebook", "companyId": "cmp_1"}],
        "content": {"type": "text", "message": "Hi", "companyId": "cmp_1"},
        "publishing": {"mode": "immediate", "companyId": "cmp_1"},
        "extra": {"deep": [{"companyId": "cmp_1"}]}
      }]])
      expect(body, {
        "/companyId field_not_allowed",
        "/content/companyId field_not_allowed",
        "/extra/deep/0/companyId field_not_allowed",
        "/publishing/companyId field_not_allowed",
        "/targets/0/companyId field_not_allowed",
        "/extra unknown_field",
      })
    end)

    it("refuses companyId inside a media item", function()
      expect(ig_image({ type = "image" }, { { source = "upload", uploadId = "upl_jpg", companyId = "cmp_1" } }),
        { "/media/0/companyId field_not_allowed" })
    end)
  end)

  describe("targets", function()
    it("are required", function()
      local body = fb_text()
      body.targets = nil
      expect(body, { "/targets required" })
      body.targets = cjson.null
      expect(body, { "/targets required" })
    end)

    it("must be an array of objects", function()
      local body = fb_text()
      body.targets = "acc_fb"
      expect(body, { "/targets invalid_value" })
      assert.equal("targets must be an array, not a string.", message_of(body, "/targets"))
      body.targets = { socialAccountId = "acc_fb", platform = "facebook" }
      expect(body, { "/targets invalid_value" })
      body.targets = { "acc_fb", 7, cjson.null, { "x" } }
      expect(body, { "/targets/0 invalid_value", "/targets/1 invalid_value", "/targets/2 invalid_value",
        "/targets/3 invalid_value" })
    end)

    it("number 1 to 20", function()
      local body = fb_text()
      body.targets = decode("[]")
      expect(body, { "/targets invalid_value" })

      body.targets = {}
      for i = 1, 20 do body.targets[i] = { socialAccountId = "acc_" .. i, platform = "facebook" } end
      assert.equal(20, #ok(body).targets)

      body.targets[21] = { socialAccountId = "acc_21", platform = "facebook" }
      expect(body, { "/targets invalid_value" })
      assert.matches("between 1 and 20 targets; this request has 21", message_of(body, "/targets"))
    end)

    it("do not look up accounts past the limit", function()
      local body = fb_text()
      body.targets = {}
      for i = 1, 500 do body.targets[i] = { socialAccountId = "acc_x" .. i, platform = "facebook" } end
      local errors = problems(body)
      assert.equal(20, lookups)
      assert.equal(21, #errors) -- the count, and the 20 examined unknown accounts
    end)

    it("need socialAccountId and platform of the right types", function()
      local body = fb_text()
      body.targets = decode([[[
        {},
        {"socialAccountId": "", "platform": ""},
        {"socialAccountId": 12, "platform": true},
        {"socialAccountId": ["acc_fb"], "platform": {"name": "facebook"}},
        {"socialAccountId": "acc_fb", "platform": "twitter"},
        {"socialAccountId": "acc_1", "platform": "Facebook"}
      ] ]])
      expect(body, {
        "/targets/0/socialAccountId required", "/targets/0/platform required",
        "/targets/1/socialAccountId required", "/targets/1/platform required",
        "/targets/2/socialAccountId invalid_value", "/targets/2/platform invalid_value",
        "/targets/3/socialAccountId invalid_value", "/targets/3/platform invalid_value",
        "/targets/4/platform invalid_value",
        "/targets/5/platform invalid_value",
      })
      assert.equal("socialAccountId must be a string, not a number.", message_of(body, "/targets/2/socialAccountId"))
      assert.equal("platform must be a string, not true or false.", message_of(body, "/targets/2/platform"))
    end)

    it("refuse unknown fields inside a target", function()
      local body = fb_text()
      body.targets[1].pageId = "123"
      expect(body, { "/targets/0/pageId unknown_field" })
    end)

    it("must be active accounts the caller can see, with one answer for all the others", function()
      local body = fb_text()
      body.targets = {
        { socialAccountId = "acc_nope", platform = "facebook" },
        { socialAccountId = "acc_gone", platform = "facebook" },
        { socialAccountId = "acc_of_another_company", platform = "instagram" },
      }
      -- the declared platform still brings Instagram's rules: the client meant to post there
      expect(body, { "/targets/0/socialAccountId unknown_account", "/targets/1/socialAccountId unknown_account",
        "/targets/2/socialAccountId unknown_account", "/content/type unsupported_content_type" })
      local a, b = message_of(body, "/targets/0/socialAccountId"), message_of(body, "/targets/1/socialAccountId")
      assert.equal(a, b)
    end)

    it("must name the account's own platform", function()
      local body = fb_text()
      body.targets = { { socialAccountId = "acc_ig", platform = "facebook" } }
      -- Instagram's rules apply too: the account is an Instagram one
      expect(body, { "/targets/0/platform platform_mismatch", "/content/type unsupported_content_type" })
      assert.matches("on instagram; set platform to instagram", message_of(body, "/targets/0/platform"))
    end)

    it("name each account once", function()
      local body = fb_text()
      body.targets = {
        { socialAccountId = "acc_fb", platform = "facebook" },
        { socialAccountId = "acc_1", platform = "facebook" },
        { socialAccountId = "acc_fb", platform = "facebook" },
        { socialAccountId = "acc_1" },
      }
      expect(body, { "/targets/2/socialAccountId duplicate_target", "/targets/3/platform required",
        "/targets/3/socialAccountId duplicate_target" })
      assert.matches("already target 0", message_of(body, "/targets/2/socialAccountId"))
    end)
  end)

  describe("content", function()
    it("is a required object", function()
      local body = fb_text()
      body.content = nil
      expect(body, { "/content required" })
      body.content = "Hello"
      expect(body, { "/content invalid_value" })
      body.content = { "text", "Hello" }
      expect(body, { "/content invalid_value" })
      body.content = decode("{}")
      expect(body, { "/content/type required" })
    end)

    it("has a type of text, link or image", function()
      local body = fb_text()
      for _, bad in ipairs({ "video", "TEXT", 1, true }) do
        body.content.type = bad
        expect(body, { "/content/type invalid_value" })
      end
      body.content.type = ""
      expect(body, { "/content/type required" })
    end)

    it("refuses unknown fields", function()
      local body = fb_text()
      body.content.title = "T"
      expect(body, { "/content/title unknown_field" })
    end)

    it("refuses the fields of another type instead of dropping them", function()
      local body = fb_text()
      body.content.link = "https://example.com"
      body.content.imageUrl = "https://example.com/a.jpg"
      expect(body, { "/content/link field_not_allowed", "/content/imageUrl field_not_allowed" })

      body = fb_text()
      body.content = { type = "link", link = "https://example.com", imageUrl = "https://example.com/a.jpg" }
      expect(body, { "/content/imageUrl field_not_allowed" })

      body.content = { type = "image", link = "https://example.com", imageUrl = "https://example.com/a.jpg" }
      expect(body, { "/content/link field_not_allowed" })
    end)

    describe("text", function()
      it("needs a non-empty string message", function()
        expect(fb_text(""), { "/content/message required" })
        local body = fb_text()
        body.content.message = nil
        expect(body, { "/content/message required" })
        body.content.message = cjson.null
        expect(body, { "/content/message required" })
        body.content.message = 42
        expect(body, { "/content/message invalid_value" })
        body.content.message = { "Hello" }
        expect(body, { "/content/message invalid_value" })
      end)

      it("counts characters, not bytes, up to 63206", function()
        local at_limit = string.rep("é", 63206)   -- 126412 bytes
        assert.equal("text", ok(fb_text(at_limit)).content.type)
        assert.same({ "/content/message too_long" }, found(fb_text(at_limit .. "a")))
        assert.matches("63207 characters; the most allowed is 63206", message_of(fb_text(at_limit .. "a"), "/content/message"))
        ok(fb_text(string.rep("😀", 63206)))
      end)

      it("refuses text that is not UTF-8", function()
        expect(fb_text("caf\xe9"), { "/content/message invalid_value" })
        expect(fb_text("\xed\xa0\x80"), { "/content/message invalid_value" }) -- a lone surrogate
      end)
    end)

    describe("link", function()
      local function link_post(link, message)
        local body = fb_text()
        body.content = { type = "link", link = link, message = message }
        return body
      end

      it("needs link, message optional", function()
        expect(link_post(nil), { "/content/link required" })
        expect(link_post(""), { "/content/link required" })
        expect(link_post(7), { "/content/link invalid_value" })
        assert.equal("Read this", ok(link_post("https://example.com", "Read this")).content.message)
        assert.is_nil(ok(link_post("https://example.com")).content.message)
      end)

      it("accepts absolute http(s) URLs", function()
        for _, url in ipairs({
          "http://example.com", "https://example.com/", "HTTPS://Example.COM/Path",
          "https://example.com:8443/a/b?c=d&e=f#g", "https://user:pw@example.com/",
          "http://[2001:db8::1]:8080/x", "https://127.0.0.1/", "https://xn--caf-dma.example/",
          "https://café.example/menu", "https://example.com/%20a",
        }) do
          assert.equal(url, ok(link_post(url)).content.link, url)
        end
      end)

      it("refuses anything else", function()
        for _, url in ipairs({
          "example.com", "//example.com/a", "/relative/path", "ftp://example.com/a",
          "javascript:alert(1)", "mailto:a@example.com", "https://", "https:///path", "http//example.com",
          "https://exa mple.com", "https://example.com/a b", "https://example.com/\n", "https://ex<ample.com/",
          "https://example.com:port/", "https://[::1/", "https://:80/",
        }) do
          assert.same({ "/content/link invalid_value" }, found(link_post(url)), url)
        end
      end)

      it("holds at most 2048 characters", function()
        local base = "https://example.com/"
        ok(link_post(base .. string.rep("a", 2048 - #base)))
        expect(link_post(base .. string.rep("a", 2049 - #base)), { "/content/link too_long" })
      end)
    end)

    describe("image", function()
      local function fb_image(content, media)
        local body = ig_image(content, media)
        body.targets = { { socialAccountId = "acc_fb", platform = "facebook" } }
        return body
      end

      it("needs exactly one image", function()
        expect(fb_image({ type = "image" }), { "/content/imageUrl required" })
        expect(fb_image({ type = "image" }, decode("[]")), { "/content/imageUrl required" })
        expect(fb_image({ type = "image", imageUrl = "https://example.com/a.jpg" },
          { { source = "upload", uploadId = "upl_jpg" } }), { "/media field_not_allowed" })
      end)

      it("accepts http image URLs for Facebook, but not other URLs", function()
        assert.same({ source = "url", url = "http://example.com/a.png" },
          ok(fb_image({ type = "image", imageUrl = "http://example.com/a.png" })).image)
        expect(fb_image({ type = "image", imageUrl = "file:///etc/passwd" }), { "/content/imageUrl invalid_value" })
        expect(fb_image({ type = "image", imageUrl = 5 }), { "/content/imageUrl invalid_value" })
        -- a given but invalid URL is not also reported as missing
        expect(fb_image({ type = "image", imageUrl = "" }), { "/content/imageUrl invalid_value" })
      end)

      it("accepts any uploaded type for Facebook", function()
        assert.equal("image/png", ok(fb_image({ type = "image" }, { { source = "upload", uploadId = "upl_png" } })).image.mime_type)
      end)
    end)
  end)

  describe("media", function()
    local function with_media(media)
      return ig_image({ type = "image" }, media)
    end

    it("is an array of one upload item", function()
      expect(with_media("upl_jpg"), { "/media invalid_value", "/content/imageUrl required" })
      expect(with_media({ source = "upload", uploadId = "upl_jpg" }), { "/media invalid_value", "/content/imageUrl required" })
      expect(with_media({ { source = "upload", uploadId = "upl_jpg" }, { source = "upload", uploadId = "upl_jpg" } }),
        { "/media invalid_value" })
      expect(with_media({ "upl_jpg" }), { "/media/0 invalid_value" })
    end)

    it("items need source upload and a known uploadId", function()
      expect(with_media({ {} }), { "/media/0/source required", "/media/0/uploadId required" })
      expect(with_media({ { source = "url", uploadId = "upl_jpg" } }), { "/media/0/source invalid_value" })
      expect(with_media({ { source = "upload", uploadId = 3 } }), { "/media/0/uploadId invalid_value" })
      expect(with_media({ { source = "upload", uploadId = "upl_nope" } }), { "/media/0/uploadId unknown_upload" })
      expect(with_media({ { source = "upload", uploadId = "upl_jpg", url = "x" } }), { "/media/0/url unknown_field" })
    end)

    it("belongs to image posts only", function()
      local body = fb_text()
      body.media = { { source = "upload", uploadId = "upl_jpg" } }
      expect(body, { "/media field_not_allowed" })
      body.media = decode("[]")
      ok(body)
    end)
  end)

  describe("Instagram targets", function()
    local function ig_caption(caption)
      return ig_image({ type = "image", imageUrl = "https://cdn.example.com/a.jpg", message = caption })
    end

    it("refuse text and link posts", function()
      local body = fb_text()
      body.targets[2] = { socialAccountId = "acc_ig", platform = "instagram" }
      expect(body, { "/content/type unsupported_content_type" })
      body.content = { type = "link", link = "https://example.com" }
      expect(body, { "/content/type unsupported_content_type" })
    end)

    it("apply by the account's platform even when the target omits it", function()
      local body = fb_text()
      body.targets = { { socialAccountId = "acc_ig" } }
      expect(body, { "/targets/0/platform required", "/content/type unsupported_content_type" })
    end)

    it("need JPEG uploads", function()
      expect(ig_image({ type = "image" }, { { source = "upload", uploadId = "upl_png" } }),
        { "/media/0/uploadId image_not_jpeg" })
      ok(ig_image({ type = "image" }, { { source = "upload", uploadId = "upl_jpg" } }))
      -- A multi-picture JPEG is image/jpeg, but not what Instagram takes.
      local _, errors = post_rules.validate(ig_image({ type = "image" }, { { source = "upload", uploadId = "upl_mpo" } }), env())
      assert.are.equal(1, #errors)
      assert.are.equal("image_not_jpeg", errors[1].code)
      assert.matches("multi-picture JPEG (MPO)", errors[1].message, 1, true)
    end)

    it("check an upload's size, aspect ratio and width, naming the measured value", function()
      local function problems(id)
        local _, errors = post_rules.validate(ig_image({ type = "image" }, { { source = "upload", uploadId = id } }), env())
        local out = {}
        for _, e in ipairs(errors or {}) do out[#out + 1] = e.field .. " " .. e.code .. ": " .. e.message end
        return out
      end
      assert.same({ "/media/0/uploadId image_too_large: The image has 8388609 bytes (8.0 MiB), more than "
        .. "Instagram's 8 MiB (8388608 bytes)." }, problems("upl_big"))
      assert.same({ "/media/0/uploadId image_aspect_ratio: The image is 500x1000 px: aspect ratio 0.50 "
        .. "(width/height) is outside Instagram's 0.80 to 1.91; crop it." }, problems("upl_tall"))
      assert.same({ "/media/0/uploadId image_aspect_ratio: The image is 1920x1000 px: aspect ratio 1.92 "
        .. "(width/height) is outside Instagram's 0.80 to 1.91; crop it." }, problems("upl_wide"))
      assert.same({ "/media/0/uploadId image_too_small: The image is 300 px wide, less than Instagram's "
        .. "minimum width of 320 px." }, problems("upl_small"))
      -- The bounds themselves pass: exactly 4:5, 1.91:1 and 8 MiB.
      assert.same({}, problems("upl_4x5"))
      assert.same({}, problems("upl_191"))
    end)

    it("leave Facebook's image rules as they were", function()
      local body = ig_image({ type = "image" }, { { source = "upload", uploadId = "upl_tall" } })
      body.targets = { { socialAccountId = "acc_fb", platform = "facebook" } }
      ok(body)
    end)

    it("need https image URLs, whatever their extension", function()
      expect(ig_image({ type = "image", imageUrl = "http://cdn.example.com/a.jpg" }),
        { "/content/imageUrl image_url_not_https" })
      ok(ig_image({ type = "image", imageUrl = "https://cdn.example.com/a.png" }))
      ok(ig_image({ type = "image", imageUrl = "HTTPS://cdn.example.com/image?id=7" }))
    end)

    it("hold captions of at most 2200 characters", function()
      ok(ig_caption(string.rep("ü", 2200)))
      expect(ig_caption(string.rep("ü", 2201)), { "/content/message too_long" })
    end)

    it("hold at most 30 hashtags", function()
      local tags = {}
      for i = 1, 30 do tags[i] = "#tag" .. i end
      ok(ig_caption(table.concat(tags, " ")))
      tags[31] = "#one_more"
      expect(ig_caption(table.concat(tags, " ")), { "/content/message too_many_hashtags" })
    end)

    it("hold at most 20 mentions", function()
      local names = {}
      for i = 1, 20 do names[i] = "@user." .. i end
      ok(ig_caption(table.concat(names, ", ")))
      names[21] = "@last"
      expect(ig_caption(table.concat(names, ", ")), { "/content/message too_many_mentions" })
    end)

    it("report every caption problem at once", function()
      local caption = string.rep("#a @b ", 31) .. string.rep("x", 2200)
      expect(ig_caption(caption), { "/content/message too_long", "/content/message too_many_hashtags",
        "/content/message too_many_mentions" })
    end)

    it("apply to mixed posts, and not to Facebook-only ones", function()
      local caption = string.rep("#tag ", 31)
      local body = ig_caption(caption)
      body.targets[2] = { socialAccountId = "acc_fb", platform = "facebook" }
      expect(body, { "/content/message too_many_hashtags" })
      body.targets = { { socialAccountId = "acc_fb", platform = "facebook" } }
      body.content.imageUrl = "http://cdn.example.com/a.gif"
      ok(body)
    end)
  end)

  describe("hashtag and mention counting", function()
    it("counts #word and @word tokens that start a word", function()
      local h, m = post_rules.count_hashtags, post_rules.count_mentions
      assert.equal(3, h("#one two #three (#four"))
      assert.equal(1, h("#a#b"))          -- "#b" follows a word character
      assert.equal(1, h("##double"))
      assert.equal(0, h("# alone, issue#12, C#"))
      assert.equal(2, h("#café #日本"))
      assert.equal(2, h("#same #same"))
      assert.equal(0, h(""))
      assert.equal(2, m("@alice, @bob."))
      assert.equal(0, m("mail me@example.com or @ or @-x"))
      assert.equal(1, m("(@user.name)"))
      assert.equal(1, m("@_x"))
    end)
  end)

  describe("publishing", function()
    local function when(publishing)
      local body = fb_text()
      body.publishing = publishing
      return body
    end

    it("is a required object with a mode", function()
      expect(when(nil), { "/publishing required" })
      expect(when("immediate"), { "/publishing invalid_value" })
      expect(when({}), { "/publishing/mode required" })
      expect(when({ mode = "later" }), { "/publishing/mode invalid_value" })
      expect(when({ mode = 1 }), { "/publishing/mode invalid_value" })
      expect(when({ mode = "immediate", at = "now" }), { "/publishing/at unknown_field" })
    end)

    it("has no scheduledAt when immediate", function()
      expect(when({ mode = "immediate", scheduledAt = "2025-11-22T10:00:00Z" }), { "/publishing/scheduledAt field_not_allowed" })
      expect(when({ mode = "immediate", scheduledAt = 5 }), { "/publishing/scheduledAt field_not_allowed" })
      assert.same({ mode = "immediate" }, ok(when(decode('{"mode": "immediate", "scheduledAt": null}'))).publishing)
    end)

    it("needs scheduledAt when scheduled", function()
      expect(when({ mode = "scheduled" }), { "/publishing/scheduledAt required" })
      expect(when({ mode = "scheduled", scheduledAt = "" }), { "/publishing/scheduledAt required" })
      expect(when({ mode = "scheduled", scheduledAt = NOW + 60 }), { "/publishing/scheduledAt invalid_value" })
    end)

    it("takes RFC 3339 times with any offset", function()
      local function at(s) return ok(when({ mode = "scheduled", scheduledAt = s })).publishing.scheduled_at end
      assert.equal(NOW + DAY, at("2025-11-22T10:00:00Z"))
      assert.equal(NOW + DAY, at("2025-11-22T11:00:00+01:00"))
      assert.equal(NOW + DAY, at("2025-11-22T04:30:00-05:30"))
      assert.equal(NOW + DAY + 0.25, at("2025-11-22T10:00:00.250Z"))
      assert.equal(NOW + 1, at("2025-11-21t10:00:01z"))
    end)

    it("refuses malformed times", function()
      for _, s in ipairs({
        "tomorrow", "2025-11-22", "2025-11-22T10:00:00", "2025-11-22 10:00:00Z", "2025-11-22T10:00Z",
        "2025-11-22T10:00:00+0100", "2025-11-22T10:00:00.Z", "2026-02-29T10:00:00Z", "2026-02-30T10:00:00Z",
        "2025-11-31T10:00:00Z", "2025-13-01T10:00:00Z", "2025-11-22T24:00:00Z", "2025-11-22T10:60:00Z",
        "2025-11-22T10:00:60Z", "2025-11-22T10:00:00+24:00", "2025-11-22T10:00:00Z ", "+2025-11-22T10:00:00Z",
      }) do
        assert.same({ "/publishing/scheduledAt invalid_value" }, found(when({ mode = "scheduled", scheduledAt = s })), s)
      end
    end)

    it("must be in the future", function()
      local function past(s) return found(when({ mode = "scheduled", scheduledAt = s })) end
      assert.same({ "/publishing/scheduledAt scheduled_at_in_past" }, past("2025-11-21T09:59:59Z"))
      assert.same({ "/publishing/scheduledAt scheduled_at_in_past" }, past("2025-11-21T10:00:00Z"))
      -- 10:30+01:00 is 09:30Z: the offset matters
      assert.same({ "/publishing/scheduledAt scheduled_at_in_past" }, past("2025-11-21T10:30:00+01:00"))
      assert.same({}, past("2025-11-21T10:00:00.001Z"))
      assert.matches("now is 2025%-11%-21T10:00:00.000Z",
        message_of(when({ mode = "scheduled", scheduledAt = "2020-01-01T00:00:00Z" }), "/publishing/scheduledAt"))
    end)

    it("is at most max_schedule_days ahead", function()
      local function far(s, e) return found(when({ mode = "scheduled", scheduledAt = s }), e) end
      assert.same({}, far("2026-11-21T10:00:00Z"))                 -- exactly 365 days
      assert.same({}, far("2026-11-21T11:00:00+01:00"))
      assert.same({ "/publishing/scheduledAt invalid_value" }, far("2026-11-21T10:00:00.001Z"))
      assert.same({ "/publishing/scheduledAt invalid_value" }, far("2026-11-21T09:00:01-01:00"))
      assert.same({ "/publishing/scheduledAt invalid_value" }, far("2025-11-22T10:00:01Z", env({ max_schedule_days = 1 })))
      assert.matches("more than 365 days ahead %(the latest is 2026%-11%-21T10:00:00.000Z%)",
        message_of(when({ mode = "scheduled", scheduledAt = "2027-01-01T00:00:00Z" }), "/publishing/scheduledAt"))
    end)
  end)

  describe("externalReference", function()
    it("is an optional string of at most 255 characters", function()
      local body = fb_text()
      body.externalReference = string.rep("ß", 255)
      assert.equal(body.externalReference, ok(body).external_reference)
      body.externalReference = string.rep("ß", 256)
      expect(body, { "/externalReference too_long" })
      body.externalReference = 17
      expect(body, { "/externalReference invalid_value" })
      assert.equal("externalReference must be a string, not a number.", message_of(body, "/externalReference"))
      body.externalReference = { ref = "x" }
      expect(body, { "/externalReference invalid_value" })
    end)
  end)

  it("reports every problem of a body in one call", function()
    local body = decode([[{
      "companyId": "cmp_other",
      "targets": [
        {"socialAccountId": "acc_nope", "platform": "facebook"},
        {"socialAccountId": "acc_fb", "platform": "instagram"},
        {"socialAccountId": "acc_ig", "platform": "instagram", "note": 1}
      ],
      "content": {"type": "image", "imageUrl": "http://cdn.example.com/a.jpg", "message": 12},
      "media": [{"source": "upload", "uploadId": "upl_png"}],
      "publishing": {"mode": "scheduled", "scheduledAt": "2024-02-30T10:00:00Z"},
      "externalReference": false
    }]])
    expect(body, {
      "/companyId field_not_allowed",
      "/targets/0/socialAccountId unknown_account",
      "/targets/1/platform platform_mismatch",
      "/targets/2/note unknown_field",
      "/content/message invalid_value",
      "/media field_not_allowed",
      "/media/0/uploadId image_not_jpeg",
      "/content/imageUrl image_url_not_https",
      "/publishing/scheduledAt invalid_value",
      "/externalReference invalid_value",
    })
  end)

  it("stays pure: the same answer twice, nothing global touched", function()
    local before = {}
    for k in pairs(_G) do before[k] = true end
    local body = fb_text()
    assert.same(ok(body), ok(body))
    for k in pairs(_G) do assert.is_true(before[k], k) end
  end)
end)

describe("post_rules times", function()
  local parse, format = post_rules.parse_time, post_rules.format_time

  it("parses RFC 3339 with any offset and fraction", function()
    assert.equal(0, parse("1970-01-01T00:00:00Z"))
    assert.equal(-1, parse("1969-12-31T23:59:59Z"))
    assert.equal(951868799, parse("2000-02-29T23:59:59Z"))
    assert.equal(253402300799, parse("9999-12-31T23:59:59Z"))
    assert.equal(1795255200, parse("2026-11-21T10:00:00Z"))
    assert.equal(1795255200.5, parse("2026-11-21T11:00:00.5+01:00"))
    assert.equal(1795255200, parse("2026-11-21T10:00:00-00:00"))
    assert.equal(1795255200, parse("2026-11-21T00:00:00-10:00"))
    assert.equal(1795255200, parse("2026-11-22T09:59:00+23:59"))
    assert.near(1795255200.123456789, parse("2026-11-21T10:00:00.123456789Z"), 1e-6)
  end)

  it("refuses impossible dates and non-RFC 3339 forms", function()
    assert.equal(951782400, parse("2000-02-29T00:00:00Z"))   -- divisible by 400: leap
    assert.is_nil(parse("2100-02-29T00:00:00Z"))             -- divisible by 100: not
    assert.truthy(parse("2028-02-29T00:00:00Z"))
    assert.is_nil(parse("2027-02-29T00:00:00Z"))
    for _, s in ipairs({ "2026-04-31T00:00:00Z", "2026-00-10T00:00:00Z", "2026-01-00T00:00:00Z",
      "2026-11-21T10:00:00+01", "2026-11-21T10:00:00+01:60", "2026-11-21T10:00:00.5", "26-11-21T10:00:00Z",
      "2026-11-21T10:00:00ZZ", "", "2026-11-21T1:00:00Z" }) do
      assert.is_nil(parse(s), s)
    end
    assert.is_nil(parse(1795255200))
    assert.is_nil(parse(nil))
  end)

  it("formats UTC with milliseconds", function()
    assert.equal("1970-01-01T00:00:00.000Z", format(0))
    assert.equal("1969-12-31T23:59:59.000Z", format(-1))
    assert.equal("2026-11-21T10:00:00.000Z", format(1795255200))
    assert.equal("2026-11-21T10:00:00.500Z", format(1795255200.5))
    assert.equal("2026-11-21T10:00:00.123Z", format(1795255200.123))
    assert.equal("2026-11-21T10:00:01.000Z", format(1795255200.9999))
    assert.equal("2000-02-29T23:59:59.000Z", format(951868799))
    assert.equal("9999-12-31T23:59:59.000Z", format(253402300799))
  end)

  it("round-trips", function()
    for _, s in ipairs({ "2026-11-21T10:00:00.000Z", "2024-02-29T12:34:56.789Z", "1999-12-31T23:59:59.999Z" }) do
      assert.equal(s, format(parse(s)))
    end
    assert.equal("2026-11-21T10:00:00.500Z", format(parse("2026-11-21T11:00:00.5+01:00")))
  end)
end)

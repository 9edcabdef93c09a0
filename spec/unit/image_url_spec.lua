-- lib/image_url.lua with a scripted http.request: redirects followed one hop at a
-- time, each hop held to https and to the address rule, the limits asked of the
-- host, and the host's failures turned into safe messages.
local fake_host = require "fake_host"

describe("image_url", function()
  local image_url, calls, answers
  -- A JPEG the fake Graph API would make: SOI, SOF0 640x640, SOS, EOI.
  local jpeg = "\255\216" .. "\255\192\0\11\8\2\128\2\128\1\1\17\0" .. "\255\218\0\8\1\1\0\0\63\0" .. "\0\255\217"

  before_each(function()
    fake_host.install()
    _G.clock.mono_ms = function() return 0 end
    calls, answers = {}, {}
    _G.http = { request = function(opts)
      calls[#calls + 1] = opts
      return table.unpack(table.remove(answers, 1))
    end }
    package.loaded.image_url = nil
    image_url = require "image_url"
  end)

  local function redirect(to) return { { status = 302, headers = { location = to }, body = "" } } end

  it("follows at most 3 redirects, each hop checked for its address again", function()
    answers = { redirect("/b"), redirect("//other.example/c"), redirect("d?x=1"),
      { { status = 200, headers = {}, body = jpeg } } }
    local image = image_url.fetch("https://a.example/dir/a.jpg")
    assert.are.same({ mime_type = "image/jpeg", width = 640, height = 640, size_bytes = #jpeg }, image)
    local urls = {}
    for i, c in ipairs(calls) do
      urls[i] = c.url
      assert.is_true(c.deny_private_addresses)
      assert.are.equal(config.get("uploads.max_bytes") + 1, c.max_body_bytes)
    end
    assert.are.same({ "https://a.example/dir/a.jpg", "https://a.example/b", "https://other.example/c",
      "https://other.example/d?x=1" }, urls)
  end)

  it("refuses a fourth redirect, and a hop that is not https, without calling it", function()
    answers = { redirect("/1"), redirect("/2"), redirect("/3"), redirect("/4") }
    local _, code, message = image_url.fetch("https://a.example/0")
    assert.are.equal("image_url_unreachable", code)
    assert.matches("redirects more than 3 times", message)
    assert.are.equal(4, #calls)

    calls, answers = {}, { redirect("http://a.example/plain.jpg") }
    _, code, message = image_url.fetch("https://a.example/0")
    assert.are.equal("image_url_unreachable", code)
    assert.matches("not https", message)
    assert.are.equal(1, #calls)
  end)

  it("refuses a redirect to a private address with the host's verdict, in safe words", function()
    answers = { redirect("https://10.0.0.7/x.jpg"), { nil, "destination address not allowed", "forbidden" } }
    local _, code, message = image_url.fetch("https://a.example/0")
    assert.are.equal("image_url_unreachable", code)
    assert.matches("not a public internet address", message)
    assert.is_true(calls[2].deny_private_addresses)
  end)

  it("never passes the transport's error text on", function()
    answers = { { nil, "Failed to connect to 10.1.1.1 port 5432: Connection refused", "connect" } }
    local _, code, message = image_url.fetch("https://a.example/0")
    assert.are.equal("image_url_unreachable", code)
    assert.falsy(message:find("5432") or message:find("refused") or message:find("10.1.1.1", 1, true))
  end)

  it("lets private addresses through only with posts.allow_private_image_urls", function()
    fake_host.install({ ["posts.allow_private_image_urls"] = true })
    _G.clock.mono_ms = function() return 0 end
    _G.http = { request = function(opts)
      calls[#calls + 1] = opts
      return { status = 200, headers = {}, body = jpeg }
    end }
    image_url.fetch("https://127.0.0.1/a.jpg")
    assert.is_false(calls[1].deny_private_addresses)
  end)
end)

-- lib/images.lua: type and size from the bytes, and no crash, loop or
-- acceptance on hostile input.
require("fake_host").install()
local images = require "images"
local img = require "image_fixtures"

local pack = string.pack

local function accepted(data, mime, w, h, variant)
  local info, kind, message = images.sniff(data)
  assert.is_table(info, tostring(kind) .. ": " .. tostring(message))
  assert.are.same({ mime_type = mime, width = w, height = h, jpeg_variant = variant }, info)
end

local function refused(data, expected_kind)
  local ok, info, kind, message = pcall(images.sniff, data)
  assert.is_true(ok, "raised: " .. tostring(info))
  assert.is_nil(info)
  assert.are.equal(expected_kind, kind, message)
  assert.is_string(message)
  return message
end

local VALID = {
  jpeg = img.jpeg(64, 48),
  progressive = img.jpeg(64, 48, { sof = 0xC2 }),
  png = img.png(4, 3),
  gif = img.gif(2, 2),
  vp8 = img.webp_vp8(64, 48),
  vp8l = img.webp_vp8l(64, 48),
  vp8x = img.webp_vp8x(64, 48),
}

describe("images.sniff", function()
  describe("accepts", function()
    it("baseline and progressive JPEG, and every other frame type", function()
      accepted(img.jpeg(640, 480), "image/jpeg", 640, 480)
      accepted(img.jpeg(33, 7, { sof = 0xC2 }), "image/jpeg", 33, 7)
      for _, sof in ipairs { 0xC1, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF } do
        accepted(img.jpeg(10, 20, { sof = sof }), "image/jpeg", 10, 20)
      end
    end)

    it("JPEG with large APPn segments, fill bytes and restart markers before the frame", function()
      local exif = img.jpeg_segment(0xE1, "Exif\0\0" .. string.rep("\255", 60000))
      accepted(img.jpeg(1080, 1350, { app = exif .. "\255\255\255" .. img.jpeg_segment(0xFE, "comment") }),
        "image/jpeg", 1080, 1350)
      accepted(img.jpeg(5, 5, { app = "\255\208" }), "image/jpeg", 5, 5)
    end)

    it("multi-picture (MPO) and stereo (JPS) JPEGs as JPEG, saying which", function()
      local exif = img.jpeg_segment(0xE1, "Exif\0\0")
      for _, order in ipairs { "MM", "II" } do
        for _, types in ipairs { { 0x030000, 0x020002 }, { 0x030000, 0x020003 }, { 0x020001, 0x020001 } } do
          accepted(img.jpeg(640, 480, { app = exif .. img.mpf_segment(types, order) }) .. "more pictures",
            "image/jpeg", 640, 480, "mpo")
        end
      end
      accepted(img.jpeg(1280, 480, { app = img.jpeg_segment(0xE3, "_JPSJPS_\0\14") }), "image/jpeg", 1280, 480, "jps")
    end)

    it("as plain JPEG one whose MPF lists no second view: an Ultra HDR gain map, a large thumbnail", function()
      accepted(img.jpeg(64, 48, { app = img.mpf_segment({ 0x030000, 0x000000 }) }) .. "gain map", "image/jpeg", 64, 48)
      accepted(img.jpeg(64, 48, { app = img.mpf_segment({ 0x030000, 0x010001 }, "II") }), "image/jpeg", 64, 48)
      -- An ICC profile is APP2 too; an MPF that cannot be read says nothing.
      accepted(img.jpeg(64, 48, { app = img.jpeg_segment(0xE2, "ICC_PROFILE\0\1\1") }), "image/jpeg", 64, 48)
      for _, payload in ipairs { "MPF", "MPF\0", "MPF\0MM\0\42\0\0\0\8", "MPF\0MM\0\42\255\255\255\255",
          "MPF\0XX\0\42\0\0\0\8" } do
        accepted(img.jpeg(64, 48, { app = img.jpeg_segment(0xE2, payload) }), "image/jpeg", 64, 48)
      end
      local cut = img.mpf_segment({ 0x030000, 0x020002 })
      accepted(img.jpeg(64, 48, { app = img.jpeg_segment(0xE2, cut:sub(5, -18)) }), "image/jpeg", 64, 48)
    end)

    it("JPEG with bytes after the end-of-image marker (camera trailers)", function()
      accepted(img.jpeg(100, 50) .. "trailer data", "image/jpeg", 100, 50)
    end)

    it("PNG (any valid colour type) and GIF87a and GIF89a", function()
      accepted(img.png(3, 2), "image/png", 3, 2)
      accepted(img.png(1, 1, { ihdr = pack(">I4I4BBBBB", 1, 1, 8, 6, 0, 0, 1) }), "image/png", 1, 1)
      accepted(img.gif(1, 1), "image/gif", 1, 1)
      accepted(img.gif(320, 200, { version = "GIF87a" }), "image/gif", 320, 200)
    end)

    it("WebP lossy, lossless and extended", function()
      accepted(img.webp_vp8(800, 600), "image/webp", 800, 600)
      accepted(img.webp_vp8l(1, 8192), "image/webp", 1, 8192)
      accepted(img.webp_vp8x(4000, 3000), "image/webp", 4000, 3000)
    end)

    it("sides up to uploads.max_dimension, or the limit it is given", function()
      accepted(img.jpeg(8192, 8192), "image/jpeg", 8192, 8192)
      accepted(img.png(1, 8192), "image/png", 1, 8192)
      assert.is_nil((images.sniff(img.png(101, 1), 100)))
      assert.is_table(images.sniff(img.png(100, 1), 100))
    end)
  end)

  describe("refuses as unsupported (not one of the four)", function()
    it("other formats and anything else", function()
      local others = {
        "",
        "hello, world\n",
        '<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>',
        "<svg width='10' height='10'></svg>",
        "BM" .. pack("<I4I4I4I4i4i4", 70, 0, 54, 40, 1, 1) .. string.rep("\0", 40),
        "%PDF-1.7\n%\226\227\207\211\n1 0 obj\n",
        "II*\0\8\0\0\0",                                        -- TIFF
        "\0\0\0\24ftypheic\0\0\0\0",                            -- HEIC
        "\0\0\0\28ftypavif\0\0\0\0",                            -- AVIF
        "RIFF" .. pack("<I4", 36) .. "WAVEfmt ",                -- a RIFF that is not WebP
        "\255\216",                                             -- too short to be a JPEG
        "\137PNG\r\n",                                          -- a PNG signature cut short
        "GIF88a" .. string.rep("\0", 20),
        string.rep("\0", 1000),
      }
      for _, data in ipairs(others) do refused(data, "unsupported") end
    end)
  end)

  describe("refuses as invalid_image", function()
    it("every truncation of every valid image", function()
      for name, data in pairs(VALID) do
        assert.is_table(images.sniff(data), name)
        local magic = (name == "jpeg" or name == "progressive") and 3 or name == "png" and 8 or 12
        for n = magic, #data - 1 do
          refused(data:sub(1, n), "invalid_image")
        end
      end
    end)

    it("a side of 0 px, in every format that can say so", function()
      refused(img.jpeg(0, 10), "invalid_image")
      refused(img.jpeg(10, 0), "invalid_image")            -- height 0: "defined later by DNL"
      refused(img.png(0, 1), "invalid_image")
      refused(img.png(1, 0), "invalid_image")
      refused(img.gif(0, 5), "invalid_image")
      refused(img.webp_vp8(0, 5), "invalid_image")
    end)

    it("huge declared dimensions", function()
      local m = refused(img.jpeg(65535, 65535), "invalid_image")
      assert.matches("65535 x 65535", m, 1, true)
      refused(img.jpeg(20000, 20000), "invalid_image")
      refused(img.jpeg(8193, 1), "invalid_image")
      refused(img.png(0x7FFFFFFF, 0xFFFFFFFF), "invalid_image")
      refused(img.gif(65535, 1), "invalid_image")
      refused(img.webp_vp8(16383, 16383), "invalid_image")
      refused(img.webp_vp8l(16384, 16384), "invalid_image")
      refused(img.webp_vp8x(16777216, 16777216), "invalid_image")
    end)

    it("JPEG segment lengths past the end, too small to move on, or in a loop of markers", function()
      refused("\255\216\255\225\255\255Exif" .. string.rep("x", 100), "invalid_image")       -- APP1 of 65535 bytes
      refused("\255\216\255\225\0\0" .. string.rep("\255\225\0\0", 1000), "invalid_image")  -- length 0: no progress
      refused("\255\216\255\225\0\1" .. string.rep("x", 100), "invalid_image")              -- length 1
      refused("\255\216" .. string.rep("\255\208", 200000) .. img.jpeg(5, 5):sub(3), "invalid_image") -- RSTn only
      refused("\255\216" .. string.rep("\255", 100000), "invalid_image")                    -- fill bytes to the end
      refused("\255\216\255\192\0\5\8\0\1", "invalid_image")                               -- SOF shorter than its fields
      refused("\255\216\255\192\0\11\8\0\1\0\1\3\1\17\0", "invalid_image")                  -- 3 components in 9 bytes
      refused("\255\216\255\192\0\8\8\0\1\0\1\0" .. "\255\218\0\8\0\0\0\0\0\0\255\217", "invalid_image") -- 0 components
    end)

    it("JPEG with a scan before the frame, two frames, a second SOI, or an EOI before the scan", function()
      local frame = img.jpeg_segment(0xC0, pack(">BI2I2B", 8, 1, 1, 1) .. "\1\17\0")
      local scan = img.jpeg_segment(0xDA, "\1\1\0\0\63\0") .. "\1\2\255\217"
      assert.is_table(images.sniff("\255\216" .. frame .. scan))
      refused("\255\216" .. scan .. frame, "invalid_image")
      refused("\255\216" .. frame .. frame .. scan, "invalid_image")
      refused("\255\216\255\216" .. frame .. scan, "invalid_image")
      refused("\255\216" .. frame .. "\255\217" .. scan, "invalid_image")
      refused("\255\216" .. frame .. "garbage" .. scan, "invalid_image")
    end)

    it("PNG with a wrong IHDR length, another first chunk, a bad CRC or impossible fields", function()
      local good = img.png(2, 2)
      local ihdr = pack(">I4I4BBBBB", 2, 2, 8, 0, 0, 0, 0)
      local function with_chunk(kind, data) return "\137PNG\r\n\26\n" .. img.png_chunk(kind, data) .. good:sub(34) end
      refused(with_chunk("IHDR", ihdr .. "\0"), "invalid_image")          -- 14 bytes
      refused(with_chunk("IHDR", ihdr:sub(1, 12)) .. "\0", "invalid_image") -- 12 bytes
      refused(with_chunk("tEXt", "Comment\0hi\0\0\0"), "invalid_image")
      refused(good:sub(1, 29) .. "\0\0\0\0" .. good:sub(34), "invalid_image") -- CRC
      refused(img.png(2, 2, { ihdr = pack(">I4I4BBBBB", 2, 2, 3, 0, 0, 0, 0) }), "invalid_image") -- depth 3
      refused(img.png(2, 2, { ihdr = pack(">I4I4BBBBB", 2, 2, 8, 5, 0, 0, 0) }), "invalid_image") -- colour 5
      refused(img.png(2, 2, { ihdr = pack(">I4I4BBBBB", 2, 2, 8, 0, 1, 0, 0) }), "invalid_image") -- compression
      refused(img.png(2, 2, { ihdr = pack(">I4I4BBBBB", 2, 2, 8, 0, 0, 0, 2) }), "invalid_image") -- interlace
      refused(img.png(2, 2, { iend = false }), "invalid_image")
    end)

    it("GIF with an unknown block, no trailer, or sub-blocks past the end", function()
      local g = img.gif(2, 2)
      refused(g:sub(1, 19) .. "\7" .. g:sub(21), "invalid_image")
      refused(img.gif(2, 2, { trailer = false }), "invalid_image")
      refused(g:sub(1, -3) .. "\200;", "invalid_image")
      refused(g:sub(1, 19) .. string.rep("\33\1\0", 200000) .. ";", "invalid_image") -- too many blocks
    end)

    it("WebP with a lying RIFF size, an oversized chunk, a bad VP8/VP8L header or an unknown chunk", function()
      local w = img.webp_vp8(10, 10)
      refused("RIFF" .. pack("<I4", #w) .. w:sub(9), "invalid_image")
      refused(w:sub(1, 16) .. pack("<I4", 1000) .. w:sub(21), "invalid_image")
      refused(img.webp_vp8(10, 10, { key_frame = false }), "invalid_image")
      refused(w:sub(1, 23) .. "\0\0\0" .. w:sub(27), "invalid_image")                  -- start code
      local l = img.webp_vp8l(10, 10)
      refused(l:sub(1, 20) .. "\48" .. l:sub(22), "invalid_image")                     -- signature
      refused(l:sub(1, 21) .. pack("<I4", 0xE0000000) .. l:sub(26), "invalid_image")  -- version
      refused(img.riff_webp { { "ALPH", "\0\0\0\0" } }, "invalid_image")
      refused(img.riff_webp { { "VP8 ", "\0\0" } }, "invalid_image")
      refused(img.riff_webp { { "VP8L", "\47" } }, "invalid_image")
      refused(img.riff_webp { { "VP8X", "\0\0\0\0\0" } }, "invalid_image")
    end)
  end)

  it("never raises on random corruption of valid images, and answers fast", function()
    math.randomseed(7)
    for _, data in pairs(VALID) do
      for _ = 1, 400 do
        local bytes = { data:byte(1, -1) }
        for _ = 1, math.random(1, 4) do bytes[math.random(1, #bytes)] = math.random(0, 255) end
        local mutated = string.char(table.unpack(bytes))
        local ok, info, kind = pcall(images.sniff, mutated)
        assert.is_true(ok, tostring(info))
        assert.is_true(info ~= nil or kind == "invalid_image" or kind == "unsupported")
      end
    end
  end)

  it("reads an 8 MiB image", function()
    local big = img.jpeg(4000, 3000, { app = string.rep(img.jpeg_segment(0xE2, string.rep("\255", 65000)), 128) })
    assert.is_true(#big > 8e6)
    accepted(big, "image/jpeg", 4000, 3000)
    refused(big:sub(1, -3), "invalid_image")
  end)
end)

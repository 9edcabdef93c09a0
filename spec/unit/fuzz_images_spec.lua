-- Fuzz: lib/images.lua's sniff over mutated JPEG, PNG, GIF and WebP files.
-- Each gives the type and a size within bounds, or a kind and a message,
-- never an error.
require("fake_host").install()
local fuzz = require "fuzz"
local images = require "images"
local img = require "image_fixtures"

local CORPUS = {
  img.jpeg(64, 48),
  img.jpeg(64, 48, { sof = 0xC2, app = img.jpeg_segment(0xE1, "Exif\0\0abc") .. "\255\208" }),
  img.png(4, 3),
  img.gif(2, 2),
  img.webp_vp8(64, 48),
  img.webp_vp8l(64, 48),
  img.webp_vp8x(64, 48),
}

local function check(data)
  local info, kind, message = images.sniff(data, 8192)
  if info == nil then
    assert(type(kind) == "string" and type(message) == "string", "a refusal has a kind and a message")
  else
    assert(math.type(info.width) == "integer" and info.width >= 1 and info.width <= 8192)
    assert(math.type(info.height) == "integer" and info.height >= 1 and info.height <= 8192)
    assert(type(info.mime_type) == "string")
  end
end

describe("fuzz: images.sniff", function()
  it("gives a sized image or a refusal for mutated files", function()
    fuzz.run(CORPUS, check)
  end)
end)

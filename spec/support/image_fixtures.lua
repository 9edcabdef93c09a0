-- Small images built byte by byte for the upload specs: structurally real
-- JPEG (baseline and progressive), PNG, GIF and WebP (lossy, lossless,
-- extended) files of any declared size. Small PNGs and GIFs decode; the
-- others carry placeholder pixel data, which is all a header sniffer needs.
local M = {}

local pack = string.pack

-- ------------------------------------------------------------------ JPEG

-- A marker segment: FF, marker, 2-byte length (itself included), payload.
function M.jpeg_segment(marker, payload)
  return pack(">BBI2", 0xFF, marker, #payload + 2) .. payload
end
local seg = M.jpeg_segment

-- An APP2 "MPF" segment (CIPA DC-007) whose MP Entry lists one image of each
-- MP type code in `types` (0x030000 the primary image, 0x020002 a disparity
-- view, 0x000000 an Ultra HDR gain map, 0x010001 a large thumbnail, ...);
-- order "MM" (default, big-endian) or "II".
function M.mpf_segment(types, order)
  local e = (order or "MM") == "II" and "<" or ">"
  local n = #types
  local entries_at = 8 + 2 + 12 * 3 + 4
  local ifd = pack(e .. "I2", 3)
    .. pack(e .. "I2I2I4c4", 0xB000, 7, 4, "0100")
    .. pack(e .. "I2I2I4I4", 0xB001, 4, 1, n)
    .. pack(e .. "I2I2I4I4", 0xB002, 7, 16 * n, entries_at)
    .. pack(e .. "I4", 0)
  local list = {}
  for i, t in ipairs(types) do list[i] = pack(e .. "I4I4I4I2I2", t, 1000, i == 1 and 0 or 2000, 0, 0) end
  return seg(0xE2, "MPF\0" .. (order or "MM") .. pack(e .. "I2I4", 42, 8) .. ifd .. table.concat(list))
end

local DQT = seg(0xDB, "\0" .. string.rep("\1", 64))
local DHT = seg(0xC4, "\0\1" .. string.rep("\0", 15) .. "\0")   -- one 1-bit code
local function sos(ss, se)                                       -- all three components
  return seg(0xDA, "\3\1\0\2\0\3\0" .. pack("BBB", ss, se, 0))
end
-- entropy-coded data: a 0xFF inside it is stuffed as FF 00
local SCAN = "\18\52\255\0\86\120"

-- opts: sof (frame marker, default 0xC0 baseline; 0xC2 progressive),
-- app (extra segments before the frame header), eoi (false: leave it out).
function M.jpeg(width, height, opts)
  opts = opts or {}
  local sof = opts.sof or 0xC0
  local frame = seg(sof, pack(">BI2I2B", 8, height, width, 3) .. "\1\17\0\2\17\0\3\17\0")
  local parts = { "\255\216", seg(0xE0, "JFIF\0\1\1\0\0\1\0\1\0\0"), opts.app or "", DQT, frame, DHT }
  if sof == 0xC2 then
    -- progressive: a DC scan, more tables, then AC scans
    parts[#parts + 1] = sos(0, 0) .. SCAN .. DHT .. sos(1, 5) .. SCAN .. sos(6, 63) .. SCAN
  else
    parts[#parts + 1] = sos(0, 63) .. SCAN
  end
  if opts.eoi ~= false then parts[#parts + 1] = "\255\217" end
  return table.concat(parts)
end

-- ------------------------------------------------------------------ PNG

local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1 == 1) and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
  crc_table[i] = c
end
function M.crc32(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do c = crc_table[(c ~ s:byte(i)) & 0xFF] ~ (c >> 8) end
  return c ~ 0xFFFFFFFF
end

function M.png_chunk(kind, data)
  return pack(">I4", #data) .. kind .. data .. pack(">I4", M.crc32(kind .. data))
end

-- zlib with one stored (uncompressed) block
local function zlib_stored(raw)
  local a, b = 1, 0
  for i = 1, #raw do a = (a + raw:byte(i)) % 65521; b = (b + a) % 65521 end
  return "\120\1\1" .. pack("<I2I2", #raw, (~#raw) & 0xFFFF) .. raw .. pack(">I4", (b << 16) | a)
end

-- An 8-bit greyscale PNG; it decodes when (width + 1) * height < 64 KiB.
-- opts.ihdr replaces the IHDR payload; opts.iend = false leaves IEND out.
function M.png(width, height, opts)
  opts = opts or {}
  local ihdr = opts.ihdr or pack(">I4I4BBBBB", width, height, 8, 0, 0, 0, 0)
  local small = width < 65535 and height < 65535 and (width + 1) * height < 65535
  local raw = small and string.rep("\0" .. string.rep("\128", width), height) or "\0"
  local out = "\137PNG\r\n\26\n" .. M.png_chunk("IHDR", ihdr) .. M.png_chunk("IDAT", zlib_stored(raw))
  if opts.iend ~= false then out = out .. M.png_chunk("IEND", "") end
  return out
end

-- ------------------------------------------------------------------ GIF

-- A GIF89a with a 2-colour table and one frame of colour 0 (decodes at 1x1).
function M.gif(width, height, opts)
  opts = opts or {}
  return (opts.version or "GIF89a") .. pack("<I2I2BBB", width, height, 0x80, 0, 0) .. "\0\0\0\255\255\255"
    .. "\33\249\4\0\0\0\0\0"                                -- graphic control extension
    .. "," .. pack("<I2I2I2I2B", 0, 0, width, height, 0)    -- image descriptor
    .. "\2\2\68\1\0"                                        -- LZW data
    .. (opts.trailer == false and "" or ";")
end

-- ------------------------------------------------------------------ WebP

function M.riff_webp(chunks)
  local body = "WEBP"
  for _, c in ipairs(chunks) do
    body = body .. c[1] .. pack("<I4", #c[2]) .. c[2] .. (#c[2] % 2 == 1 and "\0" or "")
  end
  return "RIFF" .. pack("<I4", #body) .. body
end

-- Lossy: key-frame tag, start code, 14-bit sizes, then placeholder data.
function M.webp_vp8(width, height, opts)
  opts = opts or {}
  local tag = (opts.key_frame == false and 1 or 0) | (1 << 4) | (10 << 5)
  return M.riff_webp { { "VP8 ", pack("<I3", tag) .. "\157\1\42" .. pack("<I2I2", width, height) .. string.rep("\0", 10) } }
end

-- Lossless: signature 0x2F, then width - 1 and height - 1 in 14 bits each.
function M.webp_vp8l(width, height)
  local bits = ((width - 1) & 0x3FFF) | (((height - 1) & 0x3FFF) << 14)
  return M.riff_webp { { "VP8L", "\47" .. pack("<I4", bits) .. string.rep("\0", 6) } }
end

-- Extended: flags, reserved, canvas width - 1 and height - 1 in 24 bits,
-- followed by the image itself.
function M.webp_vp8x(width, height)
  local vp8x = "\16\0\0\0" .. pack("<I3I3", width - 1, height - 1)
  local bits = ((width - 1) & 0x3FFF) | (((height - 1) & 0x3FFF) << 14)
  return M.riff_webp { { "VP8X", vp8x }, { "VP8L", "\47" .. pack("<I4", bits) .. "\0" } }
end

return M

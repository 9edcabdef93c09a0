-- What an uploaded image is, and how large, from its bytes alone (CONTRACT 6
-- "Upload"): a declared Content-Type, file name or extension is never trusted.
--
--   images.sniff(bytes[, max_dimension]) -> { mime_type, width, height, jpeg_variant }
--                                         | nil, "unsupported" | "invalid_image", message
--
-- jpeg_variant: "mpo" for a multi-picture JPEG (an APP2 "MPF" segment that
-- lists multi-frame images, as 3D and panorama cameras write), "jps" for a
-- stereo JPEG (APP3 "_JPSJPS_"), nil for a plain JPEG or another type. Both
-- are JPEG to a browser, but not to Instagram, which takes only plain JPEG.
--
-- "unsupported" (415): not JPEG, PNG, GIF or WebP. "invalid_image" (422): one
-- of them, but with a corrupt or truncated structure, or a side of 0 px or
-- more than max_dimension (default uploads.max_dimension).
--
-- Input is hostile: every length field is checked against the end of the
-- data before it is followed, every walk moves forward and has a step limit,
-- and long runs are searched with string.find (C speed), so no input can
-- raise, loop, or cost more than a few milliseconds per MiB.
local M = {}

local sub, byte, unpack, find = string.sub, string.byte, string.unpack, string.find

-- Upper bound on the segments or blocks a walk visits. Real JPEGs have tens;
-- an 8 MiB GIF has about 33,000 data sub-blocks of 255 bytes.
M.MAX_STEPS = 100000

local function invalid(message) return nil, "invalid_image", message end

-- string.unpack that answers nil instead of raising when fewer than `size`
-- bytes are left at pos.
local function read(data, fmt, pos, size)
  if pos + size - 1 > #data then return nil end
  return (unpack(fmt, data, pos))
end

-- ------------------------------------------------------------------ JPEG

-- Start-of-frame markers: baseline, extended, progressive and lossless, with
-- Huffman or arithmetic coding. Not C4 (DHT), C8 (reserved) or CC (DAC).
local SOF = {}
for _, m in ipairs { 0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF } do
  SOF[m] = true
end

-- Whether an APP2 "MPF" segment's payload (after "MPF\0") lists a
-- multi-frame image (CIPA DC-007 MP type 0x02xxxx: panorama, disparity,
-- multi-angle), which is what makes an MPO. Phones' Ultra HDR gain maps and
-- cameras' large preview images are MPF entries too, of other types: such a
-- JPEG shows as one picture, and is not refused. A payload that cannot be
-- read says nothing.
local function mpf_multi_frame(p)
  local order = ({ II = "<", MM = ">" })[sub(p, 1, 2)]
  if not order or read(p, order .. "I2", 3, 2) ~= 42 then return false end
  local ifd = read(p, order .. "I4", 5, 4)
  local count = ifd and read(p, order .. "I2", ifd + 1, 2)
  for i = 0, math.min(count or 0, 64) - 1 do
    local at = ifd + 3 + 12 * i
    if read(p, order .. "I2", at, 2) == 0xB002 then -- MP Entry: 16 bytes an image
      local size, offset = read(p, order .. "I4", at + 4, 4), read(p, order .. "I4", at + 8, 4)
      for j = 0, math.min((size or 0) // 16, 64) - 1 do
        local attribute = read(p, order .. "I4", offset + 1 + 16 * j, 4)
        if attribute and (attribute & 0xFF0000) == 0x020000 then return true end
      end
    end
  end
  return false
end

-- Segments that make a JPEG one Instagram refuses: prefix, variant, and a
-- test of the payload after the prefix (none: the prefix says it all).
local VARIANT_SEGMENTS = {
  [0xE2] = { "MPF\0", "mpo", mpf_multi_frame },
  [0xE3] = { "_JPSJPS_", "jps" },
}

-- Walks the marker segments by their lengths to the frame header (SOF) and on
-- to the first scan (SOS); the entropy-coded data after it must end with an
-- end-of-image marker (inside it 0xFF is always followed by 0x00 or a
-- restart marker, so the first FF D9 is the real one), which is what tells a
-- truncated file.
local function jpeg(data)
  local pos, width, height, variant = 3, nil, nil, nil
  for _ = 1, M.MAX_STEPS do
    if byte(data, pos) ~= 0xFF then
      if pos > #data then return invalid("The JPEG ends before its first scan (truncated).") end
      return invalid("The JPEG has no marker where one must be (byte " .. (pos - 1) .. ").")
    end
    pos = find(data, "[^\255]", pos) -- 0xFF fill bytes may precede a marker
    if not pos then return invalid("The JPEG ends before its first scan (truncated).") end
    local marker = byte(data, pos)
    pos = pos + 1
    if marker == 0x01 or (marker >= 0xD0 and marker <= 0xD7) then
      -- TEM and RSTn stand alone: no length follows
    elseif marker == 0x00 or marker == 0xD8 or marker == 0xD9 then
      return invalid("The JPEG has a misplaced marker before its first scan.")
    else
      local length = read(data, ">I2", pos, 2)
      if not length then return invalid("The JPEG ends inside a segment header (truncated).") end
      if length < 2 then return invalid("The JPEG has a segment of impossible length " .. length .. ".") end
      local body, after = pos + 2, pos + length
      if after - 1 > #data then return invalid("A JPEG segment runs past the end of the data (truncated).") end
      local tag = VARIANT_SEGMENTS[marker]
      if tag and not variant and after - body >= #tag[1] and sub(data, body, body + #tag[1] - 1) == tag[1]
          and (not tag[3] or tag[3](sub(data, body + #tag[1], after - 1))) then
        variant = tag[2]
      end
      if SOF[marker] then
        if width then return invalid("The JPEG has more than one frame header.") end
        if length < 8 then return invalid("The JPEG frame header is too short.") end
        local h, w, components = unpack(">I2I2B", data, body + 1)
        if components == 0 or length < 8 + 3 * components then
          return invalid("The JPEG frame header is malformed.")
        end
        width, height = w, h
      elseif marker == 0xDA then
        if not width then return invalid("The JPEG has a scan before its frame header.") end
        if not find(data, "\255\217", after, true) then
          return invalid("The JPEG has no end-of-image marker (truncated).")
        end
        return { mime_type = "image/jpeg", width = width, height = height, jpeg_variant = variant }
      end
      pos = after
    end
  end
  return invalid("The JPEG has too many segments.")
end

-- ------------------------------------------------------------------ PNG

local crc_table
local function crc32(s)
  if not crc_table then
    crc_table = {}
    for i = 0, 255 do
      local c = i
      for _ = 1, 8 do c = (c & 1 == 1) and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
      crc_table[i] = c
    end
  end
  local c = 0xFFFFFFFF
  for i = 1, #s do c = crc_table[(c ~ byte(s, i)) & 0xFF] ~ (c >> 8) end
  return c ~ 0xFFFFFFFF
end

-- Bit depths allowed for each colour type (PNG 11.2.2).
local PNG_DEPTHS = {
  [0] = { [1] = true, [2] = true, [4] = true, [8] = true, [16] = true },
  [2] = { [8] = true, [16] = true },
  [3] = { [1] = true, [2] = true, [4] = true, [8] = true },
  [4] = { [8] = true, [16] = true },
  [6] = { [8] = true, [16] = true },
}
-- The whole IEND chunk: length 0, type, CRC.
local IEND = "\0\0\0\0IEND\174\66\96\130"

-- The first chunk must be a 13-byte IHDR with a correct CRC; an IEND chunk
-- must follow somewhere (else the file was cut short).
local function png(data)
  if #data < 33 then return invalid("The PNG ends inside its header (truncated).") end
  local length, kind, w, h, depth, color, compression, filter, interlace = unpack(">I4c4I4I4BBBBB", data, 9)
  if length ~= 13 or kind ~= "IHDR" then
    return invalid("The PNG does not start with a 13-byte IHDR chunk.")
  end
  if crc32(sub(data, 13, 29)) ~= unpack(">I4", data, 30) then
    return invalid("The PNG header checksum does not match (corrupt).")
  end
  if not (PNG_DEPTHS[color] and PNG_DEPTHS[color][depth]) or compression ~= 0 or filter ~= 0 or interlace > 1 then
    return invalid("The PNG header has an invalid colour type, bit depth or method.")
  end
  if not find(data, IEND, 34, true) then return invalid("The PNG has no IEND chunk (truncated).") end
  return { mime_type = "image/png", width = w, height = h }
end

-- ------------------------------------------------------------------ GIF

-- The logical screen gives the size; the blocks after it are walked to the
-- trailer (0x3B) so that a file cut short is refused.
local function gif(data)
  if #data < 13 then return invalid("The GIF ends inside its header (truncated).") end
  local w, h, flags = unpack("<I2I2B", data, 7)
  local pos, steps = 14, 0
  local function colour_table(f) -- present when bit 7 is set: 3 * 2^(n+1) bytes
    if f & 0x80 ~= 0 then pos = pos + 3 * (2 << (f & 7)) end
  end
  local function sub_blocks() -- length byte, that many bytes, ..., a zero length
    repeat
      local n = byte(data, pos)
      if not n then return end
      pos, steps = pos + 1 + n, steps + 1
    until n == 0 or steps > M.MAX_STEPS
  end
  colour_table(flags)
  while steps <= M.MAX_STEPS do
    steps = steps + 1
    local block = byte(data, pos)
    if block == 0x3B then
      return { mime_type = "image/gif", width = w, height = h }
    elseif block == 0x2C then -- image descriptor (10 bytes), colour table, LZW code size, data
      local f = byte(data, pos + 9)
      if not f then break end
      pos = pos + 10
      colour_table(f)
      pos = pos + 1
      sub_blocks()
    elseif block == 0x21 then -- extension: introducer, label, data
      pos = pos + 2
      sub_blocks()
    elseif block == nil then
      break
    else
      return invalid("The GIF has an unknown block (corrupt).")
    end
  end
  if steps > M.MAX_STEPS then return invalid("The GIF has too many blocks.") end
  return invalid("The GIF ends before its trailer (truncated).")
end

-- ------------------------------------------------------------------ WebP

-- RIFF container, then the first chunk decides: VP8 (lossy), VP8L
-- (lossless) or VP8X (extended, with the canvas size).
local function webp(data)
  if #data < 20 then return invalid("The WebP ends inside its header (truncated).") end
  local riff_size = unpack("<I4", data, 5)
  if riff_size + 8 > #data then return invalid("The WebP is shorter than its RIFF header says (truncated).") end
  local chunk, size = unpack("<c4I4", data, 13)
  if 20 + size > #data or 12 + size > riff_size then
    return invalid("A WebP chunk runs past the end of the data (truncated).")
  end
  local w, h
  if chunk == "VP8 " then
    -- frame tag (3 bytes; bit 0 clear on a key frame), start code, then
    -- 14-bit width and height (the top 2 bits are a scaling hint)
    if size < 10 then return invalid("The WebP VP8 header is too short.") end
    local tag, start, sw, sh = unpack("<I3c3I2I2", data, 21)
    if tag & 1 ~= 0 or start ~= "\157\1\42" then return invalid("The WebP VP8 frame header is malformed.") end
    w, h = sw & 0x3FFF, sh & 0x3FFF
  elseif chunk == "VP8L" then
    -- signature 0x2F, then 14 bits width - 1, 14 bits height - 1, alpha, 3-bit version 0
    if size < 5 then return invalid("The WebP VP8L header is too short.") end
    local signature, bits = unpack("<BI4", data, 21)
    if signature ~= 0x2F or bits >> 29 ~= 0 then return invalid("The WebP VP8L header is malformed.") end
    w, h = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
  elseif chunk == "VP8X" then
    -- flags, 3 reserved bytes, 24-bit canvas width - 1 and height - 1
    if size < 10 then return invalid("The WebP VP8X header is too short.") end
    local cw, ch = unpack("<I3I3", data, 25)
    w, h = cw + 1, ch + 1
  else
    return invalid("The WebP starts with an unknown chunk (corrupt).")
  end
  return { mime_type = "image/webp", width = w, height = h }
end

-- ------------------------------------------------------------------ sniff

local function kind_of(data)
  if sub(data, 1, 3) == "\255\216\255" then return jpeg end
  if sub(data, 1, 8) == "\137PNG\r\n\26\n" then return png end
  local head = sub(data, 1, 6)
  if head == "GIF87a" or head == "GIF89a" then return gif end
  if sub(data, 1, 4) == "RIFF" and sub(data, 9, 12) == "WEBP" then return webp end
  return nil
end

function M.sniff(data, max_dimension)
  if type(data) ~= "string" then error("images.sniff: bytes must be a string", 2) end
  max_dimension = max_dimension or config.get("uploads.max_dimension") or 8192
  local parse = kind_of(data)
  if not parse then
    return nil, "unsupported", "The bytes are not a JPEG, PNG, GIF or WebP image."
  end
  local info, kind, message = parse(data)
  if not info then return nil, kind, message end
  local w, h = info.width, info.height
  if w < 1 or h < 1 then
    return invalid(("The image declares %d x %d px; a side of 0 px is not an image."):format(w, h))
  end
  if w > max_dimension or h > max_dimension then
    return invalid(("The image is %d x %d px; each side may be at most %d px."):format(w, h, max_dimension))
  end
  return info
end

return M

-- What a POST /api/v1/posts body must say, as one pure function:
--
--   post_rules.validate(body, env) -> normalized, {}   or   nil, errors
--
-- `errors` lists every problem at once as {field = JSON Pointer, code, message}, so a
-- client fixes its request in one round. `env` brings the world in, which keeps this
-- file free of I/O and easy to test:
--   env.now                unix seconds (float)
--   env.find_account(id)   {id, platform, status} or nil, already limited to the
--                          caller's company and environment
--   env.find_upload(id)    {id, mime_type, jpeg_variant, size_bytes, width, height} or nil, likewise
--   env.max_schedule_days  publishing.max_schedule_days
--   env.fetch_image(url)   {mime_type, jpeg_variant, size_bytes, width, height} or nil, code, message
--                          (lib/image_url.lua); called at most once, for an https
--                          imageUrl of a post with Instagram targets
--
-- Platform rules (what Instagram accepts) live here too: refusing at creation gives the
-- client a 422 with every problem, instead of a target that fails minutes later.
local fields = require "fields"

local M = {}

local LIMITS = {
  targets = 20,
  message_chars = 63206,     -- Facebook's limit for a post message
  url_chars = 2048,
  external_reference_chars = 255,
  media_items = 1,
  instagram = { caption_chars = 2200, hashtags = 30, mentions = 20,
    -- Meta's image specification: JPEG, at most 8 MiB, width/height from 4:5 to
    -- 1.91:1 (as integer ratios, so that exactly 4:5 passes), at least 320 px wide.
    image_bytes = 8 * 1024 * 1024, aspect_min = { 4, 5 }, aspect_max = { 191, 100 }, min_width = 320 },
}
M.LIMITS = LIMITS

local ALLOWED = {
  body = { targets = true, content = true, publishing = true, media = true, externalReference = true },
  target = { socialAccountId = true, platform = true },
  content = { type = true, message = true, link = true, imageUrl = true },
  media = { source = true, uploadId = true },
  publishing = { mode = true, scheduledAt = true },
}

local PLATFORMS = { facebook = true, instagram = true }
local MODES = { immediate = true, scheduled = true }

-- The content fields each type uses. A field of another type is refused rather than
-- dropped: the client meant something by it.
local USES = {
  text = { message = true },
  link = { message = true, link = true },
  image = { message = true, imageUrl = true },
}

---------------------------------------------------------------------------
-- JSON values as decoded by cjson

-- JSON null decodes to a light userdata, the only userdata a body can hold. A null
-- field means the same as an absent one.
local function is_null(v) return v == nil or type(v) == "userdata" end

-- cjson decodes [] and {} alike to an empty table, so an empty table passes for both.
local function json_type(v)
  if is_null(v) then return "null" end
  local t = type(v)
  if t ~= "table" then return t end
  if next(v) == nil then return "empty" end
  local n = #v
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return "object" end
  end
  return "array"
end

local NAMES = { string = "a string", number = "a number", boolean = "true or false",
  null = "null", array = "an array", object = "an object", empty = "an empty array or object" }

local function has_type(v, want)
  local t = json_type(v)
  return t == want or (t == "empty" and (want == "array" or want == "object"))
end

local function pointer(base, key)
  key = tostring(key):gsub("~", "~0"):gsub("/", "~1")
  return base .. "/" .. key
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  return keys
end

-- Length in characters, as people and the platforms count; nil for text that is not UTF-8.
local function chars(s) return utf8.len(s) end

---------------------------------------------------------------------------
-- Reporting

-- ctx.add(field, code, message) records one problem; the helpers below all take ctx.
local function new_ctx(env)
  local errors = {}
  return {
    env = env,
    errors = errors,
    platforms = {},   -- every platform the request targets
    add = function(field, code, message)
      errors[#errors + 1] = { field = field, code = code, message = message }
    end,
  }
end

-- obj[key] when it has JSON type `want`. Otherwise nil, after reporting a wrong type, or
-- a missing value when `required` (a sentence saying what to send) is given. An empty
-- string counts as missing for required strings.
local function take(ctx, obj, at, key, want, required)
  local v, field = obj[key], pointer(at, key)
  if is_null(v) or (v == "" and required) then
    if required then ctx.add(field, "required", required) end
    return nil
  end
  if not has_type(v, want) then
    ctx.add(field, "invalid_value", ("%s must be %s, not %s."):format(key, NAMES[want], NAMES[json_type(v)]))
    return nil
  end
  return v
end

-- Refuses fields the object does not know; companyId is reported by fields.company_fields.
local function unknown_fields(ctx, obj, at, allowed)
  for _, k in ipairs(sorted_keys(obj)) do
    if not allowed[k] and k ~= "companyId" then
      ctx.add(pointer(at, k), "unknown_field",
        ("Unknown field %s; remove it. Allowed here: %s."):format(k, table.concat(sorted_keys(allowed), ", ")))
    end
  end
end

-- Reports a string longer than `max` characters (or not UTF-8); returns whether it is fine.
local function check_length(ctx, field, s, max, what)
  local n = chars(s)
  if not n then
    ctx.add(field, "invalid_value", what .. " must be valid UTF-8 text.")
    return false
  elseif n > max then
    ctx.add(field, "too_long", ("%s has %d characters; the most allowed is %d. Shorten it."):format(what, n, max))
    return false
  end
  return true
end

-- The scheme ("http" or "https") of an absolute http(s) URL with a host, else nil. No
-- spaces or control characters: clients must percent-encode them.
local function http_url(s)
  if s:find("[%s%c]") then return nil end
  local scheme, authority = s:match("^(%a[%w+.-]*)://([^/?#]*)")
  scheme = scheme and scheme:lower()
  if scheme ~= "http" and scheme ~= "https" then return nil end
  local hostport = authority:gsub("^.*@", "")
  local host, port = hostport:match("^(%[[%x:.]+%])(.*)$")   -- IPv6 literal
  if not host then host, port = hostport:match("^([%w%-._~%%\128-\255]+)(.*)$") end
  if not host or (port ~= "" and not port:match("^:%d+$")) then return nil end
  return scheme
end

-- Reports a bad URL; returns its scheme when it is fine.
local function check_url(ctx, field, s, what)
  if not check_length(ctx, field, s, LIMITS.url_chars, what) then return nil end
  local scheme = http_url(s)
  if not scheme then
    ctx.add(field, "invalid_value", what .. " must be an absolute http:// or https:// URL with a host, "
      .. "such as https://example.com/page, with spaces percent-encoded.")
  end
  return scheme
end

---------------------------------------------------------------------------
-- Times (RFC 3339 in, RFC 3339 UTC with milliseconds out)

-- Days since 1970-01-01 of a proleptic Gregorian date, and back (H. Hinnant's algorithms).
local function days_from_civil(y, m, d)
  y = m <= 2 and y - 1 or y
  local era = y // 400
  local yoe = y - era * 400
  local doy = (153 * ((m + 9) % 12) + 2) // 5 + d - 1
  return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = z // 146097
  local doe = z - era * 146097
  local yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
  local doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
  local mp = (5 * doy + 2) // 153
  local d = doy - (153 * mp + 2) // 5 + 1
  local m = mp < 10 and mp + 3 or mp - 9
  return yoe + era * 400 + (m <= 2 and 1 or 0), m, d
end

local function days_in_month(y, m)
  if m == 2 then return (y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)) and 29 or 28 end
  return (m == 4 or m == 6 or m == 9 or m == 11) and 30 or 31
end

-- Unix seconds of an RFC 3339 date-time ("2026-11-21T11:00:00.5+01:00"), any offset,
-- any number of fraction digits; nil for anything else, impossible dates and leap
-- seconds included.
function M.parse_time(s)
  if type(s) ~= "string" then return nil end
  local y, mo, d, h, mi, sec, rest = s:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)[Tt](%d%d):(%d%d):(%d%d)(.*)$")
  if not y then return nil end
  local frac, zone = rest:match("^%.(%d+)(.*)$")
  zone = zone or rest
  local offset = 0
  if zone ~= "Z" and zone ~= "z" then
    local sign, oh, om = zone:match("^([+-])(%d%d):(%d%d)$")
    if not sign or tonumber(oh) > 23 or tonumber(om) > 59 then return nil end
    offset = (tonumber(oh) * 60 + tonumber(om)) * 60 * (sign == "-" and -1 or 1)
  end
  y, mo, d, h, mi, sec = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi), tonumber(sec)
  if mo < 1 or mo > 12 or d < 1 or d > days_in_month(y, mo) or h > 23 or mi > 59 or sec > 59 then
    return nil
  end
  local t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset
  return frac and t + tonumber("0." .. frac) or t
end

-- "2026-11-21T10:00:00.000Z" for unix seconds, rounded to the millisecond.
function M.format_time(t)
  local ms = math.floor(t * 1000 + 0.5)
  local secs = ms // 1000
  local sod = secs % 86400
  local y, m, d = civil_from_days(secs // 86400)
  return ("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ"):format(y, m, d, sod // 3600, sod % 3600 // 60, sod % 60, ms % 1000)
end

---------------------------------------------------------------------------
-- The parts of a post

local function check_targets(ctx, body)
  local list = take(ctx, body, "", "targets", "array",
    ("Add targets: an array of 1 to %d objects with socialAccountId and platform."):format(LIMITS.targets))
  if not list then return nil end
  if #list < 1 or #list > LIMITS.targets then
    ctx.add("/targets", "invalid_value",
      ("Send between 1 and %d targets; this request has %d."):format(LIMITS.targets, #list))
  end
  local out, seen = {}, {}
  -- Targets past the limit are already refused as a whole; not examining them keeps a
  -- huge body from costing one account lookup per item.
  for i = 1, math.min(#list, LIMITS.targets) do
    local item, at = list[i], "/targets/" .. (i - 1)
    if not has_type(item, "object") then
      ctx.add(at, "invalid_value", "Each target must be an object with socialAccountId and platform.")
    else
      unknown_fields(ctx, item, at, ALLOWED.target)
      local id = take(ctx, item, at, "socialAccountId", "string",
        "Give socialAccountId, the id of a connected account (see GET /api/v1/social-accounts).")
      local platform = take(ctx, item, at, "platform", "string", "Give platform: facebook or instagram.")
      if platform and not PLATFORMS[platform] then
        ctx.add(at .. "/platform", "invalid_value", "platform must be facebook or instagram.")
        platform = nil
      end
      if platform then ctx.platforms[platform] = true end
      if id and seen[id] then
        ctx.add(at .. "/socialAccountId", "duplicate_target",
          ("This account is already target %d; list each account once."):format(seen[id] - 1))
      elseif id then
        seen[id] = i
        local account = ctx.env.find_account(id)
        -- Missing, inactive, or another company's or environment's: one answer, no leak.
        if not account or account.status ~= "active" then
          ctx.add(at .. "/socialAccountId", "unknown_account",
            "No active connected account has this id; use an id from GET /api/v1/social-accounts.")
        else
          -- The account's own platform brings its rules, whatever the target declares.
          ctx.platforms[account.platform] = true
          if platform and account.platform ~= platform then
            ctx.add(at .. "/platform", "platform_mismatch",
              ("This account is on %s; set platform to %s."):format(account.platform, account.platform))
          end
          out[#out + 1] = { account_id = id, platform = account.platform }
        end
      end
    end
  end
  return out
end

-- content -> {type, message, link, image_url, image_url_scheme}; fields that failed are nil.
local function check_content(ctx, body)
  local content = take(ctx, body, "", "content", "object",
    "Add content: an object with type (text, link or image) and its fields.")
  if not content then return nil end
  unknown_fields(ctx, content, "/content", ALLOWED.content)
  local out = {}

  local ctype = take(ctx, content, "/content", "type", "string", "Set content.type to text, link or image.")
  if ctype and not USES[ctype] then
    ctx.add("/content/type", "invalid_value", "content.type must be text, link or image.")
    ctype = nil
  end
  out.type = ctype
  local uses = USES[ctype]
  for _, f in ipairs({ "link", "imageUrl" }) do
    if uses and not uses[f] and not is_null(content[f]) then
      ctx.add("/content/" .. f, "field_not_allowed",
        ("A %s post has no %s; remove it, or change content.type."):format(ctype, f))
    end
  end

  local message = take(ctx, content, "/content", "message", "string",
    ctype == "text" and ("A text post needs a message of 1 to %d characters."):format(LIMITS.message_chars))
  if message and message ~= "" and check_length(ctx, "/content/message", message, LIMITS.message_chars, "message") then
    out.message = message
  end

  if not uses or uses.link then
    local link = take(ctx, content, "/content", "link", "string",
      ctype == "link" and "A link post needs link, an absolute http:// or https:// URL.")
    if link and check_url(ctx, "/content/link", link, "link") then out.link = link end
  end

  -- Whether an image is required is decided with media, in check_image.
  if not uses or uses.imageUrl then
    local url = take(ctx, content, "/content", "imageUrl", "string")
    out.image_url_scheme = url and check_url(ctx, "/content/imageUrl", url, "imageUrl")
    out.image_url = out.image_url_scheme and url
  end
  return out
end

-- media -> the upload of media[0] as {upload_id, mime_type}, or nil.
local function check_media(ctx, body, ctype)
  local media = take(ctx, body, "", "media", "array")
  if not media or #media == 0 then return nil end
  if ctype and ctype ~= "image" then
    ctx.add("/media", "field_not_allowed",
      ("A %s post has no media; remove it, or set content.type to image."):format(ctype))
    return nil
  end
  if #media > LIMITS.media_items then
    ctx.add("/media", "invalid_value", "A post takes one image: send exactly one media item.")
  end
  local item, at = media[1], "/media/0"
  if not has_type(item, "object") then
    ctx.add(at, "invalid_value", 'Each media item must be an object: {"source": "upload", "uploadId": "upl_..."}.')
    return nil
  end
  unknown_fields(ctx, item, at, ALLOWED.media)
  local source = take(ctx, item, at, "source", "string", 'Set source to "upload".')
  if source and source ~= "upload" then
    ctx.add(at .. "/source", "invalid_value",
      'source must be "upload"; for an image at a public URL, use content.imageUrl instead.')
  end
  local id = take(ctx, item, at, "uploadId", "string", "Give uploadId, the id POST /api/v1/uploads returned.")
  if not id then return nil end
  local upload = ctx.env.find_upload(id)
  if not upload then
    ctx.add(at .. "/uploadId", "unknown_upload",
      "No upload has this id; upload the image with POST /api/v1/uploads first.")
    return nil
  end
  return { upload_id = id, mime_type = upload.mime_type, size_bytes = upload.size_bytes, width = upload.width,
    height = upload.height, jpeg_variant = upload.jpeg_variant }
end

-- An image post has exactly one image: content.imageUrl or media[0]. `body` tells what
-- was given, even when it was invalid (already reported).
local function check_image(ctx, body, content, upload)
  if content.type ~= "image" then return nil end
  local c, media = body.content, body.media
  local url_given = not is_null(c.imageUrl)
  local media_given = has_type(media, "array") and #media > 0
  if url_given and media_given then
    ctx.add("/media", "field_not_allowed",
      "content.imageUrl already gives the image; send either content.imageUrl or media, not both.")
  elseif not url_given and not media_given then
    ctx.add("/content/imageUrl", "required",
      "An image post needs one image: set content.imageUrl to a public URL, "
        .. 'or send media [{"source": "upload", "uploadId": "upl_..."}].')
  end
  if content.image_url then return { source = "url", url = content.image_url } end
  if upload then return { source = "upload", upload_id = upload.upload_id, mime_type = upload.mime_type } end
end

-- #word and @word tokens. A tag starts at the beginning of the text or after a character
-- that is not a letter, digit or underscore (so "a#b" and "me@example.com" are not
-- tags), and needs at least one word character after its sign. Hashtag words may hold
-- any non-ASCII letter ("#café"); mentions are Instagram usernames (ASCII letters,
-- digits, "_" and "."). Every occurrence counts, repeated ones too.
local function count_tags(s, sign, word)
  local n = 0
  for _ in (" " .. s):gmatch("[^%w_]" .. sign .. "[" .. word .. "]") do n = n + 1 end
  return n
end
M.count_hashtags = function(s) return count_tags(s, "#", "%w_\128-\255") end
M.count_mentions = function(s) return count_tags(s, "@", "%w_") end

local JPEG_VARIANTS = { mpo = "a multi-picture JPEG (MPO)", jps = "a stereo JPEG (JPS)" }

-- What Instagram refuses in an image {mime_type, jpeg_variant, size_bytes,
-- width, height}: a list of {code, message}, each message naming the rule and
-- the measured value.
function M.instagram_image_problems(image)
  local limits, out = LIMITS.instagram, {}
  local function add(code, message) out[#out + 1] = { code = code, message = message } end
  if image.mime_type ~= "image/jpeg" then
    add("image_not_jpeg", ("Instagram accepts only JPEG images and this image is %s; use a JPEG.")
      :format(tostring(image.mime_type)))
  elseif JPEG_VARIANTS[image.jpeg_variant] then
    add("image_not_jpeg", ("Instagram accepts only plain JPEG images and this image is %s; save it as a "
      .. "single plain JPEG."):format(JPEG_VARIANTS[image.jpeg_variant]))
  end
  if image.size_bytes and image.size_bytes > limits.image_bytes then
    add("image_too_large", ("The image has %d bytes (%.1f MiB), more than Instagram's 8 MiB (%d bytes).")
      :format(image.size_bytes, image.size_bytes / 1048576, limits.image_bytes))
  end
  local w, h = image.width, image.height
  if w and h and h > 0 then
    local lo, hi = limits.aspect_min, limits.aspect_max
    if w * lo[2] < h * lo[1] or w * hi[2] > h * hi[1] then
      add("image_aspect_ratio", ("The image is %dx%d px: aspect ratio %.2f (width/height) is outside Instagram's "
        .. "%.2f to %.2f; crop it."):format(w, h, w / h, lo[1] / lo[2], hi[1] / hi[2]))
    end
  end
  if w and w < limits.min_width then
    add("image_too_small", ("The image is %d px wide, less than Instagram's minimum width of %d px.")
      :format(w, limits.min_width))
  end
  return out
end

-- What Instagram accepts (spec 4.3 and 8), one rule each. `post` is
-- {type, message, image_url_scheme, image_url, upload}.
local INSTAGRAM_RULES = {
  function(ctx, post)   -- no text-only or link posts
    if post.type == "text" or post.type == "link" then
      ctx.add("/content/type", "unsupported_content_type",
        ("Instagram does not publish %s posts; post an image, or remove the Instagram targets."):format(post.type))
    end
  end,
  function(ctx, post)   -- Meta's image rules; an upload's type and size come from its bytes
    if not post.upload then return end
    for _, p in ipairs(M.instagram_image_problems(post.upload)) do ctx.add("/media/0/uploadId", p.code, p.message) end
  end,
  -- Instagram fetches the image itself, over HTTPS only. An extension proves nothing,
  -- so the bytes are fetched once and held to the same rules as an upload's.
  function(ctx, post)
    if post.image_url_scheme == "http" then
      ctx.add("/content/imageUrl", "image_url_not_https",
        "Instagram fetches images only over HTTPS; give an https:// URL, or upload the image.")
    elseif post.image_url_scheme == "https" and ctx.env.fetch_image then
      local image, code, message = ctx.env.fetch_image(post.image_url)
      if not image then return ctx.add("/content/imageUrl", code, message) end
      for _, p in ipairs(M.instagram_image_problems(image)) do ctx.add("/content/imageUrl", p.code, p.message) end
    end
  end,
  function(ctx, post)   -- caption limits
    local caption, limits = post.message, LIMITS.instagram
    if not caption then return end
    local n = chars(caption)
    if n > limits.caption_chars then
      ctx.add("/content/message", "too_long",
        ("Instagram captions hold at most %d characters and this one has %d; shorten it.")
          :format(limits.caption_chars, n))
    end
    local hashtags = M.count_hashtags(caption)
    if hashtags > limits.hashtags then
      ctx.add("/content/message", "too_many_hashtags",
        ("Instagram captions hold at most %d hashtags and this one has %d; remove some.")
          :format(limits.hashtags, hashtags))
    end
    local mentions = M.count_mentions(caption)
    if mentions > limits.mentions then
      ctx.add("/content/message", "too_many_mentions",
        ("Instagram captions hold at most %d @mentions and this one has %d; remove some.")
          :format(limits.mentions, mentions))
    end
  end,
}

local function check_publishing(ctx, body)
  local p = take(ctx, body, "", "publishing", "object",
    'Add publishing: {"mode": "immediate"} or {"mode": "scheduled", "scheduledAt": "2026-11-21T10:00:00Z"}.')
  if not p then return nil end
  unknown_fields(ctx, p, "/publishing", ALLOWED.publishing)
  local mode = take(ctx, p, "/publishing", "mode", "string", "Set publishing.mode to immediate or scheduled.")
  if mode and not MODES[mode] then
    ctx.add("/publishing/mode", "invalid_value", "publishing.mode must be immediate or scheduled.")
    mode = nil
  end
  if mode == "immediate" then
    if not is_null(p.scheduledAt) then
      ctx.add("/publishing/scheduledAt", "field_not_allowed",
        "An immediate post has no scheduledAt; remove it, or set mode to scheduled.")
    end
    return { mode = mode }
  end

  local field = "/publishing/scheduledAt"
  local s = take(ctx, p, "/publishing", "scheduledAt", "string", mode == "scheduled"
    and "A scheduled post needs scheduledAt, an RFC 3339 timestamp such as 2026-11-21T10:00:00Z.")
  if not s then return { mode = mode } end
  local t, now = M.parse_time(s), ctx.env.now
  local days = ctx.env.max_schedule_days or 365
  if not t then
    ctx.add(field, "invalid_value",
      "scheduledAt must be an RFC 3339 timestamp with a zone, "
        .. "such as 2026-11-21T10:00:00Z or 2026-11-21T11:00:00+01:00.")
  elseif t <= now then
    ctx.add(field, "scheduled_at_in_past",
      ("scheduledAt is not in the future (now is %s); give a later time, or use mode immediate.")
        :format(M.format_time(now)))
  elseif t > now + days * 86400 then
    ctx.add(field, "invalid_value",
      ("scheduledAt is more than %s days ahead (the latest is %s); give an earlier time.")
        :format(days, M.format_time(now + days * 86400)))
  end
  return { mode = mode, scheduled_at = t }
end

local function check_external_reference(ctx, body)
  local ref = take(ctx, body, "", "externalReference", "string")
  if ref and check_length(ctx, "/externalReference", ref, LIMITS.external_reference_chars, "externalReference") then
    return ref
  end
end

---------------------------------------------------------------------------

function M.validate(body, env)
  local ctx = new_ctx(env)
  if not has_type(body, "object") then
    ctx.add("", "invalid_value", "The request body must be a JSON object.")
    return nil, ctx.errors
  end
  fields.company_fields(body, "", ctx.add)
  unknown_fields(ctx, body, "", ALLOWED.body)

  local targets = check_targets(ctx, body)
  local content = check_content(ctx, body) or {}
  local upload = check_media(ctx, body, content.type)
  local image = check_image(ctx, body, content, upload)
  if ctx.platforms.instagram then
    local post = { type = content.type, message = content.message,
      image_url_scheme = content.image_url_scheme, image_url = content.image_url, upload = upload }
    for _, rule in ipairs(INSTAGRAM_RULES) do rule(ctx, post) end
  end
  local publishing = check_publishing(ctx, body)
  local external_reference = check_external_reference(ctx, body)

  if #ctx.errors > 0 then return nil, ctx.errors end
  return {
    targets = targets,
    content = { type = content.type, message = content.message, link = content.link },
    image = image,
    publishing = publishing,
    external_reference = external_reference,
  }, ctx.errors
end

return M

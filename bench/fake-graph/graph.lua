-- graph.lua — the bench's fake of Meta's Graph API, run inside nginx with
-- ngx_http_lua (bench/fake-graph/nginx.conf, started by bench/fake-graph/start).
--
-- It answers the calls sgw's publishing makes (lib/platforms/facebook.lua,
-- instagram.lua, instagram_quota.lua, graph.lua) the way
-- spec/support/fake_graph.py does — same paths, parameters, token checks,
-- answer shapes, error bodies and codes, usage headers — after a fixed
-- latency spent in ngx.sleep, which parks the request without holding the
-- worker: thousands of calls can wait at once in one process.
--
-- Everything lives in two shared dicts, which every nginx worker sees and
-- changes atomically (add, incr), so records stay exact with any number of
-- workers:
--   fake_state      config, pages, tokens, objects, per-account indexes,
--                   usage counters, container polls
--   fake_published  what was really created, and how often each
--                   (platform, account, text) was
--
-- Graph endpoints (under /<version>/, access_token as a parameter or
-- "Authorization: Bearer|OAuth <token>"):
--   POST /{page}/feed                  message, link -> {"id":"<page>_<post>"}
--   POST /{page}/photos                url, caption|message -> {"id","post_id"} (the URL is not fetched)
--   GET  /{page}/feed|published_posts|posts   newest first, since/until, limit, after/before
--   GET  /{page}, /{post}, /{photo}, /{ig-user}, /{ig-media}   ?fields=...
--   POST /{ig-user}/media              image_url, caption -> {"id": container} (IMAGE only; not fetched)
--   GET  /{container}?fields=status_code,status   IN_PROGRESS until container_ready_ms
--                                      after creation, then FINISHED; PUBLISHED once published
--   POST /{ig-user}/media_publish      creation_id -> {"id": media}; a container publishes once
--   GET  /{ig-user}/media              newest first
--   GET  /{ig-user}/content_publishing_limit      {"data":[{"quota_usage","config"}]}
--   POST|GET|DELETE /{page}/subscribed_apps       what `sgw account add` asks for
--
-- Control (JSON):
--   GET  /_fake/health                 {"ok","version","server","workers"}
--   POST /_fake/reset                  forget everything, config back to the start's
--   POST /_fake/pages                  {"id"?,"name"?,"access_token"?,"instagram_business_account"?: true|{"id"?,"username"?}}
--   GET  /_fake/pages
--   GET|POST /_fake/config             latency_ms, container_ready_ms, ig_quota, ig_quota_duration_s,
--                                      usage_window_s, app_call_budget, account_call_budget
--   GET  /_fake/published[?account=][&summary=1]
--        {"data":[...],"counts":{"<account>":n},"total":n,"distinct":n,"repeated":n}
--        distinct: different (platform, account, text) published; repeated: how many of
--        those were published more than once
--   GET  /_fake/instagram/containers[?summary=1]
--        {"count","published","polls","max_polls","min_poll_gap_s","data":[{"id","account",
--         "created","ready_at","published_at","polls","min_poll_gap_s"}]}
--   GET  /_fake/stats                  {"calls": Graph calls answered since the start or reset}
--
-- Not here (the Python fake has them): scripted failures, comments, OAuth,
-- webhooks, appsecret_proof checks (the bench sets no app secret, so sgw
-- sends none), image fetching (no container ever ends in ERROR).
local cjson = require "cjson.safe"

local state = ngx.shared.fake_state
local pub = ngx.shared.fake_published

local M = {}

local DEFAULTS = {
  latency_ms = 0,
  container_ready_ms = 300,
  ig_quota = 50,
  ig_quota_duration_s = 86400,
  usage_window_s = 3600,
  app_call_budget = 2000,
  account_call_budget = 1000,
}
local BASE = {}
local VERSION = "v21.0"

local CONTAINER_TTL = 24 * 3600
local DEFAULT_LIMIT, MAX_LIMIT = 25, 100
local IG_CAPTION_MAX, IG_HASHTAGS_MAX, IG_MENTIONS_MAX = 2200, 30, 20

-- ------------------------------------------------------------------ config

local function load_config()
  for k, v in pairs(BASE) do state:set("cfg:" .. k, v) end
end

-- In init_by_lua (the master, before the workers fork): the command line's settings.
function M.init(opts)
  VERSION = opts.version or VERSION
  for k, v in pairs(DEFAULTS) do BASE[k] = tonumber(opts[k]) or v end
  load_config()
end

local function cfg(k)
  return state:get("cfg:" .. k) or DEFAULTS[k]
end

local function now()
  ngx.update_time()
  return ngx.now()
end

-- ------------------------------------------------------------------ errors

local CATALOGUE = {
  ["1"] = { message = "An unknown error occurred", http = 500, transient = true },
  ["2"] = { message = "An unexpected error has occurred. Please retry your request later.", http = 500, transient = true },
  ["100"] = { message = "(#100) Invalid parameter" },
  ["100/33"] = { type = "GraphMethodException" },
  ["104"] = { message = "An access token is required to request this resource." },
  ["190"] = { message = "Invalid OAuth access token data." },
  ["190/467"] = { message = "Invalid OAuth access token - Cannot parse access token" },
  ["200"] = { message = "(#200) If posting to a page, requires both pages_read_engagement and pages_manage_posts "
    .. "as an admin with sufficient administrative permission", http = 403 },
  ["324"] = { message = "(#324) Missing or invalid image file" },
  ["506"] = { message = "(#506) Duplicate status message", user_title = "Duplicate Post",
    user_msg = "This status update is identical to the last one you posted. Try posting something different, "
      .. "or delete your previous update." },
  ["2500"] = { message = "Unknown path components" },
  ["2635"] = { message = "(#2635) You are calling a deprecated or unknown version of the Graph API." },
  ["9/2207042"] = { message = "Application request limit reached", user_title = "Maximum number of posts reached",
    user_msg = "You reached maximum number of posts that is allowed to be published by Content Publishing API." },
  ["9007/2207027"] = { message = "Media ID is not available", user_title = "Media Not Ready For Publishing",
    user_msg = "The media is not ready for publishing, please wait for a moment" },
  ["9007/2207008"] = { message = "Media ID is not available", user_title = "Media already published",
    user_msg = "This media container has already been published; it cannot be published again." },
  ["24/2207008"] = { message = "The media builder does not exist or has been expired.",
    user_title = "Media builder not found" },
  ["36004/2207010"] = { message = "The caption is too long.", user_title = "Caption too long",
    user_msg = "The caption exceeds 2,200 characters, 30 hashtags or 20 @ tags." },
  ["-2/2207020"] = { message = "The media you are trying to access has expired. Please try to upload again.",
    user_title = "Media expired" },
}

local function default_http(code)
  if code == 4 or code == 10 or (code >= 200 and code <= 299) then return 403 end
  if code == 1 or code == 2 then return 500 end
  return 400
end

local ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
local TRACE = ALNUM .. "-_"

local function random_string(n, alphabet)
  local out = {}
  for i = 1, n do
    local j = math.random(#alphabet)
    out[i] = alphabet:sub(j, j)
  end
  return table.concat(out)
end

local function fbtrace_id()
  return "A" .. random_string(22, TRACE)
end

-- Raised (error(...)) by a route; the handler answers it in Graph's shape.
local function graph_error(code, subcode, message)
  local base = (subcode and CATALOGUE[code .. "/" .. subcode]) or CATALOGUE[tostring(code)] or {}
  local transient = base.transient
  if transient == nil then transient = code == 1 or code == 2 end
  return { graph_error = true, code = code, subcode = subcode,
    message = message or base.message or ("(#%d) An error occurred"):format(code),
    http = base.http or default_http(code), type = base.type or "OAuthException", transient = transient,
    user_title = base.user_title, user_msg = base.user_msg }
end

local function raise(code, subcode, message)
  error(graph_error(code, subcode, message), 0)
end

local function bad_param(message, subcode)
  raise(100, subcode, "(#100) " .. message)
end

local function unsupported(method, id)
  local verb = ({ GET = "get", POST = "post", DELETE = "delete" })[method] or method:lower()
  raise(100, 33, ("Unsupported %s request. Object with ID '%s' does not exist, cannot be loaded due to missing "
    .. "permissions, or does not support this operation. Please read the Graph API documentation at "
    .. "https://developers.facebook.com/docs/graph-api"):format(verb, id))
end

local function error_body(e)
  local body = { message = e.message, type = e.type, code = e.code, error_subcode = e.subcode,
    is_transient = e.transient, error_user_title = e.user_title, error_user_msg = e.user_msg,
    fbtrace_id = fbtrace_id() }
  return cjson.encode({ error = body })
end

-- ------------------------------------------------------------------ helpers

local function fmt_time(t)
  return os.date("!%Y-%m-%dT%H:%M:%S+0000", math.floor(t))
end

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- since/until: Unix seconds or an ISO 8601 date(-time); nil if unreadable.
local function parse_time(v)
  v = tostring(v)
  if v:match("^%-?%d+%.?%d*$") then return tonumber(v) end
  local y, mo, d, rest = v:match("^(%d%d%d%d)-(%d%d)-(%d%d)(.*)$")
  if not y then return nil end
  local h, mi, s = 0, 0, 0
  local hh, mm, tail = rest:match("^[T ](%d%d):(%d%d)(.*)$")
  if hh then
    h, mi, rest = tonumber(hh), tonumber(mm), tail
    local ss, tail2 = rest:match("^:(%d%d)(.*)$")
    if ss then s, rest = tonumber(ss), tail2 end
    rest = rest:gsub("^%.%d+", "")
  elseif rest ~= "" then
    return nil
  end
  local t = days_from_civil(tonumber(y), tonumber(mo), tonumber(d)) * 86400 + h * 3600 + mi * 60 + s
  if rest == "" or rest == "Z" then return t end
  local sign, oh, om = rest:match("^([+-])(%d%d):?(%d%d)$")
  if not sign then return nil end
  local off = tonumber(oh) * 3600 + tonumber(om) * 60
  return sign == "+" and t - off or t + off
end

local function encode_cursor(n)
  return (ngx.encode_base64("fake-graph:" .. n):gsub("+", "-"):gsub("/", "_"):gsub("=+$", ""))
end

local function decode_cursor(c)
  local s = c:gsub("-", "+"):gsub("_", "/")
  s = s .. string.rep("=", (4 - #s % 4) % 4)
  local raw = ngx.decode_base64(s)
  local n = raw and raw:match("^fake%-graph:(%d+)$")
  if not n then bad_param("Invalid cursor") end
  return tonumber(n)
end

-- "id,message,from{id,name}" -> { {name, sub}, ... }; modifiers like .limit(5) dropped.
local function parse_fields(spec)
  local items, depth, start = {}, 0, 1
  local parts = {}
  for i = 1, #spec do
    local c = spec:sub(i, i)
    if c == "{" then depth = depth + 1
    elseif c == "}" then depth = depth - 1
      if depth < 0 then bad_param("Syntax error in fields: '" .. spec .. "'") end
    elseif c == "," and depth == 0 then
      parts[#parts + 1] = spec:sub(start, i - 1)
      start = i + 1
    end
  end
  if depth ~= 0 then bad_param("Syntax error in fields: '" .. spec .. "'") end
  parts[#parts + 1] = spec:sub(start)
  for _, p in ipairs(parts) do
    p = p:match("^%s*(.-)%s*$")
    if p ~= "" then
      local name, rest = p:match("^([%a_][%w_]*)(.*)$")
      if not name then bad_param("Syntax error in fields: '" .. spec .. "'") end
      rest = rest:gsub("^%.[%a_]+%b()", "")
      local sub
      if rest:sub(1, 1) == "{" then sub = parse_fields(rest:sub(2, -2)) end
      items[#items + 1] = { name, sub }
    end
  end
  return items
end

local function select(value, sub)
  if not sub or type(value) ~= "table" then return value end
  local out = {}
  for _, f in ipairs(sub) do
    if value[f[1]] ~= nil then out[f[1]] = select(value[f[1]], f[2]) end
  end
  return out
end

local function utf8_len(s)
  local _, cont = s:gsub("[\128-\191]", "")
  return #s - cont
end

local function count(s, pattern)
  local n = 0
  for _ in s:gmatch(pattern) do n = n + 1 end
  return n
end

-- ------------------------------------------------------------------ objects

local function load(id)
  local raw = state:get("o:" .. id)
  return raw and cjson.decode(raw) or nil
end

local function store(obj)
  state:set("o:" .. obj.id, cjson.encode(obj))
end

local function next_seq()
  return state:incr("seq", 1, 0)
end

-- Appends an object to its account's listing; returns its position (1, 2, ...).
local function index(account, id)
  local n = state:incr("n:" .. account, 1, 0)
  state:set("ix:" .. account .. ":" .. n, id)
  return n
end

local function record_published(entry, text)
  local key = "k:" .. entry.platform .. "\t" .. entry.account_id .. "\t" .. (text or "")
  local seen = pub:incr(key, 1, 0)
  if seen == 1 then pub:incr("distinct", 1, 0) elseif seen == 2 then pub:incr("repeated", 1, 0) end
  local n = pub:incr("total", 1, 0)
  entry.made_at = now() -- when the call that made it was answered (the bench's timeline)
  pub:set("p:" .. n, cjson.encode(entry))
end

local function page_name(id)
  local p = load(id)
  return p and p.name or nil
end

local function post_permalink(post)
  return ("https://www.facebook.com/%s/posts/%s"):format(post.a, post.post_id)
end

local function ig_permalink(media)
  return "https://www.instagram.com/p/" .. media.sc .. "/"
end

local function container_status(c)
  if state:get("cmedia:" .. c.id) then return "PUBLISHED" end
  local t = now()
  if t - c.t > CONTAINER_TTL then return "EXPIRED" end
  if t < c.r then return "IN_PROGRESS" end
  return "FINISHED"
end

local STATUS_TEXT = {
  IN_PROGRESS = "In Progress: Media is still being processed.",
  FINISHED = "Finished: Media has been uploaded and it is ready to be published.",
  PUBLISHED = "Published: Media has been successfully published.",
  EXPIRED = "Expired: Media was not published within 24 hours.",
}

local function opt(v)
  if v == nil or v == "" then return nil end
  return v
end

local FIELDS = {
  page = {
    id = function(p) return p.id end,
    name = function(p) return p.name end,
    access_token = function(p) return p.token end,
    instagram_business_account = function(p) return p.ig and { id = p.ig } or nil end,
    link = function(p) return "https://www.facebook.com/" .. p.id end,
  },
  ig_user = {
    id = function(u) return u.id end,
    username = function(u) return u.username end,
    name = function(u) return u.username end,
    media_count = function(u) return state:get("n:" .. u.id) or 0 end,
    followers_count = function() return 0 end,
  },
  post = {
    id = function(p) return p.id end,
    message = function(p) return opt(p.m) end,
    created_time = function(p) return fmt_time(p.t) end,
    updated_time = function(p) return fmt_time(p.t) end,
    permalink_url = post_permalink,
    link = function(p) return opt(p.l) end,
    full_picture = function(p) return opt(p.u) end,
    status_type = function(p) return p.kind == "photo" and "added_photos" or "mobile_status_update" end,
    is_published = function() return true end,
    from = function(p) return { id = p.a, name = page_name(p.a) } end,
  },
  photo = {
    id = function(p) return p.id end,
    name = function(p) return opt(p.caption) end,
    created_time = function(p) return fmt_time(p.t) end,
    link = function(p) return "https://www.facebook.com/photo.php?fbid=" .. p.id end,
    page_story_id = function(p) return p.post_id end,
    from = function(p) return { id = p.a, name = page_name(p.a) } end,
  },
  container = {
    id = function(c) return c.id end,
    status_code = container_status,
    status = function(c) return STATUS_TEXT[container_status(c)] end,
  },
  ig_media = {
    id = function(m) return m.id end,
    caption = function(m) return opt(m.caption) end,
    timestamp = function(m) return fmt_time(m.t) end,
    permalink = ig_permalink,
    shortcode = function(m) return m.sc end,
    media_type = function() return "IMAGE" end,
    media_product_type = function() return "FEED" end,
    media_url = function(m) return m.image_url end,
    username = function(m) local u = load(m.a) return u and u.username or nil end,
    owner = function(m) return { id = m.a } end,
    like_count = function() return 0 end,
    comments_count = function() return 0 end,
  },
}

local DEFAULT_FIELDS = {
  page = "name,id", ig_user = "id", post = "created_time,message,id", photo = "created_time,name,id",
  container = "id", ig_media = "id",
}

local NODE_TYPES = { page = "Page", ig_user = "IGUser", post = "PagePost", photo = "Photo",
  container = "ShadowIGMediaBuilder", ig_media = "IGMedia" }

local function render(kind, obj, fields)
  local out, getters = {}, FIELDS[kind]
  for _, f in ipairs(fields) do
    local get = getters[f[1]]
    if not get then
      bad_param(("Tried accessing nonexisting field (%s) on node type (%s)"):format(f[1], NODE_TYPES[kind]))
    end
    local v = get(obj)
    if v ~= nil then out[f[1]] = select(v, f[2]) end
  end
  if out.id == nil and getters.id then out.id = getters.id(obj) end
  return out
end

local function req_fields(req, kind)
  return parse_fields(req.params.fields or DEFAULT_FIELDS[kind])
end

local function int_param(req, name, default, lo, hi)
  local v = req.params[name]
  if v == nil or v == "" then return default end
  local n = tonumber(v)
  if not n then bad_param("Param " .. name .. " must be a number") end
  return math.max(lo, math.min(hi, math.floor(n)))
end

-- A listing of an account's objects, newest first, as Graph pages it.
local function paginate(req, account, kind)
  local since, untl
  if req.params.since and req.params.since ~= "" then
    since = parse_time(req.params.since) or bad_param("Param since must be a valid time")
  end
  if req.params["until"] and req.params["until"] ~= "" then
    untl = parse_time(req.params["until"]) or bad_param("Param until must be a valid time")
  end
  local limit = int_param(req, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
  local after = req.params.after ~= "" and req.params.after or nil
  local before = req.params.before ~= "" and req.params.before or nil
  local after_n = after and decode_cursor(after)
  local before_n = before and decode_cursor(before)
  local fields = req_fields(req, kind)
  local top = state:get("n:" .. account) or 0
  local items = {}   -- newest first, after the time filters
  for n = top, 1, -1 do
    local id = state:get("ix:" .. account .. ":" .. n)
    local obj = id and load(id)
    if obj and (not since or obj.t >= since) and (not untl or obj.t <= untl) then
      items[#items + 1] = obj
    end
  end
  local page = {}
  if after_n then
    for _, o in ipairs(items) do
      if o.n < after_n and #page < limit then page[#page + 1] = o end
    end
  elseif before_n then
    local newer = {}
    for _, o in ipairs(items) do if o.n > before_n then newer[#newer + 1] = o end end
    for i = math.max(1, #newer - limit + 1), #newer do page[#page + 1] = newer[i] end
  else
    for i = 1, math.min(limit, #items) do page[i] = items[i] end
  end
  local data = {}
  for i, o in ipairs(page) do data[i] = cjson.encode(render(kind, o, fields)) end
  local out = '{"data":[' .. table.concat(data, ",") .. "]"
  if #page > 0 then
    local first, last = page[1].n, page[#page].n
    local paging = { cursors = { before = encode_cursor(first), after = encode_cursor(last) } }
    local newer, older = false, false
    for _, o in ipairs(items) do
      if o.n > first then newer = true end
      if o.n < last then older = true end
    end
    local function link(key, cursor)
      local args = {}
      for k, v in pairs(req.params) do if k ~= "after" and k ~= "before" then args[k] = v end end
      args[key] = cursor
      return ("http://%s/%s%s?%s"):format(ngx.var.http_host or "127.0.0.1", VERSION, req.path, ngx.encode_args(args))
    end
    if newer then paging.previous = link("before", paging.cursors.before) end
    if older then paging.next = link("after", paging.cursors.after) end
    out = out .. ',"paging":' .. cjson.encode(paging)
  end
  return out .. "}"
end

-- ------------------------------------------------------------------ routes

local ROUTES = {}

local function route(kind, edge, method, fn)
  ROUTES[kind .. "|" .. (edge or "") .. "|" .. method] = fn
end

local function get_node(req, obj)
  return cjson.encode(render(req.kind, obj, req_fields(req, req.kind)))
end
for _, kind in ipairs({ "page", "ig_user", "post", "photo", "ig_media" }) do route(kind, nil, "GET", get_node) end

local function list_posts(req, page) return paginate(req, page.id, "post") end
route("page", "feed", "GET", list_posts)
route("page", "published_posts", "GET", list_posts)
route("page", "posts", "GET", list_posts)

local function new_page_post(page, kind, message, extra)
  local seq = next_seq()
  local post_id = ("122%015d"):format(seq)
  local post = { k = "post", id = page.id .. "_" .. post_id, a = page.id, post_id = post_id, kind = kind,
    m = message, t = now() }
  for k, v in pairs(extra or {}) do post[k] = v end
  post.n = index(page.id, post.id)
  store(post)
  record_published({ platform = "facebook", account_id = page.id, kind = kind, id = post.id,
    photo_id = post.photo_id, message = message, link = post.l, url = post.u,
    created_time = fmt_time(post.t), permalink_url = post_permalink(post) }, message)
  return post
end

route("page", "feed", "POST", function(req, page)
  local message = req.params.message or ""
  local link = opt(req.params.link)
  if message == "" and not link then bad_param("Missing message or attachment") end
  -- Meta refuses a status identical to the Page's previous one.
  if message ~= "" then
    local last = state:get("last:" .. page.id)
    if last == message then raise(506) end
    state:set("last:" .. page.id, message)
  end
  local post = new_page_post(page, "status", message, { l = link })
  return cjson.encode({ id = post.id })
end)

route("page", "photos", "POST", function(req, page)
  local url = opt(req.params.url)
  if not url then raise(324, nil, "(#324) Requires upload file") end
  local caption = req.params.caption or req.params.message or ""
  local photo_id = ("1%015d"):format(next_seq())
  local post = new_page_post(page, "photo", caption, { u = url, photo_id = photo_id })
  store({ k = "photo", id = photo_id, a = page.id, post_id = post.id, caption = caption, url = url, t = post.t })
  return cjson.encode({ id = photo_id, post_id = post.id })
end)

route("ig_user", "media", "POST", function(req, ig)
  local media_type = (req.params.media_type or "IMAGE"):upper()
  if media_type ~= "IMAGE" or req.params.is_carousel_item == "true" then
    bad_param("The fake Graph API supports single image posts only (media_type=" .. media_type .. ")")
  end
  local image_url = opt(req.params.image_url)
  if not image_url then bad_param("The parameter image_url is required.") end
  local caption = req.params.caption or ""
  if utf8_len(caption) > IG_CAPTION_MAX or count(caption, "#[%w_]+") > IG_HASHTAGS_MAX
      or count(" " .. caption, "[^%w_.]@[%w_.]+") > IG_MENTIONS_MAX then
    raise(36004, 2207010)
  end
  local t = now()
  local c = { k = "container", id = ("178%014d"):format(next_seq()), a = ig.id, image_url = image_url,
    caption = caption, t = t, r = t + cfg("container_ready_ms") / 1000 }
  store(c)
  local n = state:incr("cn", 1, 0)
  state:set("cx:" .. n, c.id)
  return cjson.encode({ id = c.id })
end)

route("container", nil, "GET", function(req, c)
  local fields = req_fields(req, "container")
  for _, f in ipairs(fields) do
    if f[1] == "status_code" then
      -- How often and how closely sgw asks: Meta wants at most one query a minute.
      local t = now()
      state:incr("cpolls:" .. c.id, 1, 0)
      local last = state:get("clast:" .. c.id)
      state:set("clast:" .. c.id, t)
      if last then
        local gap, min = t - last, state:get("cgap:" .. c.id)
        if not min or gap < min then state:set("cgap:" .. c.id, gap) end
      end
      break
    end
  end
  return cjson.encode(render("container", c, fields))
end)

-- Publishes in the rolling window: the account's media newest first until one is older.
local function ig_quota_usage(ig, t)
  local since = t - cfg("ig_quota_duration_s")
  local used = 0
  for n = state:get("n:" .. ig.id) or 0, 1, -1 do
    local m = load(state:get("ix:" .. ig.id .. ":" .. n) or "")
    if not m or m.t <= since then break end
    used = used + 1
  end
  return used
end

route("ig_user", "media_publish", "POST", function(req, ig)
  local creation_id = opt(req.params.creation_id)
  if not creation_id then bad_param("The parameter creation_id is required.") end
  local c = load(creation_id)
  if not c or c.k ~= "container" or c.a ~= ig.id then
    raise(24, 2207008, ("The media builder with creation id = %s does not exist or has been expired."):format(creation_id))
  end
  local status = container_status(c)
  if status == "PUBLISHED" then raise(9007, 2207008) end
  if status == "EXPIRED" then raise(-2, 2207020) end
  if status == "IN_PROGRESS" then raise(9007, 2207027) end
  local t = now()
  if ig_quota_usage(ig, t) >= cfg("ig_quota") then raise(9, 2207042) end
  local media_id = ("179%014d"):format(next_seq())
  -- Never a second media for one container, also when two calls race.
  if not state:add("cmedia:" .. c.id, media_id) then raise(9007, 2207008) end
  local media = { k = "ig_media", id = media_id, a = ig.id, container = c.id, caption = c.caption,
    image_url = c.image_url, t = t, sc = random_string(11, ALNUM .. "_-") }
  media.n = index(ig.id, media_id)
  store(media)
  record_published({ platform = "instagram", account_id = ig.id, kind = "image", id = media_id,
    container_id = c.id, caption = c.caption, url = c.image_url, created_time = fmt_time(t),
    permalink = ig_permalink(media) }, c.caption)
  return cjson.encode({ id = media_id })
end)

route("ig_user", "media", "GET", function(req, ig) return paginate(req, ig.id, "ig_media") end)

route("ig_user", "content_publishing_limit", "GET", function(req, ig)
  local full = { quota_usage = ig_quota_usage(ig, now()),
    config = { quota_total = cfg("ig_quota"), quota_duration = cfg("ig_quota_duration_s") } }
  if req.params.fields and req.params.fields ~= "" then
    local out = {}
    for _, f in ipairs(parse_fields(req.params.fields)) do
      if full[f[1]] == nil then
        bad_param(("Tried accessing nonexisting field (%s) on node type (ContentPublishingLimitResponse)"):format(f[1]))
      end
      out[f[1]] = full[f[1]]
    end
    full = out
  end
  return '{"data":[' .. cjson.encode(full) .. "]}"
end)

-- The app's webhook subscription of a Page (sgw makes one when an account is added).
route("page", "subscribed_apps", "POST", function(req, page)
  local fields = req.params.subscribed_fields or ""
  local list = fields:sub(1, 1) == "[" and cjson.decode(fields) or nil
  if not list then
    list = {}
    for f in fields:gmatch("[^,%s]+") do list[#list + 1] = f end
  end
  if #list == 0 then bad_param("The parameter subscribed_fields is required.") end
  state:set("subs:" .. page.id, cjson.encode(list))
  return '{"success":true}'
end)

route("page", "subscribed_apps", "DELETE", function(_, page)
  state:delete("subs:" .. page.id)
  return '{"success":true}'
end)

route("page", "subscribed_apps", "GET", function(_, page)
  local fields = state:get("subs:" .. page.id)
  if not fields then return '{"data":[]}' end
  return '{"data":[{"id":"fake-app","name":"fake app","subscribed_fields":' .. fields .. "}]}"
end)

-- ------------------------------------------------------------------ Graph requests

local function first(v)
  if type(v) == "table" then v = v[1] end
  if v == true then return "" end
  return v
end

local function parse_request()
  local method = ngx.req.get_method()
  local params = {}
  for k, v in pairs(ngx.req.get_uri_args(200)) do params[k] = first(v) end
  if method ~= "GET" and method ~= "HEAD" then
    ngx.req.read_body()
    local ctype = (ngx.var.content_type or ""):lower()
    if ctype:find("application/json", 1, true) then
      local value = cjson.decode(ngx.req.get_body_data() or "")
      if type(value) ~= "table" then bad_param("The JSON request body must be an object") end
      for k, v in pairs(value) do
        if type(v) == "table" then v = cjson.encode(v) elseif v == cjson.null then v = "" else v = tostring(v) end
        params[k] = v
      end
    else
      local args = ngx.req.get_post_args(200)
      for k, v in pairs(args or {}) do params[k] = first(v) end
    end
  end
  local uri = ngx.var.uri
  local version, rest = uri:match("^/(v%d+%.%d+)(.*)$")
  local segments = {}
  for s in (rest or uri):gmatch("[^/]+") do segments[#segments + 1] = s end
  local token = params.access_token
  if not token then
    local auth = ngx.var.http_authorization or ""
    token = auth:match("^%s*[Bb][Ee][Aa][Rr][Ee][Rr]%s+(%S+)") or auth:match("^%s*[Oo][Aa][Uu][Tt][Hh]%s+(%S+)")
  end
  local req = { method = method, version = version, segments = segments, params = params, token = token,
    path = "/" .. table.concat(segments, "/") }
  -- The node the call is about (for usage headers), before the token is judged.
  if segments[1] then
    local obj = load(segments[1])
    if obj then req.obj, req.kind, req.account = obj, obj.k, obj.a end
  end
  return req
end

local function authenticate(req)
  if not req.token or req.token == "" then raise(104) end
  local raw = state:get("tok:" .. req.token)
  if not raw then raise(190, 467) end
  local set = {}
  for a in raw:gmatch("[^,]+") do set[a] = true end
  return set
end

local function dispatch(req)
  if req.version ~= VERSION then
    raise(2635, nil, ("(#2635) This fake serves Graph API %s only; the call asked for %s.")
      :format(VERSION, req.version or "no version"))
  end
  local segs = req.segments
  if not segs[1] then unsupported(req.method, "") end
  local accounts = authenticate(req)
  if #segs > 2 then
    raise(2500, nil, "Unknown path components: /" .. table.concat(segs, "/", 3))
  end
  local edge = segs[2]
  if not req.obj then unsupported(req.method, segs[1]) end
  if not accounts[req.account] then
    -- Writes with another account's token are a permission problem; reads see nothing.
    if req.method ~= "GET" and (req.kind == "page" or req.kind == "ig_user") then
      raise(200, nil, "(#200) The access token does not allow acting on this account")
    end
    unsupported(req.method, segs[1])
  end
  local handler = ROUTES[req.kind .. "|" .. (edge or "") .. "|" .. req.method]
  if not handler then
    if edge and req.method == "GET" then
      bad_param(("Tried accessing nonexisting field (%s) on node type (%s)"):format(edge, NODE_TYPES[req.kind]))
    end
    if edge then raise(2500, nil, "Unknown path components: /" .. edge) end
    unsupported(req.method, segs[1])
  end
  return handler(req, req.obj)
end

-- Calls per fixed window of usage_window_s (Meta's is rolling; close enough here).
local function count_call(req)
  local window = cfg("usage_window_s")
  local bucket = math.floor(now() / window)
  local ttl = window * 2
  state:incr("calls:" .. bucket, 1, 0, ttl)
  if req.account then state:incr("acalls:" .. req.account .. ":" .. bucket, 1, 0, ttl) end
  state:incr("calls_total", 1, 0)
  return bucket
end

local function usage_headers(req, bucket)
  local app_calls = state:get("calls:" .. bucket) or 0
  local app_pct = math.min(1000, math.floor(app_calls * 100 / math.max(1, cfg("app_call_budget"))))
  ngx.header["X-App-Usage"] = ('{"call_count":%d,"total_time":%d,"total_cputime":%d}')
    :format(app_pct, math.floor(app_pct / 2), math.floor(app_pct / 3))
  if req.account then
    local calls = state:get("acalls:" .. req.account .. ":" .. bucket) or 0
    local pct = math.min(1000, math.floor(calls * 100 / math.max(1, cfg("account_call_budget"))))
    local kind = (req.kind == "ig_user" or req.kind == "container" or req.kind == "ig_media") and "instagram" or "pages"
    ngx.header["X-Business-Use-Case-Usage"] = ('{"%s":[{"type":"%s","call_count":%d,"total_cputime":%d,'
      .. '"total_time":%d,"estimated_time_to_regain_access":0}]}')
      :format(req.account, kind, pct, math.floor(pct / 3), math.floor(pct / 2))
  end
end

function M.graph()
  local ok, req = pcall(parse_request)
  local bucket
  if ok then bucket = count_call(req) end
  local latency = cfg("latency_ms")
  if latency > 0 then ngx.sleep(latency / 1000) end

  local status, body, err = 200, nil, nil
  if ok then
    local done, res = pcall(dispatch, req)
    if done then body = res else err = res end
  else
    err = req
    req = nil
  end
  if err then
    if type(err) ~= "table" or not err.graph_error then
      ngx.log(ngx.ERR, "fake-graph: ", tostring(err))
      err = graph_error(1)
    end
    status, body = err.http, error_body(err)
  end
  ngx.status = status
  ngx.header["Content-Type"] = "application/json; charset=UTF-8"
  ngx.header["facebook-api-version"] = VERSION
  ngx.header["x-fb-trace-id"] = fbtrace_id():sub(1, 11)
  -- Not Meta's: which nginx worker answered (the self-test checks that records are shared).
  ngx.header["x-fake-worker"] = ngx.worker.pid()
  if req then usage_headers(req, bucket) end
  if err and err.code == 190 then
    ngx.header["WWW-Authenticate"] = ('OAuth "Facebook Platform" "invalid_token" "%s"'):format(err.message:gsub('"', "'"))
  end
  ngx.header["Content-Length"] = #body
  ngx.print(body)
end

-- ------------------------------------------------------------------ control

local CONTROL = {}

local function control_error(message, status)
  error({ control_error = true, message = message, status = status or 400 }, 0)
end

local function numeric_id(v)
  if v == nil or v == cjson.null then return nil end
  v = tostring(v)
  if not v:match("^%d+$") or #v > 20 then control_error("ids are numeric strings: " .. v) end
  return v
end

local function page_view(page)
  local out = { id = page.id, name = page.name, access_token = page.token }
  if page.ig then
    local ig = load(page.ig)
    out.instagram_business_account = { id = page.ig, username = ig and ig.username }
  end
  return out
end

CONTROL["GET health"] = function()
  return { ok = true, version = VERSION, server = "fake-graph (nginx + Lua)", workers = ngx.worker.count() }
end

CONTROL["POST reset"] = function()
  state:flush_all()
  pub:flush_all()
  state:flush_expired()
  pub:flush_expired()
  load_config()
  return { ok = true }
end

CONTROL["POST pages"] = function(_, body)
  local page_id = numeric_id(body.id) or ("1%014d"):format(next_seq())
  local token = type(body.access_token) == "string" and body.access_token or ("EAAfake" .. random_string(32, ALNUM))
  local page = { k = "page", id = page_id, a = page_id,
    name = type(body.name) == "string" and body.name or ("Page " .. page_id), token = token }
  local iga = body.instagram_business_account
  local ig
  if iga and iga ~= cjson.null and iga ~= false then
    iga = type(iga) == "table" and iga or {}
    local ig_id = numeric_id(iga.id) or ("1784%013d"):format(next_seq())
    ig = { k = "ig_user", id = ig_id, a = ig_id, page = page_id,
      username = type(iga.username) == "string" and iga.username or ("ig_" .. ig_id:sub(-6)) }
    page.ig = ig_id
  end
  if not state:add("o:" .. page_id, cjson.encode(page)) then control_error("id " .. page_id .. " is taken", 409) end
  if ig and not state:add("o:" .. ig.id, cjson.encode(ig)) then control_error("id " .. ig.id .. " is taken", 409) end
  local n = state:incr("pages", 1, 0)
  state:set("page:" .. n, page_id)
  -- The token acts for the Page and its Instagram account.
  local accounts = state:get("tok:" .. token)
  local add = page_id .. (ig and ("," .. ig.id) or "")
  state:set("tok:" .. token, accounts and (accounts .. "," .. add) or add)
  return page_view(page)
end

CONTROL["GET pages"] = function()
  local out = {}
  for n = 1, state:get("pages") or 0 do
    local p = load(state:get("page:" .. n) or "")
    if p then out[#out + 1] = cjson.encode(page_view(p)) end
  end
  return '{"data":[' .. table.concat(out, ",") .. "]}"
end

local function config_view()
  local out = { version = VERSION }
  for k in pairs(DEFAULTS) do out[k] = cfg(k) end
  return out
end

CONTROL["GET config"] = config_view

CONTROL["POST config"] = function(_, body)
  for k, v in pairs(body) do
    if DEFAULTS[k] == nil then control_error("unknown config key: " .. tostring(k)) end
    if type(v) ~= "number" or v < 0 then control_error("config " .. k .. " must be a non-negative number") end
  end
  for k, v in pairs(body) do state:set("cfg:" .. k, v) end
  return config_view()
end

CONTROL["GET published"] = function(args)
  local data, counts, total = {}, {}, 0
  for n = 1, pub:get("total") or 0 do
    local raw = pub:get("p:" .. n)
    local e = raw and cjson.decode(raw)
    if e and (not args.account or args.account == e.account_id) then
      total = total + 1
      counts[e.account_id] = (counts[e.account_id] or 0) + 1
      if args.summary ~= "1" then data[#data + 1] = raw end
    end
  end
  local head = cjson.encode({ counts = counts, total = total, distinct = pub:get("distinct") or 0,
    repeated = pub:get("repeated") or 0 })
  return '{"data":[' .. table.concat(data, ",") .. "]," .. head:sub(2)
end

CONTROL["GET instagram/containers"] = function(args)
  local data, published, polls, max_polls, min_gap = {}, 0, 0, 0, nil
  for n = 1, state:get("cn") or 0 do
    local c = load(state:get("cx:" .. n) or "")
    if c then
      local media_id = state:get("cmedia:" .. c.id)
      local m = media_id and load(media_id)
      local p = state:get("cpolls:" .. c.id) or 0
      local gap = state:get("cgap:" .. c.id)
      if m then published = published + 1 end
      polls, max_polls = polls + p, math.max(max_polls, p)
      if gap and (not min_gap or gap < min_gap) then min_gap = gap end
      if args.summary ~= "1" then
        data[#data + 1] = cjson.encode({ id = c.id, account = c.a, created = c.t, ready_at = c.r,
          published_at = m and m.t or nil, polls = p, min_poll_gap_s = gap })
      end
    end
  end
  local head = cjson.encode({ count = state:get("cn") or 0, published = published, polls = polls,
    max_polls = max_polls, min_poll_gap_s = min_gap or cjson.null })
  return '{"data":[' .. table.concat(data, ",") .. "]," .. head:sub(2)
end

CONTROL["GET stats"] = function()
  return { calls = state:get("calls_total") or 0 }
end

function M.control()
  local method = ngx.req.get_method()
  local name = ngx.var.uri:gsub("^/_fake/?", ""):gsub("/+$", "")
  local ok, res = pcall(function()
    local fn = CONTROL[method .. " " .. name]
    if not fn then control_error("no control endpoint " .. method .. " /_fake/" .. name, 404) end
    local body = {}
    if method == "POST" then
      ngx.req.read_body()
      local raw = ngx.req.get_body_data() or ""
      if raw:match("%S") then
        body = cjson.decode(raw)
        if type(body) ~= "table" then control_error("the body must be a JSON object") end
      end
    end
    local args = {}
    for k, v in pairs(ngx.req.get_uri_args(50)) do args[k] = first(v) end
    return fn(args, body)
  end)
  local status = 200
  if not ok then
    if type(res) == "table" and res.control_error then
      status = res.status
      res = { error = { message = res.message, type = "FakeControlError", code = 100, is_transient = false,
        fbtrace_id = fbtrace_id() } }
    else
      ngx.log(ngx.ERR, "fake-graph control: ", tostring(res))
      status, res = 500, { error = { message = tostring(res), type = "FakeControlError", code = 1 } }
    end
  end
  if type(res) == "table" then res = cjson.encode(res) end
  ngx.status = status
  ngx.header["Content-Type"] = "application/json; charset=UTF-8"
  ngx.header["Content-Length"] = #res
  ngx.print(res)
end

return M

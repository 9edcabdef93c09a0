-- The small Graph API client the Facebook and Instagram adapters share, and
-- the outcome shapes of docs/publishing.md they both return.
--
--   graph.call(method, path, params, token)
--     -> value, nil, nil, headers        decoded JSON of a 2xx answer
--     -> nil, err, sent, headers         err classified by platforms.graph_errors
--
-- `sent` is true when whatever the request asked for may have happened: no
-- answer came back but the request may have reached Meta (a time-out after
-- sending), or Meta answered with trouble on its side (HTTP 5xx, codes 1, 2,
-- -1, -2, is_transient), which it does at times after the write went
-- through (graph_errors.from_response). Any other answer, a refusal, is
-- definitive: sent is false. While Meta
-- throttles the app or the token (platforms.graph_pause), no call is made:
-- the answer is that rate_limited error at once, with `paused = true`; so it
-- is when the host does not send a job's call for its lease
-- (platform_unavailable with `paused` and `lease`, graph_errors.from_failure).
--
-- Parameters go form-encoded in the body of a POST and in the query string
-- otherwise; the token goes as the access_token parameter and is never logged.
-- A call with a token also carries appsecret_proof (below), so an app with
-- "Require App Secret" on accepts it and a stolen token alone is useless.
local json = require "json"
local graph_errors = require "platforms.graph_errors"
local pause = require "platforms.graph_pause"
local trim = require "trim"

local M = {}

-- Logged when a call finds Meta's usage at or above this percent.
local USAGE_WARN = 80

local function escape(s)
  return (tostring(s):gsub("[^%w%-%._~]", function(c) return string.format("%%%02X", c:byte()) end))
end

local function encode(params)
  local names = {}
  for k in pairs(params) do names[#names + 1] = k end
  table.sort(names)
  local parts = {}
  for _, k in ipairs(names) do
    local v = params[k]
    if type(v) == "table" then v = json.encode(v) end
    parts[#parts + 1] = escape(k) .. "=" .. escape(v)
  end
  return table.concat(parts, "&")
end
M.encode = encode

-- hex HMAC-SHA256 of the token keyed with the app secret, as Meta checks it;
-- nil when it is turned off (meta.appsecret_proof) or there is no secret.
function M.appsecret_proof(token)
  local secret = config.get("meta.app_secret")
  if not token or config.get("meta.appsecret_proof") == false or (secret or "") == "" then return nil end
  return crypto.hmac_sha256_hex(secret, token)
end

function M.call(method, path, params, token)
  path = type(path) == "string" and path:gsub("^/", "") or path
  if type(path) ~= "string" or not path:match("^[%w_%-%.]+[%w_%-%./]*$") or path:find("..", 1, true) then
    return nil, { code = "invalid_request", message = "Not a Graph API path: " .. tostring(path) }, false
  end
  local paused = pause.check(token)
  if paused then return nil, paused, false end
  local fields = {}
  for k, v in pairs(params or {}) do fields[k] = v end
  fields.access_token = token
  fields.appsecret_proof = M.appsecret_proof(token)
  local base = (config.get("meta.graph_base_url") or ""):gsub("/+$", "")
  local req = { method = method, url = base .. "/" .. path, timeout = config.get("meta.request_timeout_seconds") }
  if method == "POST" then
    req.headers = { ["Content-Type"] = "application/x-www-form-urlencoded" }
    req.body = encode(fields)
  else
    req.url = req.url .. "?" .. encode(fields)
  end

  local started = clock.mono_ms and clock.mono_ms()
  local res, message, kind = http.request(req)
  local ms = started and (clock.mono_ms() - started) or nil
  if not res then
    local err = graph_errors.from_failure(message, kind)
    log.warn("graph_call_failed", { method = method, path = path, kind = kind, error = err.message, ms = ms })
    return nil, err, kind ~= "connect" and kind ~= "lease"
  end

  local app_usage = graph_errors.app_usage(res.headers)
  local pressure = graph_errors.usage_pressure(res.headers, app_usage)
  if pressure >= USAGE_WARN then
    log.warn("graph_usage_high", { method = method, path = path, percent = pressure })
  end
  local value = json.decode(res.body or "")
  if res.status >= 200 and res.status < 300 and type(value) == "table" and value.error == nil then
    log.debug("graph_call", { method = method, path = path, status = res.status, ms = ms })
    pause.observe(token, nil, graph_errors.regain_access_seconds(res.headers), app_usage)
    return value, nil, nil, res.headers
  end
  if res.status >= 200 and res.status < 300 and type(value) ~= "table" then
    -- A success we cannot read: it may have done what we asked.
    local err = { code = "platform_unavailable", message = "Graph API answered HTTP " .. res.status .. " with a body that is not JSON." }
    log.warn("graph_call_unreadable", { method = method, path = path, status = res.status, ms = ms })
    return nil, err, true, res.headers
  end
  local err, may_have_acted = graph_errors.from_response(res)
  log.info("graph_call_error", { method = method, path = path, status = res.status, class = err.code,
    platformCode = err.platform_code, ms = ms })
  pause.observe(token, err, nil, app_usage)
  return nil, err, may_have_acted, res.headers
end

-- Graph times ("2025-03-22T18:20:04+0000", also "Z" or "+00:00") as Unix seconds.
function M.parse_time(s)
  if type(s) ~= "string" then return nil end
  local y, mo, d, h, mi, sec, rest = s:match("^(%d%d%d%d)-(%d%d)-(%d%d)T(%d%d):(%d%d):(%d%d)%.?%d*(.*)$")
  if not y then return nil end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  -- days from civil (Howard Hinnant), so no local time zone gets in the way
  if mo <= 2 then y = y - 1 end
  local era = y // 400
  local yoe = y - era * 400
  local doy = (153 * (mo + (mo > 2 and -3 or 9)) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  local days = era * 146097 + doe - 719468
  local t = days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(sec)
  local sign, oh, om = rest:match("^([+-])(%d%d):?(%d%d)$")
  if sign then
    local offset = tonumber(oh) * 3600 + tonumber(om) * 60
    t = sign == "+" and t - offset or t + offset
  elseif rest ~= "" and rest ~= "Z" then
    return nil
  end
  return t
end


-- How much earlier than we think Meta may date what we made (clocks differ).
local CLOCK_SLACK = 60

-- Looks through a listing (newest first, e.g. "{page}/published_posts") for
-- the item whose `text_field` is exactly `text` (both trimmed; absent is "")
-- and whose `time_field` is at or after `since` (less a minute of clock
-- slack). opts: fields, text_field, time_field, text, since, pages (most pages
-- to read, default 4), params (more query parameters), accept (a further test
-- an item must pass), oldest_first (the listing is in that order: read every
-- page rather than stop at the first older item). Returns the item, false
-- when there is none, or nil and the error when the platform could not tell.
function M.find_recent(path, token, opts)
  local since = (opts.since or 0) - CLOCK_SLACK
  local params = { fields = opts.fields, limit = 25 }
  for k, v in pairs(opts.params or {}) do params[k] = v end
  for _ = 1, opts.pages or 4 do
    local page, err = M.call("GET", path, params, token)
    if not page then return nil, err end
    local older_seen = false
    for _, item in ipairs(type(page.data) == "table" and page.data or {}) do
      local t = M.parse_time(item[opts.time_field])
      if t and t < since then
        older_seen = not opts.oldest_first
      elseif trim(tostring(item[opts.text_field] or "")) == trim(tostring(opts.text or "")) and (not opts.accept or opts.accept(item)) then
        return item
      end
    end
    local after = type(page.paging) == "table" and page.paging.next and page.paging.cursors
      and page.paging.cursors.after
    if older_seen or not after then return false end
    params.after = after
  end
  return false
end

-- An object's permalink, best effort: nil when Meta does not give it.
function M.permalink(id, field, token)
  if not id then return nil end
  local value = M.call("GET", id, { fields = field }, token)
  return value and value[field] or nil
end

-- Outcomes (docs/publishing.md).
function M.not_found()
  return { status = "not_found" }
end

function M.published(id, permalink_url)
  return { status = "published", platform_post_id = id and tostring(id) or nil, permalink_url = permalink_url }
end

function M.error(class, message)
  return { status = "error", error = { code = class, message = message } }
end

-- The outcome of a failed call that asked Meta to create something.
function M.failed(err, sent)
  if sent then
    return { status = "unknown", error = { code = "platform_unavailable", message = err.message,
      platform_code = err.platform_code, platform = err.platform } }
  end
  return { status = "error", error = err }
end

-- Comments (docs/comments.md) ----------------------------------------------

-- A moderation outcome: done; for a reply, with the new comment's id and
-- the comment it went under.
function M.done(platform_comment_id, parent_platform_comment_id)
  return { status = "done", platform_comment_id = platform_comment_id and tostring(platform_comment_id) or nil,
    parent_platform_comment_id = parent_platform_comment_id }
end

-- A hide, unhide or delete asks for a state, so sending it twice does no
-- harm: a lost answer is a retryable error, never an unknown outcome.
function M.settled(value, err)
  if value then return M.done() end
  return { status = "error", error = err }
end

-- DELETE of a comment (both platforms). One Meta no longer has is as
-- deleted as we wanted it (a retry after a lost answer, or someone was
-- quicker).
function M.delete_comment(ctx)
  local value, err = M.call("DELETE", ctx.comment.platform_comment_id, {}, ctx.account.access_token)
  if not value and err.platform_code == "100/33" then return M.done() end
  return M.settled(value, err)
end

-- Hides or shows a comment; `param` is the platform's name for it
-- (Facebook is_hidden, Instagram hide).
function M.set_comment_hidden(ctx, param, hidden)
  return M.settled(M.call("POST", ctx.comment.platform_comment_id,
    { [param] = hidden and "true" or "false" }, ctx.account.access_token))
end

-- Meta's usage in percent, split by whom it limits: the app as a whole
-- (X-App-Usage: stop everything) or this account (X-Page-Usage and
-- X-Business-Use-Case-Usage: leave this account alone for a while).
function M.usage(headers)
  local app, account = {}, {}
  for name, value in pairs(headers or {}) do
    name = type(name) == "string" and name:lower() or ""
    if name == "x-app-usage" then app[name] = value
    elseif name == "x-page-usage" or name == "x-business-use-case-usage" then account[name] = value end
  end
  return { app = graph_errors.usage_pressure(app), account = graph_errors.usage_pressure(account) }
end

-- The higher of two usages (a sync makes several calls per page).
function M.max_usage(a, b)
  if not a then return b end
  if not b then return a end
  return { app = math.max(a.app, b.app), account = math.max(a.account, b.account) }
end

-- An observation for comments.apply of a comment an adapter fetched for
-- ctx (account, target.platform_post_id, version, rank); fields: the comment's own.
function M.observation(ctx, fields)
  local o = { social_account_id = ctx.account.id, platform = ctx.account.platform,
    platform_post_id = ctx.target.platform_post_id, version = ctx.version, rank = ctx.rank }
  for k, v in pairs(fields) do o[k] = v end
  o.platform_comment_id = tostring(o.platform_comment_id)
  return o
end

-- The next-page cursor of a Graph listing, or nil on the last page.
function M.next_cursor(page)
  local paging = type(page) == "table" and type(page.paging) == "table" and page.paging
  return paging and paging.next and type(paging.cursors) == "table" and paging.cursors.after or nil
end

return M

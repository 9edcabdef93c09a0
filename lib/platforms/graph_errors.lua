-- What a Graph API error means for a post: the rules that turn Meta's error
-- (HTTP status, code, error_subcode, is_transient, usage headers) into one of
-- sgw's error classes (docs/publishing.md):
--
--   { code = "<class>", message = "...", platform_code = "190/463" or nil,
--     retry_after = seconds or nil,
--     throttle = "app" | "token" or nil,    -- Meta holds back these calls
--     platform = { code, subcode, fbtrace_id, user_message } or nil }
--
-- `platform` is Meta's own detail, kept for the client (M.public_detail);
-- nil when the error did not come from a Graph error body.
--
-- Retryable: rate_limited, platform_unavailable. Final: token_expired,
-- permission_missing, media_rejected, content_rejected, duplicate_content,
-- invalid_request.
local json = require "json"

local jobs = require "jobs"

local M = {}

-- Seconds to wait on a rate limit when Meta does not say how long.
M.DEFAULT_RETRY_AFTER = 60
-- Instagram's publishing quota is per rolling 24 hours: no use asking soon.
M.QUOTA_RETRY_AFTER = 3600

-- First match wins. A rule matches when every field it names matches:
-- codes (a list), code_range ({from, to}), subcodes (a list), transient.
M.RULES = {
  -- Instagram suspects spam (code 4 is otherwise the app's rate limit): no
  -- use trying again; the adapter first asks whether the post went out anyway.
  { class = "content_rejected", codes = { 4 }, subcodes = { 2207051 } },
  -- Throttles: `throttle` says whose calls Meta holds back, the app's or
  -- those made with this token (platforms.graph_pause stops making them).
  { class = "rate_limited", codes = { 4 }, throttle = "app" },          -- app
  { class = "rate_limited", codes = { 17, 32, 341, 613 }, throttle = "token" }, -- user, page, app/feed, custom
  { class = "rate_limited", code_range = { 80001, 80009 }, throttle = "token" }, -- business use case (pages, instagram, ...)
  { class = "rate_limited", codes = { 9 }, subcodes = { 2207042 },     -- Instagram daily publishing quota
    retry_after = M.QUOTA_RETRY_AFTER },
  { class = "token_expired", codes = { 190, 102 } },                   -- 458, 459, 460, 463, 464, 467, 492
  { class = "platform_unavailable", codes = { 24 }, subcodes = { 2207008 } }, -- publishing: try again shortly
  { class = "media_rejected", subcodes = { 2207020 } },                -- expired (the adapter makes a new container)
  { class = "platform_unavailable", codes = { 1, 2 } },                -- unknown error, service down
  { class = "platform_unavailable", codes = { -1, -2 } },              -- Instagram 2207001, 2207003
  { class = "platform_unavailable", transient = true },
  { class = "platform_unavailable", codes = { 9007 }, subcodes = { 2207027 } }, -- container not ready yet
  { class = "permission_missing", codes = { 10 } },
  { class = "permission_missing", code_range = { 200, 299 } },
  { class = "media_rejected", codes = { 324, 36000, 36001, 36003, 9004 } },
  { class = "media_rejected", subcodes = { 1366046, 2207004, 2207005, 2207009, 2207052 } },
  { class = "content_rejected", codes = { 368, 36004 } },              -- policy block; caption limits
  { class = "content_rejected", subcodes = { 2207010 } },
  { class = "duplicate_content", codes = { 506 } },
  { class = "invalid_request", codes = { 100 }, subcodes = { 33 } },   -- object missing or not ours
  { class = "content_rejected", codes = { 100 } },                     -- any other invalid parameter
}

local RETRYABLE = { rate_limited = true, platform_unavailable = true }

function M.retryable(class)
  return RETRYABLE[class] == true
end

local function member(list, value)
  for _, v in ipairs(list) do
    if v == value then return true end
  end
  return false
end

local function matches(rule, e)
  if rule.codes and not member(rule.codes, e.code) then return false end
  if rule.code_range and not (e.code and e.code >= rule.code_range[1] and e.code <= rule.code_range[2]) then
    return false
  end
  if rule.subcodes and not member(rule.subcodes, e.error_subcode) then return false end
  if rule.transient and e.is_transient ~= true then return false end
  return true
end

local function rule_for(e)
  for _, rule in ipairs(M.RULES) do
    if matches(rule, e) then return rule end
  end
end

-- Headers arrive with lower-case names from the host; unit specs may not care.
local function header(headers, name)
  if not headers then return nil end
  if headers[name] then return headers[name] end
  for k, v in pairs(headers) do
    if type(k) == "string" and k:lower() == name then return v end
  end
end

local USAGE_METRICS = { "call_count", "total_cputime", "total_time" }

local function max_usage(entry, current)
  if type(entry) ~= "table" then return current end
  for _, metric in ipairs(USAGE_METRICS) do
    local v = tonumber(entry[metric])
    if v and v > current then current = v end
  end
  return current
end

-- The business use case entries: {"<id>": [{type, call_count, ..., estimated_time_to_regain_access}]}.
local function buc_entries(headers)
  local entries = {}
  local decoded = json.decode(header(headers, "x-business-use-case-usage") or "")
  if type(decoded) ~= "table" then return entries end
  for _, list in pairs(decoded) do
    if type(list) == "table" then
      for _, entry in ipairs(list) do entries[#entries + 1] = entry end
    end
  end
  return entries
end

-- The app's usage percent from X-App-Usage (the highest of its metrics; 0
-- when absent). At 100 Meta starts refusing the app's calls (code 4).
function M.app_usage(headers)
  return max_usage(json.decode(header(headers, "x-app-usage") or ""), 0)
end

-- The highest usage percent any usage header reports (0 when none does):
-- X-App-Usage (app_usage, when the caller has read it already) and
-- X-Page-Usage ({"call_count":28,...}) and every entry of
-- X-Business-Use-Case-Usage. Meta throttles from 100.
function M.usage_pressure(headers, app_usage)
  local pressure = max_usage(json.decode(header(headers, "x-page-usage") or ""), app_usage or M.app_usage(headers))
  for _, entry in ipairs(buc_entries(headers)) do
    pressure = max_usage(entry, pressure)
  end
  return pressure
end

-- Seconds until Meta lets us call again, from X-Business-Use-Case-Usage
-- (estimated_time_to_regain_access, in minutes, the longest of all entries),
-- else Retry-After; nil when neither says.
function M.regain_access_seconds(headers)
  local minutes = 0
  for _, entry in ipairs(buc_entries(headers)) do
    local m = type(entry) == "table" and tonumber(entry.estimated_time_to_regain_access)
    if m and m > minutes then minutes = m end
  end
  if minutes > 0 then return minutes * 60 end
  return M.retry_after_seconds(headers)
end

-- Seconds of a Retry-After header (in seconds), or nil.
function M.retry_after_seconds(headers)
  local after = tonumber(header(headers, "retry-after") or "")
  if after and after > 0 then return after end
end

local function platform_code(e)
  if e.code == nil then return nil end
  if e.error_subcode ~= nil then return e.code .. "/" .. e.error_subcode end
  return tostring(e.code)
end

-- Messages go to clients and logs: short, and never with a token in them,
-- neither as a parameter nor quoted by Meta ("Malformed access token
-- EAAB..."): any run of 40 letters and digits is one (ids and words are
-- shorter; tokens are hundreds long).
local function short(s)
  s = tostring(s or ""):gsub("access_token=[^&%s\"]*", "access_token=[redacted]")
  s = s:gsub("%w+", function(run) if #run >= 40 then return "[redacted]" end end)
  if #s > 500 then s = s:sub(1, 500) .. "..." end
  return s
end

-- Errors Meta answers at times after the write it was asked for went
-- through: trouble on its side (HTTP 5xx, an unknown error or a service
-- outage, Instagram's internal errors, a transient error) that is no
-- throttle. After one of these, a call that creates something has an
-- unknown outcome, to be resolved before it is tried again, or a retry could
-- publish twice. A throttle (which Meta marks is_transient as well), a
-- refused token or a refused request did nothing.
local MAY_HAVE_ACTED = { [1] = true, [2] = true, [-1] = true, [-2] = true }

-- JSON numbers may decode as floats (400.0): codes are integers.
local function integer(v)
  v = tonumber(v)
  return v and (math.tointeger(v) or v)
end

-- From a Graph error object ({message, code, error_subcode, is_transient, ...}),
-- the HTTP status and the response headers: the error, and whether Meta may
-- have done what was asked all the same (MAY_HAVE_ACTED above).
function M.classify(graph_error, status, headers)
  local g = type(graph_error) == "table" and graph_error or {}
  local e = { code = integer(g.code), error_subcode = integer(g.error_subcode), is_transient = g.is_transient }
  local rule = rule_for(e)
  local class = rule and rule.class
  if not class then
    class = (status or 0) >= 500 and "platform_unavailable" or "invalid_request"
  end
  local out = {
    code = class,
    message = short(g.message or g.error_user_msg or ("Graph API answered HTTP " .. tostring(status))),
    platform_code = platform_code(e),
    platform = { code = e.code, subcode = e.error_subcode,
      fbtrace_id = type(g.fbtrace_id) == "string" and g.fbtrace_id or nil,
      user_message = type(g.error_user_msg) == "string" and short(g.error_user_msg) or nil },
  }
  if class == "rate_limited" then
    out.throttle = rule and rule.throttle
    -- The business use case header speaks for the calling account's
    -- business, not for the app's own limit (code 4): that one waits only as
    -- long as Retry-After says, if it says.
    local wait
    if out.throttle == "app" then wait = M.retry_after_seconds(headers) else wait = M.regain_access_seconds(headers) end
    out.retry_after = wait or (rule and rule.retry_after) or M.DEFAULT_RETRY_AFTER
  end
  -- Throttles come marked is_transient too, but say that nothing was done.
  return out, class == "platform_unavailable"
    and ((status or 0) >= 500 or MAY_HAVE_ACTED[e.code] == true or e.is_transient == true)
end

-- From an HTTP response {status, headers, body} that is not a success: the
-- error, and whether Meta may have done what was asked (as classify).
function M.from_response(res)
  local decoded = json.decode(res.body or "")
  if type(decoded) == "table" and type(decoded.error) == "table" then
    return M.classify(decoded.error, res.status, res.headers)
  end
  -- No Graph error body: a proxy, an overloaded front end, a throttle.
  local class = "invalid_request"
  if res.status == 429 then
    class = "rate_limited"
  elseif (res.status or 0) >= 500 or (res.status or 0) < 400 then
    class = "platform_unavailable"
  end
  local out = { code = class, message = "Graph API answered HTTP " .. tostring(res.status) .. " without an error body." }
  if class == "rate_limited" then
    out.retry_after = M.regain_access_seconds(res.headers) or M.DEFAULT_RETRY_AFTER
    out.throttle = "token"
  end
  return out, (res.status or 0) >= 500
end

-- From a failed http.request (message, kind): nothing usable came back.
function M.from_failure(message, kind)
  if kind == "lease" then
    -- The host sent nothing: the job's lease was not confirmed lately (the
    -- database?), and another instance could take the job during the call.
    -- As in a pause, no call was made and no attempt is spent; `lease` says
    -- that no other call of this run would go out either.
    return { code = "platform_unavailable", paused = true, lease = true, retry_after = jobs.LEASE_RETRY_SECONDS,
      message = "No call made to the Graph API (" .. short(message) .. ")." }
  end
  local what = kind == "timeout" and "Graph API did not answer in time" or "Could not reach the Graph API"
  return { code = "platform_unavailable", message = what .. " (" .. short(message) .. ")." }
end

-- Meta's detail of a classified error as clients see it (error.platform):
-- {code, subcode, fbtraceId, userMessage} with nulls where Meta said
-- nothing, or null for an error that did not come from Meta.
function M.public_detail(err)
  local p = type(err) == "table" and err.platform
  if type(p) ~= "table" then return json.null end
  local function or_null(v) if v == nil then return json.null end return v end
  return { code = or_null(p.code), subcode = or_null(p.subcode), fbtraceId = or_null(p.fbtrace_id),
    userMessage = or_null(p.user_message) }
end

return M

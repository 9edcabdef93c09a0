-- RFC 9457 problem documents: one shape for every error the API gives.
local json = require "json"
local json_shapes = require "json_shapes"

local M = {}

local titles = {
  invalid_json = "Malformed JSON",
  invalid_parameter = "Invalid parameter",
  invalid_cursor = "Invalid cursor",
  idempotency_key_required = "Idempotency-Key required",
  unauthenticated = "Authentication required",
  insufficient_scope = "Insufficient scope",
  sandbox_only = "Sandbox only",
  not_found = "Not found",
  method_not_allowed = "Method not allowed",
  post_not_cancellable = "Post not cancellable",
  nothing_to_retry = "Nothing to retry",
  idempotency_key_in_use = "Idempotency-Key in use",
  comment_deleted = "Comment deleted",
  limit_reached = "Limit reached",
  payload_too_large = "Payload too large",
  request_header_fields_too_large = "Request headers too large",
  unsupported_media_type = "Unsupported media type",
  validation_failed = "Validation failed",
  invalid_image = "Invalid image",
  cannot_hide_own_comment = "Cannot hide own comment",
  invalid_signed_request = "Invalid signed request",
  idempotency_key_reused = "Idempotency-Key reused",
  rate_limited = "Too many requests",
  internal_error = "Internal error",
  service_unavailable = "Service unavailable",
}

M.titles = titles

-- Builds the problem table. opts: errors (array of {field, code, message}),
-- title (overrides the code's title).
function M.new(status, code, detail, opts)
  opts = opts or {}
  local p = {
    type = "/docs/errors#" .. code,
    title = opts.title or titles[code] or code,
    status = status,
    detail = detail,
    code = code,
    requestId = opts.request_id,
  }
  if opts.errors then p.errors = json.array(opts.errors) end
  return p
end

-- Raised by handlers and libraries to stop with a problem response:
-- error(problem.raise(...)) is caught by the dispatcher.
local Problem = {}
Problem.__index = Problem
Problem.__tostring = function(p) return "problem " .. p.status .. " " .. p.code end

function M.raise(status, code, detail, opts)
  local p = setmetatable({ status = status, code = code, detail = detail, opts = opts or {} }, Problem)
  error(p, 0)
end

function M.is_problem(v)
  return getmetatable(v) == Problem
end

-- True when an error (a message, or a traceback that starts with one) says
-- the database could not serve: the db binding words every outage "database
-- unavailable: ..." and every statement it gave up for the moment (its time
-- limit, a deadlock) "database busy: ...", also through assert().
function M.is_outage(err)
  return type(err) == "string" and (err:find("database unavailable", 1, true) ~= nil
    or err:find("database busy", 1, true) ~= nil)
end

-- Seconds a client waits before it tries again after a dependency outage.
M.OUTAGE_RETRY_AFTER = 2

-- The answer to a dependency outage: 503 with Retry-After, never a 500 or a
-- refusal of the credential (nothing was decided).
function M.unavailable(req, detail)
  return M.response(req, 503, "service_unavailable",
    detail or "A service the gateway depends on is unavailable. Retry after the time in Retry-After "
      .. "(with the same Idempotency-Key, if you sent one).",
    { headers = { ["Retry-After"] = tostring(M.OUTAGE_RETRY_AFTER) } })
end

-- status, body, headers for a problem, ready for the dispatcher.
function M.response(req, status, code, detail, opts)
  opts = opts or {}
  opts.request_id = req and req.id
  local headers = { ["Content-Type"] = "application/problem+json" }
  if opts.headers then
    for k, v in pairs(opts.headers) do headers[k] = v end
  end
  return status, json.encode(M.new(status, code, detail, opts), json_shapes.schema("Problem")), headers
end

return M

-- The way of every request through the gateway: early refusals decided by
-- the host, body rules, then the route's handler; every outcome becomes a
-- response with the same headers, errors included.
local json = require "json"
local problem = require "problem"
local routes = require "handlers.routes"

local M = {}

local handlers = {}

local function handler_for(route)
  local h = handlers[route.handler]
  if not h then
    h = require("handlers." .. route.handler:gsub("/", "."))
    if type(h) ~= "function" then
      error("handler " .. route.handler .. " does not return a function", 0)
    end
    handlers[route.handler] = h
  end
  return h
end

local early = {
  [404] = { "not_found", function() return "No resource at this path." end },
  [405] = { "method_not_allowed", function(req) return req.method .. " is not allowed here; allowed: " .. (req.allow or "") .. "." end },
  [413] = { "payload_too_large", function() return "The request body is larger than this endpoint accepts." end },
  [431] = { "request_header_fields_too_large", function() return "The request line and headers are too large." end },
}

local function is_json_type(ct)
  if not ct then return false end
  local media = ct:match("^%s*([^;%s]+)")
  media = media and media:lower()
  return media == "application/json" or (media ~= nil and media:match("^application/[%w.+-]+%+json$") ~= nil)
end

-- Turns a handler's (status, body, headers) into what the host sends.
local function finish(status, body, headers)
  headers = headers or {}
  if type(body) == "table" then
    body = json.encode(body)
    if not headers["Content-Type"] then headers["Content-Type"] = "application/json" end
  elseif body == nil then
    body = ""
  end
  return status, headers, body
end

local function with_traceback(err)
  if problem.is_problem(err) then return err end
  return traceback and traceback(tostring(err)) or tostring(err)
end

local function run(req)
  if req.early_status then
    local e = early[req.early_status]
    local headers = req.early_status == 405 and { Allow = req.allow } or nil
    return problem.response(req, req.early_status, e[1], e[2](req), { headers = headers })
  end
  local route = routes[req.route_index]
  local body = req.body
  if body and #body > 0 and not route.raw_body then
    if not is_json_type(req.headers["content-type"]) then
      return problem.response(req, 415, "unsupported_media_type",
        "Send the body as application/json (Content-Type: application/json).")
    end
    local value, err = json.decode(body)
    if value == nil then
      return problem.response(req, 400, "invalid_json", "The body is not valid JSON: " .. tostring(err) .. ".")
    end
    req.json = value
  end
  local ctx = { route = route }
  local ok, status, out, headers = xpcall(handler_for(route), with_traceback, req, ctx)
  if ok then return status, out, headers end
  if problem.is_problem(status) then
    local p = status
    return problem.response(req, p.status, p.code, p.detail, p.opts)
  end
  log.error("handler_error", { requestId = req.id, route = route.path, error = tostring(status) })
  return problem.response(req, 500, "internal_error",
    "The request could not be completed; it was logged under its requestId.")
end

function M.handle(req)
  local status, body, headers = run(req)
  local s, h, b = finish(status, body, headers)
  return s, h, b, req.client_id
end

return M

-- The way of every request through the gateway: who is asking, the rate
-- limit, refusals the host already decided, the route's credential and scope,
-- body rules, then the handler (behind Idempotency-Key where the route asks
-- for it). Every outcome leaves with the same headers, errors included.
local json = require "json"
local json_shapes = require "json_shapes"
local problem = require "problem"
local routes = require "handlers.routes"
local auth = require "auth"
local credentials = require "credentials"
local ratelimit = require "ratelimit"
local idempotency = require "idempotency"
local fields = require "fields"
local oauth_client = require "oauth_client"
local client_address = require "client_address"

local M = {}

local handlers = {}

-- A handler module returns its function, or {prepare = fn, handle = fn} when part of
-- its work must run outside the transaction an Idempotency-Key puts handle in (a
-- network call): prepare(req, ctx) runs first, after the key is claimed.
local function handler_for(route)
  local h = handlers[route.handler]
  if not h then
    h = require("handlers." .. route.handler:gsub("/", "."))
    if type(h) == "function" then h = { handle = h } end
    if type(h) ~= "table" or type(h.handle) ~= "function" then
      error("handler " .. route.handler .. " returns neither a function nor {handle = function}", 0)
    end
    handlers[route.handler] = h
  end
  return h.handle, h.prepare
end

-- Refusals the host decided, some before reading the body: a route that
-- needs a credential and was sent none of the right shape (the host checks
-- the shape of lib/auth.lua and lib/credentials.lua), and a body that would
-- pass http.max_inflight_body_bytes or its address's share of it.
local early = {
  [401] = { "unauthenticated", function() return auth.REFUSAL end, { ["WWW-Authenticate"] = "Bearer" } },
  [503] = { "service_unavailable", function()
    return "The gateway is receiving too many request bodies at once; retry shortly."
  end, { ["Retry-After"] = "1" } },
  [404] = { "not_found", function() return "No resource at this path." end },
  [405] = { "method_not_allowed", function(req) return req.method .. " is not allowed here; allowed: " .. (req.allow or "") .. "." end },
  [413] = { "payload_too_large", function() return "The request body is larger than this endpoint accepts." end },
  [431] = { "request_header_fields_too_large", function() return "The request line and headers are too large." end },
}

local function judge_json_type(ct)
  local media = ct:match("^%s*([^;%s]+)")
  media = media and media:lower()
  return media == "application/json" or (media ~= nil and media:match("^application/[%w.+-]+%+json$") ~= nil)
end

-- Clients send the same few Content-Type values over and over: the verdicts
-- are remembered, a bounded number of them.
local json_type_verdicts, remembered = {}, 0

local function is_json_type(ct)
  if not ct then return false end
  local verdict = json_type_verdicts[ct]
  if verdict == nil then
    verdict = judge_json_type(ct)
    if remembered >= 64 then json_type_verdicts, remembered = {}, 0 end
    json_type_verdicts[ct], remembered = verdict, remembered + 1
  end
  return verdict
end

local function with_traceback(err)
  if problem.is_problem(err) then return err end
  return traceback and traceback(tostring(err)) or tostring(err)
end

local function unauthenticated(req, detail)
  return problem.response(req, 401, "unauthenticated", detail or auth.REFUSAL,
    { headers = { ["WWW-Authenticate"] = "Bearer" } })
end

-- Who is asking and how much they may still ask. Identification is skipped
-- on routes that authenticate themselves (auth = false), which are then
-- limited per address like any anonymous request.
local function identify_and_limit(req, route)
  local ident, refusal, cached
  if not route or route.auth ~= false then
    ident, refusal, cached = auth.identify(req, true)
  end
  local key, limit
  -- Token requests count on the client they name, so junk from the same
  -- address does not spend a real client's allowance; those naming none
  -- count on their address like any anonymous request.
  local client_id = route and route.rate_limit_by == "client_id" and oauth_client.rate_id(req)
  if ident then
    key, limit = ident.rate_key, ident.rate_limit
  elseif client_id then
    key, limit = "oauth:" .. client_id, config.get(route.rate_limit)
  elseif route and type(route.rate_limit) == "string" and not route.rate_limit_by then
    -- A public route with a per-address limit of its own, counted apart.
    key, limit = route.rate_limit .. ":" .. (client_address.group(req.remote_addr) or "?"), config.get(route.rate_limit)
  else
    key, limit = "addr:" .. (client_address.group(req.remote_addr) or "?"), config.get("api.rate_limit.anonymous_per_minute")
  end
  local rl = ratelimit.check(key, limit, credentials.EPOCH_NAME)
  if credentials.observe_epoch(rl.epoch, cached) and cached then
    -- Credentials changed somewhere (rotation, revocation) since they were
    -- cached, or Redis cannot say: ask PostgreSQL.
    ident, refusal = auth.identify(req, rl.epoch ~= nil)
  end
  return ident, refusal, rl
end

local UNLIMITED = { allowed = true }

local function run(req, ctx)
  local route = req.route_index and routes[req.route_index]
  ctx.route = route
  local ident, refusal, rl
  if route and route.rate_limit == false and route.auth == false then
    rl = UNLIMITED -- benchmark routes only: they measure the host, not Redis
  else
    ident, refusal, rl = identify_and_limit(req, route)
    ctx.headers = ratelimit.headers(rl)
  end
  if not rl.allowed then
    return problem.response(req, 429, "rate_limited",
      "Too many requests; retry after " .. rl.retry_after .. " s.")
  end
  if req.early_status then
    local e = early[req.early_status]
    local headers = req.early_status == 405 and { Allow = req.allow } or e[3]
    return problem.response(req, req.early_status, e[1], e[2](req), { headers = headers })
  end

  if route.auth ~= false then
    if not ident then return unauthenticated(req, refusal) end
    if route.scope and not ident.scopes[route.scope] then
      return problem.response(req, 403, "insufficient_scope",
        "This endpoint needs the scope " .. route.scope .. ".",
        { headers = { ["WWW-Authenticate"] = 'Bearer error="insufficient_scope", scope="' .. route.scope .. '"' } })
    end
    if route.sandbox_only and ident.environment ~= "test" then
      return problem.response(req, 403, "sandbox_only", "Sandbox tools need a test credential (sgk_test_...).")
    end
    ctx.client = ident
    req.client_id = ident.client_id
    credentials.touch(ident)
  end

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
    -- The company comes only from the credential. A route whose handler
    -- checks the whole body reports companyId with every other problem.
    if not route.validates_body and fields.has_company_id(value) then
      local forbidden = {}
      fields.company_fields(value, "", function(field, code, message)
        forbidden[#forbidden + 1] = { field = field, code = code, message = message }
      end)
      return problem.response(req, 422, "validation_failed", "The request has invalid fields.", { errors = forbidden })
    end
    req.json = value
  end

  local handler, prepare = handler_for(route)
  if route.idempotency then
    return idempotency.wrap(req, ctx, function() return handler(req, ctx) end,
      prepare and function() return prepare(req, ctx) end)
  end
  if prepare then prepare(req, ctx) end
  return handler(req, ctx)
end

-- Every JSON answer without headers of its own shares this table (the host
-- only reads it).
local JSON_HEADERS = { ["Content-Type"] = "application/json" }

-- Turns a handler's (status, body, headers) into what the host sends. The
-- headers every response carries (ctx.headers) travel apart: the host adds
-- those the handler did not set itself. A body's keys come in the order the
-- OpenAPI document gives for the route and status.
local function finish(status, body, headers, route)
  if type(body) == "table" then
    body = json.encode(body, json_shapes.response(route, status))
    if not headers then
      headers = JSON_HEADERS
    elseif not headers["Content-Type"] then
      headers["Content-Type"] = "application/json"
    end
  elseif body == nil then
    body = ""
  end
  return status, headers, body
end

function M.handle(req)
  local ctx = {}
  local ok, status, body, headers = xpcall(run, with_traceback, req, ctx)
  if not ok then
    if problem.is_problem(status) then
      local p = status
      status, body, headers = problem.response(req, p.status, p.code, p.detail, p.opts)
    elseif problem.is_outage(status) then
      log.warn("dependency_unavailable", { requestId = req.id, route = ctx.route and ctx.route.path,
        error = tostring(status):match("[^\n]*") })
      status, body, headers = problem.unavailable(req)
    else
      log.error("handler_error", { requestId = req.id, route = ctx.route and ctx.route.path, error = tostring(status) })
      status, body, headers = problem.response(req, 500, "internal_error",
        "The request could not be completed; it was logged under its requestId.")
    end
  end
  local s, h, b = finish(status, body, headers, ctx.route)
  return s, h, b, req.client_id, ctx.headers
end

return M

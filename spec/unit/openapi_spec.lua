-- The OpenAPI document grows with every endpoint: each route of
-- handlers/routes.lua (benchmark routes aside) is documented, with the scope
-- the route requires, the security it has and every error the dispatcher
-- (lib/dispatch.lua) can answer before the handler runs; no component is
-- unused and every $ref resolves. The answers themselves are checked against
-- it by every integration spec (spec/support/openapi_check.py), and the
-- document against the OpenAPI 3.1 schema by tools/openapi/check.
local fake = require "fake_host"
local cjson = require "cjson"

local function load_routes(bench)
  fake.install({ ["bench.enabled"] = bench })
  local chunk = assert(loadfile("handlers/routes.lua", "t", setmetatable({}, { __index = _G })))
  return chunk()
end

local METHODS = { get = true, put = true, post = true, delete = true, patch = true, head = true, options = true }

describe("the OpenAPI document", function()
  local f = assert(io.open("lib/openapi.json"))
  local doc = cjson.decode(f:read("a"))
  f:close()

  -- The workspace is web pages for people, not API.
  local function api(r) return not r.path:match("^/workspace") end

  local function operations()
    local list = {}
    for path, item in pairs(doc.paths) do
      for method, op in pairs(item) do
        if METHODS[method] then list[#list + 1] = { path = path, method = method, op = op } end
      end
    end
    table.sort(list, function(a, b) return a.path .. a.method < b.path .. b.method end)
    return list
  end

  local function each_route(fn)
    for _, r in ipairs(load_routes(false)) do
      if api(r) then
        local op = doc.paths[r.path] and doc.paths[r.path][r.method:lower()]
        assert.is_table(op, r.method .. " " .. r.path .. " is missing from lib/openapi.json")
        fn(r, op, r.method .. " " .. r.path)
      end
    end
  end

  -- Every $ref in the document, with where it is.
  local function refs()
    local found = {}
    local function walk(node, where)
      if type(node) ~= "table" then return end
      for k, v in pairs(node) do
        if k == "$ref" then
          found[#found + 1] = { ref = v, where = where }
        else
          walk(v, where .. "/" .. tostring(k))
        end
      end
    end
    walk(doc, "")
    return found
  end

  it("is OpenAPI 3.1", function()
    assert.are.equal("3.1.0", doc.openapi)
  end)

  it("documents every route with its scope", function()
    each_route(function(r, op, name)
      if r.scope then
        assert.are.equal(r.scope, op["x-required-scope"], name .. " scope")
      end
    end)
  end)

  it("documents no path that has no route", function()
    local known = {}
    for _, r in ipairs(load_routes(false)) do
      if api(r) then known[r.method:lower() .. " " .. r.path] = true end
    end
    for _, o in ipairs(operations()) do
      assert.is_true(known[o.method .. " " .. o.path] or false, o.method .. " " .. o.path .. " has no route")
    end
  end)

  it("gives every operation a unique operationId and a summary", function()
    local seen = {}
    for _, o in ipairs(operations()) do
      local name = o.method:upper() .. " " .. o.path
      assert.is_string(o.op.operationId, name .. " has no operationId")
      assert.matches("^[a-z][A-Za-z0-9]*$", o.op.operationId, nil, false, name .. " operationId")
      assert.is_nil(seen[o.op.operationId], name .. " repeats the operationId of " .. tostring(seen[o.op.operationId]))
      seen[o.op.operationId] = name
      assert.is_true(type(o.op.summary) == "string" and #o.op.summary > 0, name .. " has no summary")
    end
  end)

  it("gives every operation the security its route has", function()
    each_route(function(r, op, name)
      if r.auth == false then
        -- The route authenticates itself (a signature, a form) or is public.
        assert.are.same({}, op.security, name .. " must say security: [] (no credential)")
        return
      end
      -- Without its own security the operation inherits the document's.
      local security = op.security or doc.security
      local schemes = {}
      for _, requirement in ipairs(security) do
        for scheme, scopes in pairs(requirement) do schemes[scheme] = scopes end
      end
      assert.is_table(schemes.apiKey, name .. " accepts an API key")
      assert.is_table(schemes.bearer, name .. " accepts a bearer token")
      if r.scope then
        assert.are.same({ r.scope }, schemes.oauth2, name .. " oauth2 scope")
      end
    end)
  end)

  it("gives every operation the errors its route can answer", function()
    each_route(function(r, op, name)
      local responses = op.responses
      local function has(status, why)
        assert.is_table(responses[status], name .. " can answer " .. status .. " (" .. why .. ") but does not say so")
      end
      has("503", "a dependency is down, or too many bodies arrive at once")
      has("413", "a body over the route's limit")
      has("431", "request line and headers over the host's limit")
      if r.rate_limit ~= false then has("429", "rate limited") end
      if r.auth ~= false then
        has("401", "authenticated route")
        if r.scope or r.sandbox_only then has("403", "scope or sandbox credential needed") end
      end
      if not r.raw_body then
        has("400", "invalid_json: any body is read as JSON")
        has("415", "a body that is not application/json")
      end
      if r.idempotency then
        has("400", "a malformed Idempotency-Key")
        has("409", "idempotency_key_in_use")
        has("422", "idempotency_key_reused")
      end
      if r.path:find("{", 1, true) and r.auth ~= false then
        has("404", "a path parameter naming nothing of the company's")
      end
    end)
  end)

  it("resolves every $ref", function()
    for _, r in ipairs(refs()) do
      local node = doc
      assert.are.equal("#/", r.ref:sub(1, 2), r.where .. ": " .. r.ref .. " is not a local $ref")
      for part in r.ref:sub(3):gmatch("[^/]+") do
        part = part:gsub("~1", "/"):gsub("~0", "~")
        node = type(node) == "table" and node[part] or nil
      end
      assert.is_table(node, r.where .. ": $ref " .. r.ref .. " resolves to nothing")
    end
  end)

  it("has no unused component", function()
    local used = {}
    for _, r in ipairs(refs()) do used[r.ref] = true end
    local function note_security(list)
      for _, requirement in ipairs(list or {}) do
        for scheme in pairs(requirement) do used["#/components/securitySchemes/" .. scheme] = true end
      end
    end
    note_security(doc.security)
    for _, o in ipairs(operations()) do note_security(o.op.security) end
    for kind, components in pairs(doc.components) do
      for name in pairs(components) do
        local ref = "#/components/" .. kind .. "/" .. name
        assert.is_true(used[ref] or false, ref .. " is never used")
      end
    end
  end)
end)

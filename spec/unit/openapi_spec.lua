-- The OpenAPI document grows with every endpoint: each route of
-- handlers/routes.lua (benchmark routes aside) is documented, with the scope
-- the route requires.
local fake = require "fake_host"
local cjson = require "cjson"

local function load_routes(bench)
  fake.install({ ["bench.enabled"] = bench })
  local chunk = assert(loadfile("handlers/routes.lua", "t", setmetatable({}, { __index = _G })))
  return chunk()
end

describe("the OpenAPI document", function()
  local f = assert(io.open("lib/openapi.json"))
  local doc = cjson.decode(f:read("a"))
  f:close()

  it("is OpenAPI 3.1", function()
    assert.are.equal("3.1.0", doc.openapi)
  end)

  -- The workspace is web pages for people, not API.
  local function api(r) return not r.path:match("^/workspace") end

  it("documents every route with its scope", function()
    for _, r in ipairs(load_routes(false)) do
      if not api(r) then goto continue end
      local op = doc.paths[r.path] and doc.paths[r.path][r.method:lower()]
      assert.is_table(op, r.method .. " " .. r.path .. " is missing from lib/openapi.json")
      if r.scope then
        assert.are.equal(r.scope, op["x-required-scope"], r.method .. " " .. r.path .. " scope")
      end
      ::continue::
    end
  end)

  it("documents no path that has no route", function()
    local known = {}
    for _, r in ipairs(load_routes(false)) do
      if api(r) then known[r.method:lower() .. " " .. r.path] = true end
    end
    for path, ops in pairs(doc.paths) do
      for method in pairs(ops) do
        assert.is_true(known[method .. " " .. path] or false, method .. " " .. path .. " has no route")
      end
    end
  end)
end)

-- lib/fields.lua: small bodies checked against a field table, every problem
-- at once, companyId at any depth.
local cjson = require "cjson"
local fields = require "fields"

local SPEC = { name = { type = "string", required = true, max = 5 }, count = { type = "integer" } }

local function codes(errors)
  local out = {}
  for i, e in ipairs(errors) do out[i] = e.field .. " " .. e.code end
  return out
end

describe("fields.check", function()
  it("reports every problem at once, companyId included", function()
    assert.are.same({ "/companyId field_not_allowed", "/count invalid_value", "/extra unknown_field", "/name too_long" },
      codes(fields.check(cjson.decode('{"name":"too long","count":1.5,"extra":1,"companyId":"cmp_x"}'), SPEC)))
  end)

  it("finds companyId inside objects and arrays", function()
    local found = {}
    fields.company_fields(cjson.decode('{"a":[{"companyId":1},{"b":{"companyId":2}}]}'), "", function(field, code)
      found[#found + 1] = field .. " " .. code
    end)
    assert.are.same({ "/a/0/companyId field_not_allowed", "/a/1/b/companyId field_not_allowed" }, found)
  end)

  it("refuses a body that is not a JSON object as a whole", function()
    for _, raw in ipairs { "[1]", '["name"]', '"x"', "3" } do
      assert.are.same({ " invalid_value" }, codes(fields.check(cjson.decode(raw), SPEC)), raw)
    end
  end)

  it("checks an array's type and item count, leaving its items to the caller", function()
    local spec = { ids = { type = "array", required = true, min = 1, max = 2 } }
    for raw, want in pairs {
      ['{"ids":["a"]}'] = {}, ['{"ids":["a",2]}'] = {},
      ['{"ids":[]}'] = { "/ids invalid_value" }, ['{"ids":["a","b","c"]}'] = { "/ids invalid_value" },
      ['{"ids":{"a":1}}'] = { "/ids invalid_value" }, ['{"ids":"a"}'] = { "/ids invalid_value" },
      ['{}'] = { "/ids required" },
    } do
      assert.are.same(want, codes(fields.check(cjson.decode(raw), spec)), raw)
    end
  end)

  it("takes an empty body as an object with nothing in it", function()
    assert.are.same({ "/name required" }, codes(fields.check(cjson.decode("{}"), SPEC)))
  end)
end)

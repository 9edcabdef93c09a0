-- lib/json: empty arrays survive encoding, also nested and inside strings.
require("fake_host").install()
local json = require "json"
local cjson = require "cjson"

describe("json", function()
  it("encodes json.array of nothing as []", function()
    assert.are.equal("[]", json.encode(json.array({})))
    assert.are.equal("[]", json.encode(json.array(nil)))
    assert.are.equal('{"data":[]}', json.encode({ data = json.array({}) }))
    assert.are.same({ a = { 1, 2 } }, cjson.decode(json.encode({ a = json.array({ 1, 2 }) })))
  end)

  it("leaves ordinary strings alone", function()
    assert.are.equal('"sgw-empty-array"', json.encode("sgw-empty-array"))
    assert.are.equal('{"x":[[]]}', json.encode({ x = { json.array({}) } }))
  end)

  it("decodes or says why not", function()
    assert.are.same({ a = 1 }, json.decode('{"a":1}'))
    local v, err = json.decode("{")
    assert.is_nil(v)
    assert.is_string(err)
  end)
end)

-- Keys in a documented order, slashes unescaped (issue 15).
describe("json.encode with a shape", function()
  local shape = json.shape({ "id", "status", "inner", "list" }, {
    props = {
      inner = json.shape({ "b", "a" }),
      list = json.shape({}, { items = json.shape({ "z", "y" }) }),
    },
  })

  it("writes the keys the shape names in its order, nested and in arrays", function()
    assert.are.equal('{"id":"x","status":"ok","inner":{"b":2,"a":1},"list":[{"z":1,"y":2},{"z":3,"y":4}]}',
      json.encode({ list = { { y = 2, z = 1 }, { y = 4, z = 3 } }, inner = { a = 1, b = 2 }, status = "ok", id = "x" }, shape))
  end)

  it("puts keys the shape does not name after the named ones, sorted", function()
    assert.are.equal('{"id":1,"status":2,"alpha":4,"zeta":3}',
      json.encode({ zeta = 3, status = 2, id = 1, alpha = 4 }, shape))
  end)

  it("without a shape writes id first, then the keys sorted", function()
    assert.are.equal('{"id":1,"a":{"id":2,"b":3,"c":4},"z":true}',
      json.encode({ z = true, a = { c = 4, b = 3, id = 2 }, id = 1 }))
  end)

  it("chooses the variant that names most of the object's keys", function()
    local either = json.shape({}, { variants = { json.shape({ "x", "y" }), json.shape({ "c", "b", "a" }) } })
    assert.are.equal('{"c":3,"b":2,"a":1}', json.encode({ a = 1, b = 2, c = 3 }, either))
    assert.are.equal('{"x":1,"y":2,"a":0}', json.encode({ a = 0, y = 2, x = 1 }, either))
  end)

  it("writes maps (values of one shape under any key) sorted", function()
    local map = json.shape({}, { extra = json.shape({ "n", "m" }) })
    assert.are.equal('{"a":{"n":1,"m":2},"b":{"n":3,"m":4}}',
      json.encode({ b = { m = 4, n = 3 }, a = { m = 2, n = 1 } }, map))
  end)

  it("never escapes a slash, and keeps a backslash before one", function()
    assert.are.equal('{"url":"https://example.com/a/b"}', json.encode({ url = "https://example.com/a/b" }))
    assert.are.equal('"a\\\\/b"', json.encode("a\\/b"))
    assert.are.equal("a\\/b", cjson.decode(json.encode("a\\/b")))
    assert.are.equal('"\\\\\\\\/"', json.encode("\\\\/"))
    assert.are.equal('"</script>"', json.encode("</script>"))
  end)

  it("escapes what JSON needs and leaves UTF-8 as it is", function()
    assert.are.equal('"quote \\" back \\\\ nl \\n nul \\u0000 del \\u007f"', json.encode('quote " back \\ nl \n nul \0 del \127'))
    assert.are.equal('"é ü 🙂"', json.encode("é ü 🙂"))
    local tricky = { "a/b\\", "\\/\\/", "/\"/", "\1/\2" }
    assert.are.same(tricky, cjson.decode(json.encode(tricky)))
  end)

  it("spells numbers as before", function()
    for _, n in ipairs({ 0, 1, -7, 42, 0.1, 1.5e300, 2 ^ 53, 123456789012345, -0.0, 3.0 }) do
      assert.are.equal(cjson.encode(n), json.encode(n))
    end
    assert.has_error(function() json.encode(math.huge) end)
    assert.has_error(function() json.encode(0 / 0) end)
  end)

  it("keeps empty arrays, empty objects, null and booleans", function()
    assert.are.equal('{"a":[],"b":{},"c":null,"d":false,"e":[[]]}',
      json.encode({ a = json.array({}), b = {}, c = json.null, d = false, e = { json.array() } }, shape))
  end)

  it("refuses what cjson refused", function()
    assert.has_error(function() json.encode({ [1] = 1, [3] = 3 }) end)
    assert.has_error(function() json.encode({ f = print }) end)
    local loop = {}
    loop.self = loop
    assert.has_error(function() json.encode(loop) end)
  end)

  it("writes number keys of an object as text, like cjson", function()
    assert.are.equal('{"1":"a","x":"b"}', json.encode({ [1] = "a", x = "b" }))
  end)
end)

-- Row views: one definition of how a row shows, for present (Lua) and for a
-- page written from a database result (host/json.c; fake_host.result writes
-- what it does, in Lua).
describe("json row views", function()
  local fake_host = require "fake_host"
  local shape = json.shape({ "id", "name", "owner", "count" }, {
    props = { owner = json.shape({ "login", "since" }) } })
  local fields = {
    zeta = "z", id = "id", count = { "n", null = 0 }, name = { "name", null = "" },
    owner = { since = "since", login = { "login", null = "nobody" } }, flag = { "f", null = false },
  }

  it("writes the keys in encode's order with the shape, the rest sorted", function()
    assert.are.same({ '{"id":', "id", "null", ',"name":', "name", '""', ',"owner":{"login":', "login", '"nobody"',
      ',"since":', "since", "null", '},"count":', "n", "0", ',"flag":', "f", "false", ',"zeta":', "z", "null", "}" },
      json.row_view(shape, fields))
    local unshaped = json.row_view(nil, fields)
    assert.are.same({ '{"id":', ',"count":', ',"flag":' }, { unshaped[1], unshaped[4], unshaped[7] },
      "without a shape: id first, then sorted")
  end)

  it("shows a row the same way through present and through the view", function()
    local rows = {
      { id = "r1", name = 'a "quoted" / \\ name\n', n = 3, login = "ann", since = "2026", f = true, z = 1.5 },
      { id = "r2" },
    }
    local view = json.row_view(shape, fields)
    local presented = {}
    for i, r in ipairs(rows) do presented[i] = json.encode(json.present(fields, r), shape) end
    assert.are.equal("[" .. table.concat(presented, ",") .. "]", fake_host.result(rows):json(view))
    assert.are.same({ id = "r2", name = "", count = 0, flag = false, zeta = json.null,
      owner = { login = "nobody", since = json.null } }, json.present(fields, rows[2]))
  end)
end)

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

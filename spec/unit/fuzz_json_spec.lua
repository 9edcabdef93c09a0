-- Fuzz: request bodies through lib/json.lua's decode and what the
-- dispatcher and idempotency do with a decoded body (the companyId check,
-- the canonical form an Idempotency-Key is compared by). Each input is
-- refused with a message or goes through all of them, never an error.
require("fake_host").install()
local fuzz = require "fuzz"
local json = require "json"
local fields = require "fields"
local idempotency = require "idempotency"

local BODIES = {
  '{"targets":[{"socialAccountId":"acc_1","platform":"facebook"}],"content":{"type":"text","message":"Hi"},'
    .. '"publishing":{"mode":"scheduled","scheduledAt":"2026-11-21T10:00:00Z"}}',
  '{"message":"Thanks! \\u00e4\\ud83d\\ude00","n":1.5e3,"list":[1,-2,3.25,true,false,null],"nested":{"a":{"b":[{}]}}}',
  '[{"companyId":"co_1"},{"x":[[[]]]}]',
  '"just a string"',
}

local function check(text)
  local value, err = json.decode(text)
  if value == nil then
    assert(type(err) == "string", "a refusal says why")
    return
  end
  fields.has_company_id(value)
  if type(value) == "table" then
    fields.company_fields(value, "", function() end)
  end
  assert(type(idempotency.canonical(value)) == "string")
  json.encode(value)
end

describe("fuzz: JSON request bodies", function()
  it("are refused with a message or decoded, checked and encoded again", function()
    fuzz.run(BODIES, check)
  end)

  it("refuses numbers that overflow", function()
    for _, text in ipairs { "1e999999", '{"n":-1e999999}', "[1" .. string.rep("0", 400) .. "]" } do
      local value, err = json.decode(text)
      assert.is_nil(value, text)
      assert.is_string(err)
    end
  end)
end)

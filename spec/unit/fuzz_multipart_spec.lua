-- Fuzz: lib/multipart.lua's parse, with bodies and Content-Type headers
-- mutated. Each gives the file's bytes (and a declared type or nil) or nil
-- and a message, never an error.
require("fake_host").install()
local fuzz = require "fuzz"
local multipart = require "multipart"

local B = "----sgwBoundary7MA4YWxk"
local CT = "multipart/form-data; boundary=" .. B
local function part(headers, content)
  return "--" .. B .. "\r\n" .. table.concat(headers, "\r\n") .. "\r\n\r\n" .. content .. "\r\n"
end
local FILE = { 'Content-Disposition: form-data; name="file"; filename="cat.jpg"', "Content-Type: image/jpeg" }
local BODIES = {
  part(FILE, "\255\216\255\0\r\n--" .. B:sub(1, -2) .. "\255\217") .. "--" .. B .. "--\r\n",
  "preamble\r\n" .. part({ 'Content-Disposition: form-data; name="note"' }, "hello")
    .. part({ 'Content-Disposition: form-data; name=file; filename*=UTF-8\'\'%C3%A4.png' }, "\137PNG") .. "--" .. B .. "--",
}
local TYPES = { CT, 'multipart/form-data; charset=utf-8; boundary="' .. B .. '"' }

local function check(input)
  local bytes, declared = multipart.parse(input.body, input.content_type)
  if bytes == nil then
    assert(type(declared) == "string", "a refusal says why")
  else
    assert(type(bytes) == "string")
    assert(declared == nil or type(declared) == "string")
  end
end

describe("fuzz: multipart.parse", function()
  it("returns the file or a refusal for mutated bodies", function()
    local i = 0
    fuzz.run(BODIES, check, function(body)
      i = i + 1
      return { body = body, content_type = TYPES[i % 2 + 1] }
    end)
  end)

  it("returns the file or a refusal for mutated Content-Type headers", function()
    fuzz.run(TYPES, check, function(ct) return { body = BODIES[1], content_type = ct } end)
  end)
end)

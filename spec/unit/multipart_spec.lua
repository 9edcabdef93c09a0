-- lib/multipart.lua: the part named "file" of a multipart/form-data body,
-- strictly.
require("fake_host").install()
local multipart = require "multipart"

local B = "----sgwBoundary7MA4YWxk"
local CT = "multipart/form-data; boundary=" .. B

local function part(headers, content)
  return "--" .. B .. "\r\n" .. table.concat(headers, "\r\n") .. "\r\n\r\n" .. content .. "\r\n"
end
local CLOSE = "--" .. B .. "--\r\n"
local FILE_HEADERS = { 'Content-Disposition: form-data; name="file"; filename="cat.jpg"', "Content-Type: image/jpeg" }

-- bytes with everything a parser might trip on: CR, LF, NUL, dashes, a
-- near-boundary
local BINARY = "\255\216\0\r\n--" .. B:sub(1, -2) .. "\r\n\r\n--\0\255\217"

local function refused(body, ct, pattern)
  local bytes, err = multipart.parse(body, ct)
  assert.is_nil(bytes)
  assert.is_string(err)
  if pattern then assert.matches(pattern, err, 1, true) end
end

describe("multipart.parse", function()
  it("returns the bytes and declared type of the part named file", function()
    local bytes, declared = multipart.parse(part(FILE_HEADERS, BINARY) .. CLOSE, CT)
    assert.are.equal(BINARY, bytes)
    assert.are.equal("image/jpeg", declared)
  end)

  it("skips other parts, a preamble and an epilogue", function()
    local body = "preamble to ignore\r\n"
      .. part({ 'Content-Disposition: form-data; name="caption"' }, "hello")
      .. part({ 'content-disposition: form-data; filename="file"; name=file' }, BINARY)
      .. part({ 'Content-Disposition: form-data; name="files"' }, "not this one")
      .. CLOSE .. "epilogue"
    local bytes, declared = multipart.parse(body, CT)
    assert.are.equal(BINARY, bytes)
    assert.is_nil(declared)
  end)

  it("takes a quoted boundary with any letter case in the parameters", function()
    local b = "a'b()+_,-./:=? z"
    local body = "--" .. b .. "\r\n" .. FILE_HEADERS[1] .. "\r\n\r\nxyz\r\n--" .. b .. "--"
    assert.are.equal("xyz", (multipart.parse(body, 'Multipart/Form-Data; charset=utf-8; BOUNDARY="' .. b .. '"')))
  end)

  it("handles escaped quotes in parameters and padding after a boundary", function()
    local headers = { [[Content-Disposition: form-data; filename="a\"b\\.jpg"; name="file"]] }
    local body = "--" .. B .. " \t\r\n" .. table.concat(headers) .. "\r\n\r\nOK\r\n" .. CLOSE
    assert.are.equal("OK", (multipart.parse(body, CT)))
    assert.are.same({ filename = 'a"b\\.jpg', name = "file" }, multipart.params(headers[1]:match(";.*$")))
  end)

  it("keeps an empty file part empty (the handler refuses it)", function()
    assert.are.equal("", (multipart.parse(part(FILE_HEADERS, "") .. CLOSE, CT)))
  end)

  it("refuses a Content-Type without a valid boundary", function()
    refused("x", "multipart/form-data", "boundary")
    refused("x", "multipart/form-data; boundary=", "boundary")
    refused("x", "multipart/form-data; boundary=" .. string.rep("a", 71), "boundary")
    refused("x", 'multipart/form-data; boundary="ends with space "', "boundary")
    refused("x", 'multipart/form-data; boundary="unterminated', "boundary")
    refused("x", "multipart/form-data; boundary=a; junk", "boundary")
    refused("x", "multipart/mixed; boundary=abc", "not multipart/form-data")
    refused("x", nil, "not multipart/form-data")
  end)

  it("refuses bodies without the boundary, without a closing delimiter, or cut short", function()
    local full = part(FILE_HEADERS, BINARY) .. CLOSE
    refused("just bytes", CT, "does not contain the boundary")
    refused(part(FILE_HEADERS, BINARY), CT, "closing boundary")
    for n = 0, #full - 5 do
      local bytes = multipart.parse(full:sub(1, n), CT)
      assert.is_nil(bytes, "accepted a body cut at " .. n)
    end
  end)

  it("refuses no part named file, two of them, and too many parts", function()
    refused(part({ 'Content-Disposition: form-data; name="image"' }, "x") .. CLOSE, CT, "no part named file")
    refused(CLOSE, CT, "no part named file")
    refused(part(FILE_HEADERS, "a") .. part(FILE_HEADERS, "b") .. CLOSE, CT, "more than one")
    refused(string.rep(part({ 'Content-Disposition: form-data; name="x"' }, "x"), 17) .. CLOSE, CT, "more than 16 parts")
  end)

  it("refuses malformed part headers and boundary lines", function()
    refused(part({ "Content-Disposition form-data" }, "x") .. CLOSE, CT, "headers are malformed")
    refused(part({ FILE_HEADERS[1], " folded continuation" }, "x") .. CLOSE, CT, "headers are malformed")
    refused(part({ "X-Big: " .. string.rep("a", 9000) }, "x") .. CLOSE, CT, "too large")
    refused("--" .. B .. "\r\n" .. FILE_HEADERS[1] .. "\r\n", CT, "headers do not end")
    refused("--" .. B .. "junk\r\n" .. FILE_HEADERS[1] .. "\r\n\r\nx\r\n" .. CLOSE, CT, "boundary line")
    -- bare LF line ends
    refused("--" .. B .. "\n" .. FILE_HEADERS[1] .. "\n\nx\n--" .. B .. "--\n", CT)
  end)

  it("parses an 8 MiB part", function()
    local big = string.rep("\255\0\r\n-", 2 * 1024 * 1024)
    assert.are.equal(#big, #multipart.parse(part(FILE_HEADERS, big) .. CLOSE, CT))
  end)

  it("takes blanks off both ends of a header value, however many", function()
    local blanks = string.rep(" \t", 1800)   -- within the 8 KB of a part's headers
    local bytes, declared = multipart.parse(part({ FILE_HEADERS[1], "Content-Type:" .. blanks .. "image/jpeg"
      .. blanks }, "x") .. CLOSE, CT)
    assert.are.equal("x", bytes)
    assert.are.equal("image/jpeg", declared)
    -- A value of blanks alone is empty.
    bytes, declared = multipart.parse(part({ FILE_HEADERS[1], "Content-Type:" .. blanks }, "x") .. CLOSE, CT)
    assert.are.equal("x", bytes)
    assert.are.equal("", declared)
  end)
end)

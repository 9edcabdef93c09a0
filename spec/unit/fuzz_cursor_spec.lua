-- Fuzz: lib/cursor.lua's decode, with cursors and their JSON mutated. Each
-- input decodes to a position fit for SQL (a real time, an ASCII id) or to
-- nil, never an error.
require("fake_host").install()
local fuzz = require "fuzz"
fuzz.install_crypto()
local cursor = require "cursor"

local FIELDS = { t = "time", id = "id" }
local POSITIONS = {
  '{"t":"2026-11-21T10:00:00.123456Z","id":"post_0123456789abcdefghijklmn"}',
  '{"id":"cmt_ABCDEFGHIJKLMNOPQRSTUVWX","t":"2024-02-29T23:59:59.999999Z"}',
  '{"t":"1999-12-31T00:00:00.000000Z","id":"post_x"}',
}

local function check(text)
  local p = cursor.decode(text, FIELDS)
  if p ~= nil then
    assert(type(p) == "table", "a position is a table")
    local mo, d = p.t:match("^%d%d%d%d%-(%d%d)%-(%d%d)T")
    assert(tonumber(mo) >= 1 and tonumber(mo) <= 12 and tonumber(d) >= 1 and tonumber(d) <= 31, p.t)
    assert(p.id:match("^[%w_%-]+$"), p.id)
  end
end

describe("fuzz: cursor.decode", function()
  it("gives a valid position or nil for mutated cursors", function()
    local corpus = {}
    for i, p in ipairs(POSITIONS) do corpus[i] = fuzz.base64url_encode(p) end
    fuzz.run(corpus, check)
  end)

  it("gives a valid position or nil for cursors over mutated JSON", function()
    fuzz.run(POSITIONS, check, fuzz.base64url_encode)
  end)

  it("refuses dates PostgreSQL would refuse", function()
    for _, t in ipairs { "2026-13-01T00:00:00.000000Z", "2026-00-10T00:00:00.000000Z", "2025-02-29T00:00:00.000000Z",
        "0000-01-01T00:00:00.000000Z", "2026-04-31T00:00:00.000000Z", "2026-01-01T24:00:00.000000Z" } do
      assert.is_nil(cursor.decode(fuzz.base64url_encode('{"t":"' .. t .. '","id":"post_x"}'), FIELDS), t)
    end
    assert.is_table(cursor.decode(fuzz.base64url_encode('{"t":"2024-02-29T00:00:00.000000Z","id":"post_x"}'), FIELDS))
  end)
end)

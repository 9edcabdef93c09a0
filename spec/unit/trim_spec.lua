-- lib/trim.lua: white space off both ends, and the same answer as the
-- usual pattern, in steps linear in the length: each case below would take
-- hours with "^%s*(.-)%s*$" or "^%s*(.*%S)" (their steps grow with the
-- square of a run of spaces), and runs in milliseconds here.
local trim = require "trim"

describe("trim", function()
  it("takes white space off both ends and keeps what is inside", function()
    assert.are.equal("", trim(""))
    assert.are.equal("", trim(" \t\n\v\f\r"))
    assert.are.equal("a", trim("a"))
    assert.are.equal("a b", trim("  a b \t"))
    assert.are.equal("sgk_test_x", trim("\vsgk_test_x\f"))
    assert.are.equal("a\0b", trim(" a\0b "))
  end)

  it("agrees with the usual pattern", function()
    local chars = { " ", "\t", "\v", "x", "y", "\0" }
    local seed = 7
    for _ = 1, 2000 do
      local parts = {}
      for i = 1, seed % 9 do
        seed = (seed * 1103515245 + 12345) % 2147483648
        parts[i] = chars[seed % #chars + 1]
      end
      seed = (seed * 1103515245 + 12345) % 2147483648
      local s = table.concat(parts)
      assert.are.equal(s:match("^%s*(.-)%s*$"), trim(s), ("%q"):format(s))
    end
  end)

  it("trims a megabyte of spaces around one character, or of spaces alone", function()
    local run = string.rep(" ", 1024 * 1024)
    assert.are.equal("", trim(run))
    assert.are.equal("x", trim(run .. "x" .. run))
    assert.are.equal("x" .. run .. "y", trim("x" .. run .. "y"))
    assert.are.equal("x", trim(string.rep("\v", 1024 * 1024) .. "x"))
  end)
end)

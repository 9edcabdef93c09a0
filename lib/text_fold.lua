-- Text compared the way people read it: lower case, Latin letters without
-- their diacritics ("Café" and "cafe" are one word). Lua knows no Unicode
-- tables, so the Latin letters are listed here: Latin-1, Latin Extended-A,
-- the Romanian and Vietnamese letters. Other scripts are kept as written.
local M = {}

-- First code point, then the folded form of it and each following one.
local RANGES = {
  { 0xC0, "a a a a a a ae c e e e e i i i i d n o o o o o - o u u u u y th ss" },
  { 0xE0, "a a a a a a ae c e e e e i i i i d n o o o o o - o u u u u y th y" },
  { 0x100, "a a a a a a c c c c c c c c d d d d e e e e e e e e e e g g g g g g g g h h h h"
    .. " i i i i i i i i i i ij ij j j k k k l l l l l l l l l l n n n n n n n n n o o o o o o oe oe"
    .. " r r r r r r s s s s s s s s t t t t t t u u u u u u u u u u u u w w y y y z z z z z z s" },
  { 0x1A0, "o o" }, { 0x1AF, "u u" }, { 0x218, "s s t t" },
  { 0x1EA0, "a a a a a a a a a a a a a a a a a a a a a a a a e e e e e e e e e e e e e e e e i i i i"
    .. " o o o o o o o o o o o o o o o o o o o o o o o o u u u u u u u u u u u u u u y y y y y y y y" },
}

-- The UTF-8 bytes of a letter -> its folded form.
local FOLD = {}
for _, range in ipairs(RANGES) do
  local cp = range[1]
  for folded in range[2]:gmatch("%S+") do
    if folded ~= "-" then FOLD[utf8.char(cp)] = folded end
    cp = cp + 1
  end
end
M.FOLD = FOLD

local MULTIBYTE = "[\xC2-\xF4][\x80-\xBF]+"

-- text, lower case and without diacritics. ASCII text takes one lower().
function M.fold(text)
  local lower = text:lower()
  if not lower:find("[\x80-\xFF]") then return lower end
  return (lower:gsub(MULTIBYTE, FOLD))
end

-- A word: a run of letters and digits (any non-ASCII character counts as a letter).
M.WORD = "[%w\x80-\xFF]+"

-- The words with one space between them and spaces at both ends, so a
-- phrase is found whole with one plain find of " its words ".
function M.spaced(folded)
  return " " .. folded:gsub("[^%w\x80-\xFF]+", " ") .. " "
end

return M

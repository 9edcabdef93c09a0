-- {"keywords": ["free", "buy now", ...]}: holds when the text has one of
-- them as whole words, compared folded (case and Latin accents ignored):
-- "cafe" matches "Café!" but not "cafeteria". A keyword of several words
-- matches them in a row.
local text_fold = require "text_fold"

local M = {}

M.MAX_ITEMS, M.MAX_CHARS = 100, 100

function M.validate(value)
  if type(value) ~= "table" or next(value) == nil or #value == 0 then
    return "must be a non-empty array of words"
  end
  if #value > M.MAX_ITEMS then return "at most " .. M.MAX_ITEMS .. " keywords" end
  for i, k in ipairs(value) do
    local n = type(k) == "string" and utf8.len(k)
    if not n or n > M.MAX_CHARS or not text_fold.fold(k):find(text_fold.WORD) then
      return "each keyword is a string of 1 to " .. M.MAX_CHARS .. " characters with a letter or digit", "/" .. (i - 1)
    end
  end
end

function M.compile(value)
  local words, phrases = {}, {}
  for _, k in ipairs(value) do
    local spaced = text_fold.spaced(text_fold.fold(k))
    local word = spaced:match("^ (%S+) $")
    if word then words[#words + 1] = word else phrases[#phrases + 1] = spaced end
  end
  return function(comment)
    local set = comment.words
    for _, w in ipairs(words) do
      if set[w] then return true end
    end
    for _, p in ipairs(phrases) do
      if comment.spaced:find(p, 1, true) then return true end
    end
    return false
  end
end

return M

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

-- Each keyword as " its words ", found with one plain find in the
-- comment's spaced words: cheaper than splitting every comment into a set.
function M.compile(value)
  local padded = {}
  for i, k in ipairs(value) do padded[i] = text_fold.spaced(text_fold.fold(k)):gsub("^ +", " "):gsub(" +$", " ") end
  local n = #padded
  return function(comment)
    local spaced = comment.spaced
    for i = 1, n do
      if spaced:find(padded[i], 1, true) then return true end
    end
    return false
  end
end

return M

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

-- Every keywords rule of a compiled set shares one index: the first word of
-- each keyword -> the rules (slots) having it, and the whole keyword as
-- " its words " when it has several. A comment is read once, word by word;
-- only a word that starts some keyword costs more than a table lookup, so
-- the cost grows with the comment, not with the number of rules.
-- compile_set(values) -> tests, first: tests[i] the test of values[i];
-- first(comment, lo, hi) the lowest slot of lo..hi that holds, or nil, so a
-- run of keyword rules costs one look at what the reading found.
function M.compile_set(values)
  local index = {}
  for slot, value in ipairs(values) do
    for _, k in ipairs(value) do
      local spaced = text_fold.spaced(text_fold.fold(k))
      local first = spaced:match(text_fold.WORD)
      local entries = index[first] or {}
      index[first] = entries
      local whole = spaced:gsub("^ +", " "):gsub(" +$", " ")
      entries[#entries + 1] = { slot = slot, phrase = whole ~= " " .. first .. " " and whole or nil }
    end
  end
  -- The slots that hold for the comment last asked about (nil: none): every
  -- rule of the set asks about one comment in turn, so it is read once.
  -- (Kept here rather than on the comment: a table lookup beats a rawget call.)
  local last, found
  local function read(comment)
    found = nil
    -- A keyword's phrase is looked for in the whole text, so a word met
    -- again has nothing new to say ("buy buy buy ..." against "buy now"
    -- searched the text once per "buy").
    local seen = {}
    for word in comment.folded:gmatch(text_fold.WORD) do
      local entries = not seen[word] and index[word]
      seen[word] = true
      if entries then
        for _, e in ipairs(entries) do
          if not (found and found[e.slot]) and (not e.phrase or comment.spaced:find(e.phrase, 1, true)) then
            found = found or {}
            found[e.slot] = true
          end
        end
      end
    end
    last = comment
  end
  local tests = {}
  for slot = 1, #values do
    tests[slot] = function(comment)
      if comment ~= last then read(comment) end
      return found ~= nil and found[slot] == true
    end
  end
  local function first(comment, lo, hi)
    if comment ~= last then read(comment) end
    if not found then return nil end
    local best
    for slot in pairs(found) do
      if slot >= lo and slot <= hi and (not best or slot < best) then best = slot end
    end
    return best
  end
  return tests, first
end

function M.compile(value)
  return M.compile_set({ value })[1]
end

return M

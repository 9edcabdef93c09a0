-- {"authors": ["1789..."]}: holds when the comment's author has one of these
-- platform ids (the Comment's author.platformId).
local M = {}

M.MAX_ITEMS = 1000
M.cheap = true -- see rules.matcher

function M.validate(value)
  if type(value) ~= "table" or next(value) == nil or #value == 0 then
    return "must be a non-empty array of platform ids"
  end
  if #value > M.MAX_ITEMS then return "at most " .. M.MAX_ITEMS .. " authors" end
  for i, id in ipairs(value) do
    if type(id) ~= "string" or id == "" or #id > 64 then
      return "each author is a platform id, a string of 1 to 64 characters", "/" .. (i - 1)
    end
  end
end

function M.compile(value)
  local set = {}
  for _, id in ipairs(value) do set[id] = true end
  return function(comment) return set[comment.author_id] == true end
end

-- A run of author rules (see rules.compile) is one lookup: author id -> the
-- slots naming it, in order.
function M.compile_set(values)
  local tests, slots_of = {}, {}
  for slot, value in ipairs(values) do
    tests[slot] = M.compile(value)
    for _, id in ipairs(value) do
      local slots = slots_of[id] or {}
      slots_of[id] = slots
      if slots[#slots] ~= slot then slots[#slots + 1] = slot end
    end
  end
  local function first(comment, lo, hi)
    local slots = slots_of[comment.author_id]
    if not slots then return nil end
    for k = 1, #slots do
      local slot = slots[k]
      if slot >= lo then return slot <= hi and slot or nil end
    end
  end
  return tests, first
end

return M

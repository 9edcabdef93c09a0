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

return M

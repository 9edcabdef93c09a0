-- {"regex": "fr[e3]e\\s+money"}: holds when the pattern occurs in the text,
-- compared folded. Syntax and cost bound: lib/moderation/regex.lua and
-- docs/comments.md ("Regex").
local regex = require "moderation.regex"

local M = {}

function M.validate(value)
  local match, err = regex.compile(value)
  if not match then return err end
  if regex.too_costly(value, match) then return "too costly to run on a long comment" end
end

-- The patterns of a set share their literal prefilter's finds on the comment
-- last asked about (several patterns often need the same word).
function M.compile_set(values)
  local last, seen
  local tests = {}
  for i, value in ipairs(values) do
    local match = assert(regex.compile(value))
    tests[i] = function(comment)
      if comment ~= last then last, seen = comment, {} end
      return match(comment.folded, seen)
    end
  end
  return tests
end

function M.compile(value)
  return M.compile_set({ value })[1]
end

return M

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

function M.compile(value)
  local match = assert(regex.compile(value))
  return function(comment) return match(comment.folded) end
end

return M

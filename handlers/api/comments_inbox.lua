-- GET /api/v1/comments: the company's comments in this environment, filtered
-- and keyset-paged (lib/comment_inbox.lua).
local comments = require "comments"
local comment_inbox = require "comment_inbox"
local json = require "json"

return function(req, ctx)
  local rows, next_cursor = comment_inbox.list(ctx.client, comment_inbox.parse(req.query))
  local data = {}
  for i, r in ipairs(rows) do data[i] = comments.present(r) end
  return 200, { data = json.array(data), nextCursor = next_cursor or json.null }
end

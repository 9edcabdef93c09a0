-- GET /api/v1/comments: the company's comments in this environment, filtered
-- and keyset-paged (lib/comment_inbox.lua).
local comment_inbox = require "comment_inbox"
local json = require "json"

return function(req, ctx)
  local page, next_cursor = comment_inbox.page(ctx.client, comment_inbox.parse(req.query))
  return 200, { data = page, nextCursor = next_cursor or json.null }
end

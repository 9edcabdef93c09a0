-- POST /api/v1/comments/bulk: hides, unhides or deletes up to 100 comments as
-- one comment.bulk operation (lib/comment_bulk.lua).
local comment_bulk = require "comment_bulk"

return function(req, ctx)
  return comment_bulk.request(req, ctx)
end

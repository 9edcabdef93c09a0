-- GET /api/v1/comments/{commentId}
local problem = require "problem"
local comments = require "comments"

return function(req, ctx)
  local row = comments.read(ctx.client, req.params.commentId)
  if not row then problem.raise(404, "not_found", "No comment with this id.") end
  return 200, comments.present(row)
end

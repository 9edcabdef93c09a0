-- GET /api/v1/comments/{commentId}/history: who asked for which moderation
-- action on the comment, and how it went, oldest first (lib/comment_audit.lua).
local problem = require "problem"
local comments = require "comments"
local comment_audit = require "comment_audit"
local json = require "json"

return function(req, ctx)
  local row = comments.find(ctx.client, req.params.commentId)
  if not row then problem.raise(404, "not_found", "No comment with this id.") end
  return 200, { data = json.array(comment_audit.history(row.id)) }
end

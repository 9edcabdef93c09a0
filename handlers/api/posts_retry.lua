-- POST /api/v1/posts/{postId}/retry: failed targets only, under a new operation.
local problem = require "problem"
local posts = require "posts"

return function(req, ctx)
  local op_id
  db.transaction(function()
    local post = posts.find(ctx.client, req.params.postId, true)
    if not post then problem.raise(404, "not_found", "No post with this id.") end
    op_id = posts.retry(ctx.client, post)
  end)
  if not op_id then
    problem.raise(409, "nothing_to_retry", "Only a failed or partially published post can be retried.")
  end
  return 202, { requestId = req.id, operationId = op_id, status = "queued", resource = { postId = req.params.postId } }
end

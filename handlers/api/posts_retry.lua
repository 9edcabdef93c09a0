-- POST /api/v1/posts/{postId}/retry: failed targets only, under a new operation.
local problem = require "problem"
local posts = require "posts"

return function(req, ctx)
  local op_id, err = posts.retry_by_id(ctx.client, req.params.postId)
  if err == "not_found" then problem.raise(404, "not_found", "No post with this id.") end
  if err then
    problem.raise(409, "nothing_to_retry", "Only a failed or partially published post can be retried.")
  end
  return 202, { requestId = req.id, operationId = op_id, status = "queued", resource = { postId = req.params.postId } }
end

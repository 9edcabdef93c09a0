-- POST /api/v1/posts/{postId}/cancel: only before publishing has started.
local problem = require "problem"
local posts = require "posts"

return function(req, ctx)
  local cancelled
  db.transaction(function()
    posts.lock_targets(ctx.client, req.params.postId)
    local post = posts.find(ctx.client, req.params.postId, true)
    if not post then problem.raise(404, "not_found", "No post with this id.") end
    cancelled = posts.cancel(ctx.client, post)
  end)
  if not cancelled then
    problem.raise(409, "post_not_cancellable", "Publishing has started for at least one target; a post can be cancelled only while every target is scheduled or queued.")
  end
  return 200, posts.present(posts.find(ctx.client, req.params.postId))
end

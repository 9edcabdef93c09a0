-- GET /api/v1/posts/{postId}
local problem = require "problem"
local posts = require "posts"

return function(req, ctx)
  local post, query = posts.read(ctx.client, req.params.postId)
  if not post then problem.raise(404, "not_found", "No post with this id.") end
  return 200, posts.present(post, posts.targets_of(post.id, query))
end

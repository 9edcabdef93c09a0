-- GET /api/v1/posts/{postId}
local problem = require "problem"
local posts = require "posts"

return function(req, ctx)
  local post = posts.find(ctx.client, req.params.postId)
  if not post then problem.raise(404, "not_found", "No post with this id.") end
  return 200, posts.present(post)
end

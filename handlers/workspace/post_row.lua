-- GET /workspace/posts/{postId}/row: one post's row of the Posts page, as
-- JSON {final, html}, for the page's script to follow a retry.
local web = require "workspace.web"
local workspace_posts = require "workspace.posts"

return web.page(function(w)
  local id = w.req.params.postId
  local post = workspace_posts.get(w.session.company_id, id)
  if not post then return w:json(404, { message = "There is no such post, or it belongs to another company." }) end
  return w:json(200, { final = post.final, status = post.status, html = w:fragment("post_row", post) })
end)

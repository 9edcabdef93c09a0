-- POST /workspace/posts/{postId}/retry: the post's failed targets publish
-- again (as POST /api/v1/posts/{postId}/retry). The page's script asks for
-- JSON and puts the new row in place; without it, back to the list.
local web = require "workspace.web"
local workspace_posts = require "workspace.posts"

return web.page(function(w)
  local id = w.req.params.postId
  local op_id, err = workspace_posts.retry(w.session, id)
  if err == "not_found" then
    if w:wants_json() then return w:json(404, { message = "There is no such post, or it belongs to another company." }) end
    return w:not_found()
  end
  local post = workspace_posts.get(w.session.company_id, id)
  if w:wants_json() then
    -- A quick platform (the sandbox) may have ended the retry already: the
    -- page then follows no further, so this answer says how it ended.
    local message = "Publishing the failed targets again…"
    if err then
      message = "Nothing to retry: only failed or partially published posts can be retried."
    elseif post.final then
      message = "Done: the post is " .. post.status:gsub("_", " ") .. "."
    end
    return w:json(err and 409 or 202, { operationId = op_id, final = post.final, message = message,
      html = w:fragment("post_row", post) })
  end
  return w:redirect("/workspace/posts?env=" .. post.environment .. "&notice=" .. (err or "post_retried"))
end)

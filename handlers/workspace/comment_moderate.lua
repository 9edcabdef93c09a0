-- POST /workspace/comments/{commentId}/moderate (action=reply|hide|unhide|delete,
-- message for a reply): the action as the API's, asked for by the signed-in
-- user. The page's script asks for JSON, puts the row in place and follows
-- the operation (GET .../row); without it, back to the list.
local web = require "workspace.web"
local workspace_comments = require "workspace.comments"

return web.page(function(w)
  local id = w.req.params.commentId
  local op_id, err = workspace_comments.moderate(w.session, id, w.form.action, w.form.message)
  if err then
    if w:wants_json() then return w:json(err.status, { code = err.code, message = err.detail,
      errors = err.opts and err.opts.errors }) end
    if err.status == 404 then return w:not_found() end
    return w:fail(err.status, "That did not work", err.detail, "/workspace/comments", "Back to the comments")
  end
  local row = workspace_comments.get(w.session.company_id, id)
  if w:wants_json() then
    return w:json(202, { operationId = op_id, final = false, message = "Asking the platform…",
      html = w:fragment("comment_row", row) })
  end
  return w:redirect("/workspace/comments?env=" .. workspace_comments.environment(w.session.company_id, id)
    .. "&notice=comment_moderated")
end)

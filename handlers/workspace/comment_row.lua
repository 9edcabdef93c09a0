-- GET /workspace/comments/{commentId}/row?operation=: one comment's row of the
-- Comments page and how the operation stands, as JSON {final, message, html},
-- for the page's script to follow a moderation action.
local web = require "workspace.web"
local workspace_comments = require "workspace.comments"

return web.page(function(w)
  local company_id, id = w.session.company_id, w.req.params.commentId
  -- The operation first: the row read after it ended shows what it did (an
  -- operation's end and the comment's new state are one transaction), never
  -- a state from before it next to its outcome.
  local outcome = workspace_comments.outcome(company_id, id, w.req.query.operation)
  local row = outcome and workspace_comments.get(company_id, id)
  if not row then
    return w:json(404, { message = "There is no such comment or operation, or it belongs to another company." })
  end
  return w:json(200, { final = outcome.final, message = outcome.message, html = w:fragment("comment_row", row) })
end)

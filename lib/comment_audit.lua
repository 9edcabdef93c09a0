-- Who asked for what on a comment (CONTRACT 12, GET /comments/{id}/history):
-- one row per comment per moderation action, written in the transaction that
-- creates its operation. The outcome is the operation's status when read,
-- unless the row has one of its own (an operation acting on many comments
-- sets each comment's with set_outcome).
local actors = require "actors"
local sqltime = require "sqltime"

local M = {}

-- comment: its row (comments.find); action: the operation type
-- (comment.hide, ...); actor: lib/actors.lua. Inside the caller's transaction.
function M.record(comment, action, actor, operation_id)
  local actor_type, actor_id = actors.columns(actor)
  assert(db.exec([[INSERT INTO comment_audit (comment_id, company_id, action, actor_type, actor_id, operation_id)
      VALUES ($1, $2, $3, $4, $5, $6)]], comment.id, comment.company_id, action, actor_type, actor_id, operation_id))
end

-- This comment's own outcome of an operation (succeeded, failed, ...).
function M.set_outcome(operation_id, comment_id, outcome)
  assert(db.exec("UPDATE comment_audit SET outcome = $3 WHERE operation_id = $1 AND comment_id = $2",
    operation_id, comment_id, outcome))
end

-- A comment's history, oldest first, as the API shows it.
function M.history(comment_id)
  local rows = assert(db.query([[SELECT a.action, a.actor_type, a.actor_id, a.operation_id,
        coalesce(a.outcome, o.status) AS outcome, ]] .. sqltime.iso("a.at", "at") .. [[
      FROM comment_audit a JOIN operations o ON o.id = a.operation_id
      WHERE a.comment_id = $1 ORDER BY a.id]], comment_id))
  local out = {}
  for i, r in ipairs(rows) do
    out[i] = { action = r.action, actor = actors.present(r.actor_type, r.actor_id), at = r.at,
      operationId = r.operation_id, outcome = r.outcome }
  end
  return out
end

return M

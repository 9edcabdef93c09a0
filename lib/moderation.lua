-- Replying to, hiding, unhiding and deleting comments (docs/comments.md,
-- "Moderation"). A request becomes an operation and a moderate_comment job in
-- one transaction; the job asks the platform through the account's adapter
-- with the error classes and automatic retries of publishing, then records
-- the new state through comments.apply and finishes the operation.
local json = require "json"
local jobs = require "jobs"
local problem = require "problem"
local fields = require "fields"
local retry = require "retry"
local events = require "events"
local comments = require "comments"
local operations = require "operations"
local adapters = require "platforms.adapters"
local graph_errors = require "platforms.graph_errors"
local RANK = require("comment_versions").RANK
local token_health = require "token_health"
local actors = require "actors"
local comment_audit = require "comment_audit"
local comment_changes = require "comment_changes"

local M = {}

local OPERATION = {
  reply = "comment.reply",
  hide = "comment.hide",
  unhide = "comment.unhide",
  delete = "comment.delete",
}

-- Longest reply per platform (CONTRACT 6: 8000; Instagram 2200).
M.REPLY_MAX = { facebook = 8000, instagram = 2200 }

-- ---------------------------------------------------------------- requests

local function invalid(errors)
  problem.raise(422, "validation_failed", "The request has invalid fields.", { errors = errors })
end

-- Everything refused before an operation exists.
local function check(comment, action, body)
  local spec = {}
  if action == "reply" then
    spec.message = { type = "string", required = true, min = 1, max = M.REPLY_MAX[comment.platform] }
  end
  local errors = fields.check(body or {}, spec)
  if action == "reply" and comment.platform == "instagram" and comment.parent_platform_comment_id then
    errors[#errors + 1] = { field = "", code = "not_top_level_comment",
      message = "Instagram takes replies to top-level comments only; this comment is itself a reply, to "
        .. comment.parent_platform_comment_id .. "." }
  end
  if #errors > 0 then invalid(errors) end
  if comment.is_deleted then
    problem.raise(409, "comment_deleted", "The comment was deleted; it can no longer be replied to, hidden or deleted.")
  end
  -- Meta lets no account hide its own comments (can_hide is false).
  if (action == "hide" or action == "unhide") and comment.is_from_account then
    problem.raise(422, "cannot_hide_own_comment", "The account wrote this comment itself; its own comments cannot be hidden.")
  end
end
-- For callers that ask for an action in other ways (the workspace): the same refusals.
M.check = check

-- Creates the operation of `action` (reply, hide, unhide, delete) on a
-- comment row (comments.find) that passed check (also each item of a bulk
-- action, lib/comment_bulk.lua), its audit row (who asked:
-- actor, lib/actors.lua) and its job. client: whose operation it is.
-- message: a reply's text; trigger: what started it when no client asked
-- ({type = "rule", ruleId}), shown on the operation. Inside the caller's
-- transaction (or one of its own). Returns the operation id.
function M.create(client, comment, action, actor, message, trigger)
  local op_id = operations.new_id()
  actors.columns(actor)
  db.transaction(function()
    operations.create(client, OPERATION[action], "comment", comment.id, op_id, { trigger = trigger })
    comment_audit.record(comment, OPERATION[action], actor, op_id)
    -- Attempts are counted and capped by the job itself (publishing.retry.*).
    assert(jobs.enqueue("moderate_comment", { operationId = op_id, action = action, message = message,
      actor = actor }, { max_attempts = 1000 }))
  end)
  return op_id
end

-- The handler of POST .../replies, .../hide, .../unhide and DELETE: returns
-- the 202 answer. actor: who asks (default the API client).
function M.request(req, ctx, action, actor)
  local comment = comments.find(ctx.client, req.params.commentId)
  if not comment then problem.raise(404, "not_found", "No comment with this id.") end
  check(comment, action, req.json)
  local op_id = M.create(ctx.client, comment, action, actor or actors.client(ctx.client),
    action == "reply" and req.json.message or nil)
  return 202, { requestId = req.id, operationId = op_id, status = "queued", resource = { commentId = comment.id } }
end

-- ---------------------------------------------------------------- the job

local LOAD_SQL = [[
  SELECT o.id, o.status, o.company_id, o.environment, o.client_id, o.resource_id AS comment_id, o.trigger,
         extract(epoch FROM o.created_at)::float8 AS requested_at,
         c.platform_comment_id, c.parent_platform_comment_id, c.platform_post_id, c.can_hide,
         a.id AS account_id, a.platform, a.platform_account_id, a.access_token_enc, a.status AS account_status,
         a.status_reason AS account_reason, a.name, a.username
    FROM operations o
    JOIN comments c ON c.id = o.resource_id AND c.company_id = o.company_id
    JOIN social_accounts a ON a.id = c.social_account_id
   WHERE o.id = $1]]

local FINAL = { succeeded = true, failed = true, cancelled = true }

-- The operation, its comment and account; marked running. nil when it is
-- over already. `resumed`: an earlier run got as far as asking the platform.
local function begin(op_id)
  local row
  db.transaction(function()
    row = assert(db.query(LOAD_SQL .. " FOR UPDATE OF o", op_id))[1]
    if not row or FINAL[row.status] then row = nil return end
    row.resumed = row.status == "running"
    operations.set_running(row.id)
  end)
  return row
end

-- The platform ids of replies other operations on this comment made: a
-- lost answer is never matched to one of those.
local function replies_of_others(row)
  local rows = assert(db.query([[SELECT result->>'platformCommentId' AS id FROM operations
      WHERE resource_type = 'comment' AND resource_id = $1 AND type = 'comment.reply' AND id <> $2
        AND status = 'succeeded']], row.comment_id, row.id))
  local taken = {}
  for _, r in ipairs(rows) do if r.id then taken[r.id] = true end end
  return taken
end

-- The row has the account's columns (its environment and company are the
-- operation's: a client only reaches comments of its own environment).
local function context(row, payload)
  local account, err = adapters.account(row)
  if not account then return nil, err end
  return {
    account = account,
    comment = { platform_comment_id = row.platform_comment_id, platform_post_id = row.platform_post_id,
      parent_platform_comment_id = row.parent_platform_comment_id, can_hide = row.can_hide },
    message = payload.message,
    since = row.requested_at,
  }
end

-- What the platform should now say about the comment, as an observation.
local function observation(row, action)
  local o = { social_account_id = row.account_id, platform = row.platform, platform_post_id = row.platform_post_id,
    platform_comment_id = row.platform_comment_id, version = clock.now(),
    rank = RANK[action == "delete" and "remove" or action] }
  if action == "hide" or action == "unhide" then
    o.is_hidden = action == "hide"
  elseif action == "delete" then
    o.is_deleted = true
  end
  return o
end

-- The reply as a comment of its own, written by the account.
local function reply_observation(row, payload, outcome)
  local now = clock.now()
  return { social_account_id = row.account_id, platform = row.platform, platform_post_id = row.platform_post_id,
    platform_comment_id = outcome.platform_comment_id,
    parent_platform_comment_id = outcome.parent_platform_comment_id or row.platform_comment_id,
    text = payload.message, author_platform_id = row.platform_account_id,
    author_name = row.platform == "instagram" and row.username or row.name,
    is_from_account = true, is_hidden = false, like_count = 0, created_at = now, version = now, rank = RANK.add }
end

-- Inside the transaction that finished an operation: a bulk action it is an
-- item of follows it. (Required here: lib/comment_bulk.lua requires this file.)
local function finished(row)
  require("comment_bulk").item_finished(row.id)
end

local function client_of(row)
  return { company_id = row.company_id, environment = row.environment, client_id = row.client_id }
end

-- Records a success: the new state, the operation's result, and for a reply
-- social.comment.replied to the client that asked. Once, even if a run that
-- lost its lease gets here too.
local function succeed(row, payload, outcome)
  -- Who asked; a job queued before actors were recorded was the client's.
  local actor = payload.actor or { type = "client", id = row.client_id }
  -- A rule's changes say which rule and operation caused them (CONTRACT 12).
  local data = actor.type == "rule" and { ruleId = actor.id, operationId = row.id } or nil
  db.transaction(function()
    local op = assert(db.query("SELECT status FROM operations WHERE id = $1 FOR UPDATE", row.id))[1]
    if FINAL[op.status] then return end
    if payload.action ~= "reply" then
      comments.apply({ observation(row, payload.action) }, { actor = actor, data = data })
      operations.finish(row.id, "succeeded", { commentId = row.comment_id })
      return finished(row)
    end
    comments.apply({ reply_observation(row, payload, outcome) }, { actor = actor, data = data, created = false })
    -- The row may be older than this apply: Meta's webhook for the Page's own reply can be quicker.
    local id = assert(db.query([[SELECT id FROM comments
        WHERE social_account_id = $1 AND platform_comment_id = $2 AND company_id = $3]],
      row.account_id, outcome.platform_comment_id, row.company_id))[1].id
    local reply = comments.find(client_of(row), id)
    comment_changes.record(id, "replied", actor, data)
    operations.finish(row.id, "succeeded", { commentId = id, platformCommentId = outcome.platform_comment_id })
    events.emit(client_of(row), "social.comment.replied",
      { operationId = row.id, commentId = row.comment_id, reply = comments.present(reply) })
  end)
end

local function fail(row, e)
  db.transaction(function()
    local op = assert(db.query("SELECT status FROM operations WHERE id = $1 FOR UPDATE", row.id))[1]
    if FINAL[op.status] then return end
    operations.finish(row.id, "failed", nil, { code = e.code, message = e.message, platformCode = e.platform_code or json.null,
      platform = graph_errors.public_detail(e) })
    finished(row)
    if token_health.applies(e) then token_health.mark(row.account_id, e) end
  end)
end

-- The job's answer to an outcome after `attempts` attempts: done, retry
-- (publishing's classes, delays and cap), or fail.
local function settle(row, payload, outcome, attempts)
  if outcome.status == "done" then return succeed(row, payload, outcome) end
  if outcome.status == "unknown" then
    -- The reply may exist: the next run looks for it before anything else.
    return { retry_in = retry.delay(attempts, { retry_after = outcome.error and outcome.error.retry_after }) }
  end
  local e = outcome.error or { code = "platform_unavailable", message = "No answer from the platform." }
  -- A wait while Meta throttles the account or the app made no call: it is
  -- no attempt (the job's count stays), and the operation goes on when the
  -- pause ends.
  if e.paused then return { retry_in = e.retry_after, attempt = false } end
  if graph_errors.retryable(e.code) and retry.should_retry(e.code, attempts) then
    return { retry_in = retry.delay(attempts, { retry_after = e.retry_after }) }
  end
  fail(row, e)
end

-- The job (handlers/jobs/moderate_comment.lua): nil when the operation is
-- over, or {retry_in = s}. `attempts` counts the job's runs that were
-- attempts, this one included (a wait for a pause is none).
function M.run(payload, attempts)
  local row = begin(payload.operationId)
  if not row then return nil end
  if row.account_status == "reconnect_required" then
    return fail(row, token_health.stored_error(row.account_reason))
  elseif row.account_status ~= "active" then
    return fail(row, { code = "account_disconnected", message = "The social account was disconnected." })
  end
  local ctx, err = context(row, payload)
  if not ctx then return fail(row, { code = "token_expired", message = err }) end
  local adapter = adapters.for_account(ctx.account)

  if payload.action == "reply" and row.resumed then
    -- An earlier attempt may have replied without our hearing of it.
    ctx.taken = replies_of_others(row)
    local found, ferr = adapter.find_reply(ctx)
    if not found then return settle(row, payload, { status = "error", error = ferr }, attempts) end
    if found.status == "done" then return settle(row, payload, found, attempts) end
    if attempts > config.get("publishing.retry.max_attempts") then
      return fail(row, { code = "platform_unavailable", message = "The platform did not confirm the reply in "
        .. (attempts - 1) .. " attempts." })
    end
  end

  local outcome
  if payload.action == "reply" then
    outcome = adapter.reply(ctx)
  elseif payload.action == "delete" then
    outcome = adapter.delete(ctx)
  else
    outcome = adapter.set_hidden(ctx, payload.action == "hide")
  end
  return settle(row, payload, outcome, attempts)
end

return M

-- Bulk comment actions: POST /api/v1/comments/bulk (docs/comments.md, "Bulk
-- actions"). The request is checked whole before anything starts; then each
-- comment becomes an ordinary moderation operation and job
-- (lib/moderation.lua), so every item takes the same adapter calls, retries,
-- token-health rules and events as a single action, and a restart neither
-- repeats nor skips one. The comment.bulk operation follows its items: its
-- result lists each one as it settles, and it ends with the last.
local json = require "json"
local problem = require "problem"
local fields = require "fields"
local operations = require "operations"
local moderation = require "moderation"
local actors = require "actors"
local graph_errors = require "platforms.graph_errors"

local M = {}

M.MAX_ITEMS = 100
local ACTIONS = { hide = true, unhide = true, delete = true }
local VERB = { hide = "hidden", unhide = "unhidden", delete = "deleted" }
local FINAL = { succeeded = true, failed = true, cancelled = true }

local function pointer(i) return "/commentIds/" .. (i - 1) end

-- The body's shape, every problem at once; duplicates are refused so that
-- result.items matches commentIds one to one.
local function check_body(body)
  local errors = fields.check(body, {
    action = { type = "string", required = true, enum = ACTIONS },
    commentIds = { type = "array", required = true, min = 1, max = M.MAX_ITEMS },
  })
  local ids = type(body) == "table" and json.is_array(body.commentIds) and body.commentIds or {}
  local seen = {}
  for i, id in ipairs(ids) do
    if type(id) ~= "string" or id == "" or #id > 64 then
      -- Echoed back in errors: bounded like every id the API gives.
      errors[#errors + 1] = { field = pointer(i), code = "invalid_value", message = "A comment id is a string of 1 to 64 characters." }
    elseif seen[id] then
      errors[#errors + 1] = { field = pointer(i), code = "duplicate_comment",
        message = id .. " is listed already, at " .. pointer(seen[id]) .. "." }
    else
      seen[id] = i
    end
  end
  if #errors > 0 then
    problem.raise(422, "validation_failed", "The request has invalid fields.", { errors = errors })
  end
end

-- Refuses the whole request when any id is not a comment of the caller's
-- company and environment (404), or when a hide or unhide names the
-- account's own comments (422); returns the comments by id.
local function load(client, action, ids)
  local rows = assert(db.query([[SELECT id, company_id, is_from_account, is_deleted FROM comments
      WHERE id IN (SELECT jsonb_array_elements_text($1::jsonb)) AND company_id = $2 AND environment = $3]],
    ids, client.company_id, client.environment))
  local found = {}
  for _, r in ipairs(rows) do found[r.id] = r end
  local function refuse(status, code, test, detail, message)
    local errors, named = {}, {}
    for i, id in ipairs(ids) do
      if test(found[id]) then
        errors[#errors + 1] = { field = pointer(i), code = code, message = message .. " " .. id .. "." }
        named[#named + 1] = id
      end
    end
    if #errors > 0 then
      problem.raise(status, code, detail .. table.concat(named, ", ") .. ". Nothing was started.", { errors = errors })
    end
  end
  refuse(404, "not_found", function(c) return c == nil end,
    "No comment with these ids (for this company and environment): ", "No comment with the id")
  if action ~= "delete" then
    refuse(422, "cannot_hide_own_comment", function(c) return c.is_from_account and not c.is_deleted end,
      "The account wrote these comments itself, and its own comments cannot be hidden or unhidden: ",
      "The account wrote this comment itself:")
  end
  return found
end

-- ---------------------------------------------------------------- result

local ITEMS_SQL = [[
  SELECT i.comment_id, i.item_operation_id, i.error AS skipped, o.status, o.error
    FROM comment_bulk_items i LEFT JOIN operations o ON o.id = i.item_operation_id
   WHERE i.operation_id = $1 ORDER BY i.position]]

-- An item as the result shows it: skipped (nothing to do), pending, or the
-- outcome of its operation, with the error shape of post targets.
local function item(r)
  local out = { commentId = r.comment_id, operationId = r.item_operation_id or json.null, error = json.null }
  if not r.item_operation_id then
    out.status, out.error = "skipped", r.skipped
  elseif r.status == "succeeded" then
    out.status = "succeeded"
  elseif FINAL[r.status] then
    local e = r.error or {}
    out.status = "failed"
    out.error = { code = e.code or "cancelled", message = e.message or "The action was cancelled.",
      retryable = graph_errors.retryable(e.code), platformCode = e.platformCode or json.null }
  else
    out.status = "pending"
  end
  return out
end

-- Recomputes the bulk operation from its items, inside the caller's
-- transaction with the operation row locked: the result so far, or, once no
-- item is pending, the end (succeeded when no item failed).
local function settle(id, action)
  local items, counts = {}, { succeeded = 0, failed = 0, skipped = 0, pending = 0 }
  for i, r in ipairs(assert(db.query(ITEMS_SQL, id))) do
    items[i] = item(r)
    counts[items[i].status] = counts[items[i].status] + 1
  end
  local result = { items = json.array(items) }
  if counts.pending > 0 then
    operations.progress(id, result)
    if counts.succeeded + counts.failed > 0 then operations.set_running(id) end
  elseif counts.failed > 0 then
    operations.finish(id, "failed", result, { code = "items_failed", platformCode = json.null, platform = json.null,
      message = counts.failed .. " of " .. #items .. " comments could not be " .. VERB[action]
        .. "; result.items tells which and why." })
  else
    operations.finish(id, "succeeded", result, nil)
  end
end

-- Called by lib/moderation.lua in the transaction that finished an
-- operation: when that was an item, its bulk operation follows.
function M.item_finished(item_operation_id)
  local rows = assert(db.query([[SELECT o.id, o.status, o.result, b.type FROM comment_bulk_items i
      JOIN operations o ON o.id = i.operation_id JOIN operations b ON b.id = i.item_operation_id
     WHERE i.item_operation_id = $1 FOR UPDATE OF o]], item_operation_id))
  local bulk = rows[1]
  if not bulk or FINAL[bulk.status] then return end
  settle(bulk.id, bulk.type:match("^comment%.(.+)$"))
end

-- ---------------------------------------------------------------- request

local SKIPPED = { code = "comment_deleted", message = "The comment was deleted already; nothing to do.",
  retryable = false, platformCode = json.null }

-- The handler of POST /api/v1/comments/bulk: returns the 202 answer.
function M.request(req, ctx)
  local body = req.json
  check_body(body)
  local client, action, ids = ctx.client, body.action, body.commentIds
  local found = load(client, action, ids)
  local op_id = operations.new_id()
  local actor = actors.client(client)
  db.transaction(function()
    operations.create(client, "comment.bulk", "comment_bulk", op_id, op_id)
    for i, id in ipairs(ids) do
      local item_op = not found[id].is_deleted and moderation.create(client, found[id], action, actor) or nil
      assert(db.exec([[INSERT INTO comment_bulk_items (operation_id, position, comment_id, item_operation_id, error)
          VALUES ($1, $2, $3, $4, $5)]], op_id, i, id, item_op, not item_op and SKIPPED or nil))
    end
    settle(op_id, action)
  end)
  return 202, { requestId = req.id, operationId = op_id, status = "queued" }
end

return M

-- The company's comments as the workspace's Comments page shows them: the
-- API's inbox (lib/comment_inbox.lua) with each comment's post, account and
-- history; and reply / hide / unhide / delete through the API's own checks
-- and operations (lib/moderation.lua), asked for by the signed-in user.
local web = require "workspace.web"
local problem = require "problem"
local comments = require "comments"
local comment_inbox = require "comment_inbox"
local comment_audit = require "comment_audit"
local moderation = require "moderation"
local workspace_posts = require "workspace.posts"

local M = {}

M.PAGE_SIZE = 25

-- The filters of the page's form: the API's query parameters, so that a
-- link can be read against the API reference.
M.FILTERS = { "socialAccountId", "platform", "isHidden", "isDeleted", "isFromAccount", "q", "order" }

local ACTIONS = { reply = true, hide = true, unhide = true, delete = true }
local PLATFORMS = { facebook = "Facebook", instagram = "Instagram" }
local OUTCOMES = { ["comment.reply"] = "replied", ["comment.hide"] = "hid it", ["comment.unhide"] = "unhid it",
  ["comment.delete"] = "deleted it" }
local DONE = { reply = "Replied.", hide = "Hidden.", unhide = "Shown again.", delete = "Deleted." }
M.FINAL = { succeeded = true, failed = true, cancelled = true }

-- Runs fn; a problem it raises comes back as nil, problem (other errors go on).
local function refused(fn, ...)
  local ok, result = pcall(fn, ...)
  if ok then return result end
  if problem.is_problem(result) then return nil, result end
  error(result, 0)
end

local POST_SQL = [[
  SELECT t.permalink_url, p.content, a.name AS account_name, a.username
    FROM post_targets t JOIN posts p ON p.id = t.post_id JOIN social_accounts a ON a.id = t.social_account_id
   WHERE t.id = $1]]

-- Who a history entry names, in words.
local function actor_label(company_id, entry)
  local a = entry.actor
  if a.type == "user" then
    local u = web.rows("SELECT email FROM users WHERE id = $1 AND company_id = $2", a.id, company_id)[1]
    return u and u.email or "a former user"
  elseif a.type == "client" then
    local c = web.rows("SELECT name FROM api_clients WHERE id = $1 AND company_id = $2", a.id, company_id)[1]
    return "API client " .. (c and c.name or a.id)
  elseif a.type == "rule" then
    return "rule " .. a.id
  end
  return "the platform"
end

local function history(company_id, id)
  local list = comment_audit.history(id)
  for i, e in ipairs(list) do
    list[i] = { who = actor_label(company_id, e), what = OUTCOMES[e.action] or e.action,
      when = workspace_posts.readable(e.at), outcome = e.outcome }
  end
  return list
end

-- A comment row (comments.select_list) as the comment_row template shows it.
local function present(row)
  local post = web.rows(POST_SQL, row.post_target_id)[1] or {}
  local own, deleted = row.is_from_account == true, row.is_deleted == true
  local list = history(row.company_id, row.id)
  return {
    id = row.id, text = row.text or "", author = row.author_name ~= "" and row.author_name or nil,
    author_id = row.author_platform_id, created = workspace_posts.readable(row.created_at),
    platform_label = PLATFORMS[row.platform], hidden = row.is_hidden == true, deleted = deleted, own = own,
    reply_of = row.parent_platform_comment_id ~= nil and row.parent_platform_comment_id ~= "",
    account = row.platform == "instagram" and post.username and ("@" .. post.username) or post.account_name,
    post = post.content and workspace_posts.summary(post.content), permalink = post.permalink_url,
    can_hide = not deleted and not own and row.is_hidden ~= true, can_unhide = not deleted and not own and row.is_hidden == true,
    can_act = not deleted, history = list, history_count = #list, has_history = #list > 0,
  }
end

-- The query of the inbox from the page's (filters without a value are unset).
local function inbox_query(query)
  local q = { limit = tostring(M.PAGE_SIZE), cursor = query.cursor }
  for _, name in ipairs(M.FILTERS) do
    if query[name] ~= nil and query[name] ~= "" then q[name] = query[name] end
  end
  return q
end

-- One page of the inbox: the comments, the link to the next page (or nil),
-- or nil and the message of a filter the API would refuse.
function M.list(company_id, environment, query)
  local q = inbox_query(query)
  local f, err = refused(comment_inbox.parse, q)
  if not f then return nil, nil, err.detail end
  local rows, next_cursor = comment_inbox.list({ company_id = company_id, environment = environment }, f)
  local list = {}
  for i, r in ipairs(rows) do list[i] = present(r) end
  local next_href
  if next_cursor then
    local parts = { "env=" .. environment }
    for _, name in ipairs(M.FILTERS) do
      if q[name] then parts[#parts + 1] = name .. "=" .. web.url_escape(q[name]) end
    end
    parts[#parts + 1] = "cursor=" .. web.url_escape(next_cursor)
    next_href = "/workspace/comments?" .. table.concat(parts, "&")
  end
  return list, next_href
end

-- A comment of the company (either environment), with the API client of
-- its post, or nil.
local function load(company_id, id)
  if type(id) ~= "string" or #id > 64 then return nil end
  local row = comments.load(id)
  return row and row.company_id == company_id and row or nil
end

-- A comment of the company for the comment_row template, or nil.
function M.get(company_id, id)
  local row = load(company_id, id)
  return row and present(row)
end

-- The environment of a comment of the company, or nil.
function M.environment(company_id, id)
  local row = load(company_id, id)
  return row and row.environment
end

-- Asks for a moderation action as the API does, with the same refusals; the
-- operation is the post's API client's (it hears the events), the user is
-- who asked (history and change feed). Returns the operation id, or nil
-- and a problem (status, code, detail, opts.errors).
function M.moderate(session, id, action, message)
  local row = load(session.company_id, id)
  if not row then return nil, { status = 404, code = "not_found", detail = "There is no such comment, or it belongs to another company." } end
  if not ACTIONS[action] then
    return nil, { status = 400, code = "invalid_parameter", detail = "action must be reply, hide, unhide or delete." }
  end
  local body = action == "reply" and { message = message } or {}
  local _, err = refused(moderation.check, row, action, body)
  if err then return nil, err end
  local client = { company_id = row.company_id, environment = row.environment, client_id = row.client_id }
  local op_id = moderation.create(client, row, action, { type = "user", id = session.user_id },
    action == "reply" and message or nil)
  log.info("workspace_comment_" .. action, { userId = session.user_id, commentId = id, operationId = op_id })
  return op_id
end

-- How an operation of the company on this comment stands: {final, message}, or nil.
function M.outcome(company_id, comment_id, op_id)
  if type(op_id) ~= "string" or #op_id > 64 then return nil end
  local op = web.rows([[SELECT type, status, error->>'message' AS error FROM operations
      WHERE id = $1 AND company_id = $2 AND resource_type = 'comment' AND resource_id = $3]],
    op_id, company_id, comment_id)[1]
  if not op then return nil end
  local action = op.type:match("^comment%.(.*)$")
  if op.status == "succeeded" then return { final = true, message = DONE[action] } end
  if M.FINAL[op.status] then
    return { final = true, message = "It did not work: " .. (op.error or "the platform refused.") }
  end
  return { final = false, message = "Asking the platform…" }
end

return M

-- The company's posts as the workspace's Posts page shows them: one
-- environment, newest first, a page at a time, each with its targets; and
-- Retry, through the same code as POST /api/v1/posts/{postId}/retry.
local web = require "workspace.web"
local posts = require "posts"
local cursor = require "cursor"

local M = {}

M.PAGE_SIZE = 20

local PLATFORMS = { facebook = "Facebook", instagram = "Instagram" }
local CAN_RETRY = { failed = true, partially_published = true }
local SUMMARY_CHARS = 140

local TARGETS_SQL = [[
  SELECT t.id, t.platform, t.status, t.permalink_url, t.error, a.name AS account_name, a.username
    FROM post_targets t JOIN social_accounts a ON a.id = t.social_account_id
   WHERE t.post_id = $1 ORDER BY t.position]]

local function label(status) return (status:gsub("_", " ")) end

-- "2026-11-21T10:00:00.000Z" -> "2026-11-21 10:00 UTC".
local function readable(iso)
  return iso:sub(1, 10) .. " " .. iso:sub(12, 16) .. " UTC"
end
M.readable = readable

-- What a person recognises a post by: its words, else its link.
local function summary(content)
  local text = type(content.message) == "string" and content.message ~= "" and content.message
    or type(content.link) == "string" and content.link or "(image without caption)"
  if utf8.len(text) and utf8.len(text) > SUMMARY_CHARS then
    text = text:sub(1, utf8.offset(text, SUMMARY_CHARS + 1) - 1) .. "…"
  end
  return text
end
M.summary = summary

local function present_target(t)
  local err = type(t.error) == "table" and t.error or nil
  return {
    platform_label = PLATFORMS[t.platform], account = t.platform == "instagram" and t.username and ("@" .. t.username)
      or t.account_name, status = t.status, status_label = label(t.status), permalink = t.permalink_url,
    error = err and { code = err.code, message = err.message } or nil,
  }
end

-- A post as the post_row template shows it.
local function present(client, id)
  local post = posts.find(client, id)
  local targets = web.rows(TARGETS_SQL, post.id)
  for i, t in ipairs(targets) do targets[i] = present_target(t) end
  return {
    id = post.id, status = post.status, status_label = label(post.status), environment = post.environment,
    created = readable(post.created_at), kind = post.content.type, summary = summary(post.content),
    reference = post.external_reference, targets = targets, can_retry = CAN_RETRY[post.status] == true,
    final = posts.FINAL_POST[post.status] == true,
  }
end

-- Which environment and API client a post of the company belongs to, or nil.
local function owner(company_id, id)
  if type(id) ~= "string" or #id > 64 then return nil end
  local rows = web.rows("SELECT environment, client_id FROM posts WHERE id = $1 AND company_id = $2", id, company_id)
  return rows[1] and { company_id = company_id, environment = rows[1].environment, client_id = rows[1].client_id }
end

-- A post of the company (either environment) for the post_row template, or nil.
function M.get(company_id, id)
  local client = owner(company_id, id)
  return client and present(client, id)
end

-- One page of posts; `before` is the "Older posts" link's position (a
-- cursor as the API gives out; a forged one starts at the newest).
function M.list(company_id, environment, before)
  local client = { company_id = company_id, environment = environment }
  local after = before and cursor.decode(before, { t = "time", id = "id" })
  local ids, next_position = posts.page(client, nil, after, M.PAGE_SIZE)
  local list = {}
  for i, id in ipairs(ids) do list[i] = present(client, id) end
  return list, next_position and cursor.encode(next_position)
end

-- Retry as the API does it. The operation belongs to the API client that
-- created the post, so that client follows it and hears social.post.published.
-- Returns the operation id, or nil and "not_found" / "nothing_to_retry".
function M.retry(session, id)
  local client = owner(session.company_id, id)
  if not client then return nil, "not_found" end
  local op_id, err = posts.retry_by_id(client, id)
  if op_id then
    log.info("workspace_post_retry", { userId = session.user_id, postId = id, operationId = op_id })
  end
  return op_id, err
end

return M

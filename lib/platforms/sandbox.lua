-- The sandbox simulator: test accounts publish here, never to a platform.
-- Platform rules were applied when the post was created; what is left to
-- simulate is the platform's answer, including the failures a test scripted
-- with POST /api/v1/sandbox/failures.
local sandbox_pages = require "sandbox_pages"

local M = {}

local function digits(n)
  local t = {}
  for i = 1, n do t[i] = tostring(math.random(i == 1 and 1 or 0, 9)) end
  return table.concat(t)
end

local MESSAGES = {
  rate_limited = "Simulated: the platform's request limit was reached.",
  platform_unavailable = "Simulated: the platform is temporarily unavailable.",
  token_expired = "Simulated: the account's access token has expired.",
  permission_missing = "Simulated: the account lacks the permission to publish.",
  media_rejected = "Simulated: the platform rejected the media.",
  content_rejected = "Simulated: the platform rejected the content.",
  duplicate_content = "Simulated: the platform refused a duplicate post.",
}
M.ERROR_CLASSES = MESSAGES

-- A publication's permalink: its page on the gateway (lib/sandbox_pages.lua);
-- one made before those pages existed keeps the platform-shaped URL it was given.
local function permalink_of(account, id, token)
  if token then return sandbox_pages.url(token) end
  if account.platform == "facebook" then
    return "https://www.facebook.com/" .. account.platform_account_id .. "/posts/" .. id:match("_(%d+)$")
  end
  return "https://www.instagram.com/p/sandbox" .. id:sub(-8) .. "/"
end

-- Takes one scripted failure for the account, if any remains.
local function scripted_failure(account_id)
  local rows = assert(db.query([[UPDATE sandbox_failures SET remaining = remaining - 1
      WHERE social_account_id = $1 AND remaining > 0 RETURNING error_class]], account_id))
  return rows[1] and rows[1].error_class
end

-- The error outcome of the next scripted failure, if one remains.
local function scripted_error(account_id)
  local class = scripted_failure(account_id)
  if not class then return nil end
  return { status = "error", error = { code = class, message = MESSAGES[class] or class,
    platform_code = "sandbox", retry_after = class == "rate_limited" and 1 or nil } }
end

function M.publish(ctx)
  local failed = scripted_error(ctx.account.id)
  if failed then return failed end
  local id
  if ctx.account.platform == "facebook" then
    id = ctx.account.platform_account_id .. "_" .. digits(16)
  else
    id = digits(17)
  end
  local token = sandbox_pages.new_token()
  assert(db.exec([[INSERT INTO sandbox_publications (platform_post_id, social_account_id, post_target_id, message,
      page_token) VALUES ($1, $2, $3, $4, $5)]],
    id, ctx.account.id, ctx.target.id, ctx.post.content and ctx.post.content.message, token))
  return { status = "published", platform_post_id = id, permalink_url = permalink_of(ctx.account, id, token) }
end

-- Like a platform, the simulator can say whether an interrupted attempt
-- published after all.
function M.resolve(ctx)
  local rows = assert(db.query([[SELECT platform_post_id, page_token FROM sandbox_publications
      WHERE post_target_id = $1 ORDER BY created_at LIMIT 1]], ctx.target.id))
  if not rows[1] then return { status = "not_found" } end
  local id = rows[1].platform_post_id
  return { status = "published", platform_post_id = id, permalink_url = permalink_of(ctx.account, id, rows[1].page_token) }
end

-- Comments: the simulator keeps no comments of its own (sgw's comments table
-- is the only record), so a reply just gets a platform-shaped id, and hiding
-- or deleting succeeds, unless a scripted failure says otherwise.
function M.reply(ctx)
  local failed = scripted_error(ctx.account.id)
  if failed then return failed end
  local c = ctx.comment
  local parent = c.platform_comment_id
  local id = digits(18)
  if ctx.account.platform == "facebook" then
    parent = c.parent_platform_comment_id or c.platform_comment_id -- threads are one level deep
    id = c.platform_post_id:match("_(%d+)$") .. "_" .. digits(16)
  end
  return { status = "done", platform_comment_id = id, parent_platform_comment_id = parent }
end

-- The simulator always answers, so no reply is ever in doubt.
function M.find_reply()
  return { status = "not_found" }
end

function M.set_hidden(ctx)
  return scripted_error(ctx.account.id) or { status = "done" }
end

function M.delete(ctx)
  return scripted_error(ctx.account.id) or { status = "done" }
end

-- Sandbox comments arrive through POST /api/v1/sandbox/comments only.
function M.fetch_comments()
  return { observations = {}, usage = { app = 0, account = 0 } }
end

return M

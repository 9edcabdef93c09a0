-- The sandbox simulator: test accounts publish here, never to a platform.
-- Platform rules were applied when the post was created; what is left to
-- simulate is the platform's answer, including the failures a test scripted
-- with POST /api/v1/sandbox/failures.
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

-- Takes one scripted failure for the account, if any remains.
local function scripted_failure(account_id)
  local rows = assert(db.query([[UPDATE sandbox_failures SET remaining = remaining - 1
      WHERE social_account_id = $1 AND remaining > 0 RETURNING error_class]], account_id))
  return rows[1] and rows[1].error_class
end

function M.publish(ctx)
  local class = scripted_failure(ctx.account.id)
  if class then
    return { status = "error", error = { code = class, message = MESSAGES[class] or class,
      platform_code = "sandbox", retry_after = class == "rate_limited" and 1 or nil } }
  end
  local id, permalink
  if ctx.account.platform == "facebook" then
    id = ctx.account.platform_account_id .. "_" .. digits(16)
    permalink = "https://www.facebook.com/" .. ctx.account.platform_account_id .. "/posts/" .. id:match("_(%d+)$")
  else
    id = digits(17)
    permalink = "https://www.instagram.com/p/sandbox" .. id:sub(-8) .. "/"
  end
  return { status = "published", platform_post_id = id, permalink_url = permalink }
end

-- The simulator answers at once, so an attempt left 'publishing' by a
-- crash never reached it.
function M.resolve()
  return { status = "not_found" }
end

return M

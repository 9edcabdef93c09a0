-- POST /api/v1/sandbox/comments {"postTargetId","text","authorName",
-- "parentCommentId","fromAccount"}: a comment on a published test target,
-- entering exactly as a platform's would: as a Meta webhook change, through
-- meta_webhooks and comments.apply. Synchronous, so the caller gets it back.
local problem = require "problem"
local fields = require "fields"
local comments = require "comments"
local meta_webhooks = require "meta_webhooks"

local SPEC = {
  postTargetId = { type = "string", required = true, max = 64 },
  text = { type = "string", required = true, min = 1, max = 8000 },
  authorName = { type = "string", min = 1, max = 200 },
  parentCommentId = { type = "string", max = 64 },
  fromAccount = { type = "boolean" },
}

local function digits(n)
  local t = { tostring(math.random(1, 9)) }
  for i = 2, n do t[i] = tostring(math.random(0, 9)) end
  return table.concat(t)
end

local function refuse(errors)
  problem.raise(422, "validation_failed", "The request has invalid fields.", { errors = errors })
end

-- The published target of the caller's company and environment, with its account.
local function find_target(client, id)
  local rows = assert(db.query([[SELECT t.id, t.platform, t.platform_post_id, t.social_account_id,
        a.platform_account_id, a.name AS account_name, a.username
      FROM post_targets t JOIN social_accounts a ON a.id = t.social_account_id
      WHERE t.id = $1 AND t.company_id = $2 AND t.environment = $3 AND t.status = 'published']],
    id, client.company_id, client.environment))
  return rows[1]
end

-- The delivery Meta would send for this comment.
local function delivery_for(target, body, parent, now)
  local account = target.platform_account_id
  local from_id = body.fromAccount and account or digits(target.platform == "facebook" and 15 or 17)
  if target.platform == "facebook" then
    local comment_id = target.platform_post_id:match("_(%d+)$") .. "_" .. digits(16)
    return { object = "page", entry = { { id = account, time = now, changes = { { field = "feed", value = {
      from = { id = from_id, name = body.fromAccount and target.account_name or (body.authorName or "Sandbox User") },
      post_id = target.platform_post_id, comment_id = comment_id,
      parent_id = parent and parent.platform_comment_id or target.platform_post_id,
      created_time = now, item = "comment", verb = "add", message = body.text } } } } } }
  end
  return { object = "instagram", entry = { { id = account, time = now, changes = { { field = "comments", value = {
    from = { id = from_id, username = body.fromAccount and (target.username or target.account_name)
      or (body.authorName or "sandbox_user") },
    media = { id = target.platform_post_id, media_product_type = "FEED" },
    id = digits(18), parent_id = parent and parent.platform_comment_id or nil, text = body.text } } } } } }
end

return function(req, ctx)
  local body = req.json
  local errors = fields.check(body, SPEC)
  if #errors > 0 then refuse(errors) end
  local target = find_target(ctx.client, body.postTargetId)
  if not target then
    refuse({ { field = "/postTargetId", code = "invalid_value", message = "No published post target of yours with this id." } })
  end
  local parent
  if body.parentCommentId then
    parent = comments.find(ctx.client, body.parentCommentId)
    if not parent or parent.post_target_id ~= target.id then
      refuse({ { field = "/parentCommentId", code = "invalid_value", message = "No comment with this id on this post target." } })
    end
  end
  -- Fractional seconds keep comments made in the same second in order.
  local delivery = delivery_for(target, body, parent, clock.now())
  local created
  db.transaction(function()
    local observations = meta_webhooks.normalize(delivery, function(platform, platform_account_id)
      if platform == target.platform and platform_account_id == target.platform_account_id then
        return { target.social_account_id }
      end
      return {}
    end)
    local changed
    created, changed = comments.apply(observations)
    comments.announce(created, changed)
  end)
  assert(created[1], "the sandbox comment was not created")
  return 201, comments.present(created[1])
end

-- POST /api/v1/posts: validate every rule at once, then store the post, its
-- targets, its operation and their jobs in one transaction; 202.
local problem = require "problem"
local post_rules = require "post_rules"
local posts = require "posts"
local accounts = require "accounts"
local media = require "media"
local image_url = require "image_url"

return {
  -- Validation may fetch the image of an Instagram post, a network call, so it runs
  -- before the transaction that stores the post and the Idempotency-Key's response.
  prepare = function(req, ctx)
    local client = ctx.client
    local env = {
      now = clock.now(),
      max_schedule_days = config.get("publishing.max_schedule_days"),
      find_account = function(id) return accounts.find_active(client, id) end,
      find_upload = function(id) return media.find_upload(client, id) end,
      fetch_image = image_url.fetch,
    }
    local v, errors = post_rules.validate(req.json, env)
    if errors and #errors > 0 then
      problem.raise(422, "validation_failed", "The post has " .. #errors .. " invalid field(s); see errors.", { errors = errors })
    end
    ctx.post = v
  end,

  handle = function(req, ctx)
    local v = ctx.post
    local post_id, op_id = posts.create(ctx.client, v, req.json)
    return 202, {
      requestId = req.id, operationId = op_id, status = "queued",
      externalReference = v.external_reference or require("json").null,
      resource = { postId = post_id },
    }
  end,
}

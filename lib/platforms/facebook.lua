-- Facebook Pages adapter (docs/publishing.md): one Graph call publishes a
-- post; an attempt whose answer never came is resolved by looking for the
-- post among what the Page published since.
local graph = require "platforms.graph"

local M = {}

-- The edge and parameters that publish each content type.
local function request_for(post)
  local content = post.content
  if content.type == "image" then
    return "photos", { url = post.image and post.image.url, caption = content.message }
  elseif content.type == "link" then
    return "feed", { message = content.message, link = content.link }
  end
  return "feed", { message = content.message }
end

function M.publish(ctx)
  local page, token = ctx.account.platform_account_id, ctx.account.access_token
  local edge, params = request_for(ctx.post)
  local created, err, sent = graph.call("POST", page .. "/" .. edge, params, token)
  if not created then return graph.failed(err, sent) end
  -- A photo answers {id = photo, post_id = page post}; the feed {id = page post}.
  local id = created.post_id or created.id
  if not id then return graph.failed({ message = "No post id in Meta's answer." }, true) end
  return graph.published(id, graph.permalink(id, "permalink_url", token))
end

-- Photos show up among the Page's posts too, with the caption as message. A
-- link without a message matches a post without one made in that window.
function M.resolve(ctx)
  local page, token = ctx.account.platform_account_id, ctx.account.access_token
  local found, err = graph.find_recent(page .. "/published_posts", token, {
    fields = "id,message,created_time", text_field = "message", time_field = "created_time",
    text = ctx.post.content.message, since = ctx.target.attempt_started_at,
  })
  if found == nil then return nil, err end
  if not found then return graph.not_found() end
  return graph.published(found.id, graph.permalink(found.id, "permalink_url", token))
end

return M

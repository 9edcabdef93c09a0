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

-- Comments (docs/comments.md) ----------------------------------------------
-- ctx: account, comment ({platform_comment_id, parent_platform_comment_id,
-- platform_post_id}), message (a reply), since and taken (find_reply).

-- Facebook threads are one level deep: a reply to a reply goes to the
-- thread's top-level comment, where Meta would put it anyway.
local function thread_of(comment)
  return comment.parent_platform_comment_id or comment.platform_comment_id
end

function M.reply(ctx)
  local thread = thread_of(ctx.comment)
  local created, err, sent = graph.call("POST", thread .. "/comments", { message = ctx.message }, ctx.account.access_token)
  if not created then return graph.failed(err, sent) end
  if not created.id then return graph.failed({ message = "No comment id in Meta's answer." }, true) end
  return graph.done(created.id, thread)
end

-- After a reply whose answer was lost: the Page's reply with this message,
-- made since the operation began, that no other operation has claimed.
function M.find_reply(ctx)
  local page = ctx.account.platform_account_id
  local found, err = graph.find_recent(thread_of(ctx.comment) .. "/comments", ctx.account.access_token, {
    fields = "id,message,from{id},created_time", params = { order = "reverse_chronological" },
    text_field = "message", time_field = "created_time", text = ctx.message, since = ctx.since,
    accept = function(c)
      return type(c.from) == "table" and c.from.id == page and not (ctx.taken or {})[c.id]
    end,
  })
  if found == nil then return nil, err end
  if not found then return graph.not_found() end
  return graph.done(found.id, thread_of(ctx.comment))
end

-- Meta asks to read the comment's can_hide before hiding it: some comments
-- cannot be hidden by the Page (its own, and others Meta decides), and the
-- answer then says why in sgw's words instead of Meta's bare code 100. One
-- the comment sync read as hideable (ctx.comment.can_hide) is not read
-- again; showing a comment again needs no check.
function M.set_hidden(ctx, hidden)
  if hidden and ctx.comment.can_hide ~= true then
    local comment, err = graph.call("GET", ctx.comment.platform_comment_id, { fields = "can_hide" },
      ctx.account.access_token)
    if not comment then return graph.settled(nil, err) end
    if comment.can_hide == false then
      return graph.error("content_rejected", "Meta does not let the Page hide this comment (its can_hide is "
        .. "false), so it was not asked to; the comment is unchanged.")
    end
  end
  return graph.set_comment_hidden(ctx, "is_hidden", hidden)
end

M.delete = graph.delete_comment

local FETCH_FIELDS = "id,message,from{id,name},created_time,like_count,is_hidden,can_hide,parent{id}"

local function boolean_or_nil(v)
  if type(v) == "boolean" then return v end
  return nil
end

-- One page of every comment on the post, replies included (filter=stream),
-- oldest first. ctx: account, target.platform_post_id, version, rank.
-- Returns { observations, cursor (nil on the last page), usage } or nil, err, usage.
function M.fetch_comments(ctx, cursor)
  local page = ctx.account.platform_account_id
  local value, err, _, headers = graph.call("GET", ctx.target.platform_post_id .. "/comments", {
    filter = "stream", order = "chronological", fields = FETCH_FIELDS, limit = 100, after = cursor,
  }, ctx.account.access_token)
  local usage = graph.usage(headers)
  if not value then return nil, err, usage end
  local observations = {}
  for _, c in ipairs(type(value.data) == "table" and value.data or {}) do
    -- Meta leaves out `from` for people who have not allowed it; never the Page.
    local from = type(c.from) == "table" and c.from or {}
    observations[#observations + 1] = graph.observation(ctx, {
      platform_comment_id = c.id,
      parent_platform_comment_id = type(c.parent) == "table" and c.parent.id or nil,
      text = type(c.message) == "string" and c.message or "",
      author_platform_id = from.id, author_name = from.name,
      is_from_account = from.id == page,
      is_hidden = c.is_hidden == true,
      can_hide = boolean_or_nil(c.can_hide),
      like_count = math.tointeger(tonumber(c.like_count)),
      created_at = graph.parse_time(c.created_time),
    })
  end
  return { observations = observations, cursor = graph.next_cursor(value), usage = usage }
end

return M

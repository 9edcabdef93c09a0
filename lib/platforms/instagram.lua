-- Instagram adapter (docs/publishing.md): three steps, with the container
-- remembered in the target's adapter_state so that a container is never
-- published twice; a target gets another only when its container expired
-- unpublished or was not ready after the longest wait.
--
--   1. POST /{ig-user}/media (image_url, caption) -> container; saved at once.
--      It is counted against Meta's limit of containers per account before
--      it is asked for: a used-up limit is a wait, like the publishing quota.
--   2. GET /{container}?fields=status_code until FINISHED, first a while after
--      the container was made, then once per poll interval, as Meta asks. Until
--      then publish returns {status = "retry_later", retry_in = seconds} and
--      the job calls publish again later with the saved state.
--   3. POST /{ig-user}/media_publish (creation_id) -> media id, once the
--      publishing quota has room (platforms.instagram_quota): a used-up quota
--      is a wait until the window frees, checked before the container is made
--      (no container left to expire while waiting) and again before publishing.
--
-- A container already PUBLISHED means the media exists: find it, publish nothing.
-- One that EXPIRED (never published) is replaced by a new one, and so is one
-- still not ready after the longest wait (Meta asks to poll a container for
-- at most 5 minutes): that attempt fails retryable, the next one starts anew.
local graph = require "platforms.graph"
local graph_errors = require "platforms.graph_errors"
local quota = require "platforms.instagram_quota"

local M = {}

-- Subcodes of media_publish errors after which the container may have been
-- published all the same, so its status is asked before anything else:
-- 2207008 (a temporary error; also what a container published already
-- gets) and 2207051 (suspected spam: the post can be live regardless).
local ASK_CONTAINER = { [2207008] = true, [2207051] = true }
-- The container expired before it was published (Meta: make a new one).
local EXPIRED = 2207020

-- The container's status_code, and Meta's words about it.
local function container_status(container, token)
  local value, err = graph.call("GET", container, { fields = "status_code,status" }, token)
  if not value then return nil, err end
  return value.status_code, value.status
end

-- The media a PUBLISHED container became. Not in the listing (deleted by
-- hand already, or the listing lags): published all the same, id unknown.
local function published_media(ctx, token)
  local state = ctx.target.adapter_state
  local media, err = graph.find_recent(ctx.account.platform_account_id .. "/media", token, {
    fields = "id,caption,timestamp", text_field = "caption", time_field = "timestamp",
    text = ctx.post.content.message,
    since = state.container_created_at or ctx.target.attempt_started_at,
  })
  if media == nil then return nil, err end
  if not media then
    log.warn("instagram_media_not_found", { targetId = ctx.target.id, containerId = state.container_id })
    return graph.published(nil, nil)
  end
  return graph.published(media.id, graph.permalink(media.id, "permalink", token))
end

-- In publish: a media that exists, or an unknown outcome while we cannot find out.
local function existing_media(ctx, token)
  local outcome, err = published_media(ctx, token)
  return outcome or graph.failed(err, true)
end

-- Saves these fields of the target's adapter_state at once, and keeps them
-- in this run's copy too.
local function remember(ctx, fields)
  ctx.save_state(fields)
  for k, v in pairs(fields) do ctx.target.adapter_state[k] = v end
end

-- The container of this target: the saved one, or a new one saved before
-- anything else happens.
local function container_of(ctx, token)
  local state = ctx.target.adapter_state
  if state.container_id then return state.container_id end
  local slot, wait = quota.reserve_container(ctx.account, ctx.target.id)
  if not slot then return nil, wait end
  local created, err, sent = graph.call("POST", ctx.account.platform_account_id .. "/media", {
    image_url = ctx.post.image and ctx.post.image.url, caption = ctx.post.content.message,
  }, token)
  -- A container nobody publishes does no harm: a lost answer is just an
  -- error (whose container still counts against Meta's limit).
  if not created then
    if not sent then quota.release_container(slot) end
    return nil, err
  end
  if not created.id then return nil, { code = "platform_unavailable", message = "No container id in Meta's answer." } end
  remember(ctx, { container_id = created.id, container_created_at = clock.now() })
  return created.id
end

-- A container that expired was never published: the target goes on with a
-- new one, which cannot make a second post.
local function renew(ctx)
  log.info("instagram_container_renewed", { targetId = ctx.target.id, containerId = ctx.target.adapter_state.container_id })
  remember(ctx, { container_id = false, container_created_at = false })
  return ctx
end

-- A container Instagram could not prepare: `status` carries the subcode
-- ("Error: ... error code 2207009"), classified like the same error from a call.
local function container_error(detail)
  local subcode = math.tointeger(tonumber(tostring(detail or ""):match("(22%d%d%d%d%d)")))
  local err = graph_errors.classify({ error_subcode = subcode,
    message = "Instagram could not prepare the media: " .. tostring(detail or "ERROR") })
  if err.code ~= "content_rejected" then err.code = "media_rejected" end
  return err
end

function M.publish(ctx)
  local token = ctx.account.access_token
  ctx.target.adapter_state = ctx.target.adapter_state or {}
  local first_run = not ctx.target.adapter_state.container_id
  if first_run then
    local wait = quota.check(ctx.account)
    if wait then return { status = "error", error = wait } end
  end
  local container, err = container_of(ctx, token)
  if not container then return graph.failed(err, false) end
  -- Meta asks for one status query a minute: the first is spent when the
  -- container has had time to be ready, not the moment it was made.
  if first_run then
    return { status = "retry_later", retry_in = config.get("meta.instagram_container_first_poll_seconds") }
  end

  -- resolve, in this same run, may have just read it: Meta asks for one
  -- status query a poll, not two a moment apart.
  local status, detail
  if ctx.container_status and ctx.container_status.id == container then
    status, detail = ctx.container_status.status, ctx.container_status.detail
  else
    status, detail = container_status(container, token)
  end
  ctx.container_status = nil
  if not status then return graph.failed(detail, false) end
  if status == "PUBLISHED" then
    return existing_media(ctx, token)
  elseif status == "EXPIRED" then
    return M.publish(renew(ctx))
  elseif status == "ERROR" then
    return { status = "error", error = container_error(detail) }
  elseif status ~= "FINISHED" then
    local waited = clock.now() - (ctx.target.adapter_state.container_created_at or clock.now())
    if waited >= config.get("meta.instagram_container_max_wait_seconds") then
      renew(ctx)
      return graph.error("platform_unavailable", "Instagram had not prepared the media after "
        .. math.floor(waited) .. " s (container " .. tostring(status) .. "); the next attempt makes a new container.")
    end
    return { status = "retry_later", retry_in = config.get("meta.instagram_container_poll_seconds") }
  end

  local wait = quota.check(ctx.account)
  if wait then return { status = "error", error = wait } end
  local published, perr, sent = graph.call("POST", ctx.account.platform_account_id .. "/media_publish",
    { creation_id = container }, token)
  local subcode = perr and perr.platform and perr.platform.subcode
  if ASK_CONTAINER[subcode] then
    local now_status = container_status(container, token)
    if now_status == "PUBLISHED" then return existing_media(ctx, token) end
    -- Cannot tell, or Meta said published already (9007) while the status
    -- lags: the next run asks again before anything else.
    if now_status == nil or perr.platform.code == 9007 then return graph.failed(perr, true) end
  end
  if subcode == EXPIRED then return M.publish(renew(ctx)) end
  if quota.is_quota_error(perr) then return { status = "error", error = quota.exhausted(ctx.account, perr) } end
  if not published then return graph.failed(perr, sent) end
  quota.published(ctx.account)
  if not published.id then return graph.failed({ message = "No media id in Meta's answer." }, true) end
  return graph.published(published.id, graph.permalink(published.id, "permalink", token))
end

-- After an unknown outcome the container's status tells: PUBLISHED means the
-- media exists; anything else means the next attempt goes on with the same
-- container (and reports ERROR or EXPIRED itself, or gives it up when it is
-- still not ready after the longest wait).
function M.resolve(ctx)
  local state = ctx.target.adapter_state or {}
  ctx.target.adapter_state = state
  if not state.container_id then return graph.not_found() end
  local status, err = container_status(state.container_id, ctx.account.access_token)
  if not status then return nil, err end
  if status == "PUBLISHED" then return published_media(ctx, ctx.account.access_token) end
  -- For publish, which comes next in this run (a container waiting for
  -- Meta comes back here every poll): it need not ask again.
  ctx.container_status = { id = state.container_id, status = status, detail = err }
  return graph.not_found()
end

-- Comments (docs/comments.md) ----------------------------------------------
-- ctx as in facebook.lua. Instagram takes replies to top-level comments only;
-- the API refuses others before they get here.

function M.reply(ctx)
  local comment = ctx.comment.platform_comment_id
  local created, err, sent = graph.call("POST", comment .. "/replies", { message = ctx.message }, ctx.account.access_token)
  if not created then return graph.failed(err, sent) end
  if not created.id then return graph.failed({ message = "No comment id in Meta's answer." }, true) end
  return graph.done(created.id, comment)
end

-- Is this comment the account's own? `from` when Meta gives it, else the username.
local function from_account(account, c)
  if type(c.from) == "table" and c.from.id then return c.from.id == account.platform_account_id end
  return account.username ~= nil and c.username == account.username
end

-- The account's reply with this message since the operation began, that no
-- other operation has claimed. Replies come oldest first: read them all.
function M.find_reply(ctx)
  local comment = ctx.comment.platform_comment_id
  local found, err = graph.find_recent(comment .. "/replies", ctx.account.access_token, {
    fields = "id,text,username,from{id},timestamp", oldest_first = true, pages = 10,
    text_field = "text", time_field = "timestamp", text = ctx.message, since = ctx.since,
    accept = function(c) return from_account(ctx.account, c) and not (ctx.taken or {})[c.id] end,
  })
  if found == nil then return nil, err end
  if not found then return graph.not_found() end
  return graph.done(found.id, comment)
end

function M.set_hidden(ctx, hidden)
  return graph.set_comment_hidden(ctx, "hide", hidden)
end

M.delete = graph.delete_comment

local REPLY_FIELDS = "id,text,username,from{id,username},timestamp,like_count,hidden"
local FETCH_FIELDS = "id,text,username,from{id,username},timestamp,like_count,hidden,parent_id,replies{"
  .. REPLY_FIELDS .. "}"
-- Most extra pages of replies read for one comment in one fetch.
local REPLY_PAGES = 10

local function observe(ctx, c, parent)
  local from = type(c.from) == "table" and c.from or {}
  return graph.observation(ctx, {
    platform_comment_id = c.id,
    parent_platform_comment_id = parent or c.parent_id,
    text = type(c.text) == "string" and c.text or "",
    author_platform_id = from.id, author_name = c.username or from.username,
    is_from_account = from_account(ctx.account, c),
    is_hidden = c.hidden == true,
    like_count = math.tointeger(tonumber(c.like_count)),
    created_at = graph.parse_time(c.timestamp),
  })
end

-- Replies beyond those Meta embeds in a comment, page by page. The fourth
-- result says whether every reply was read (false: REPLY_PAGES ran out).
local function more_replies(ctx, comment_id, cursor, out)
  local usage
  for _ = 1, REPLY_PAGES do
    if not cursor then break end
    local value, err, _, headers = graph.call("GET", comment_id .. "/replies",
      { fields = REPLY_FIELDS, limit = 50, after = cursor }, ctx.account.access_token)
    usage = graph.max_usage(usage, graph.usage(headers))
    if not value then return nil, err, usage end
    for _, r in ipairs(type(value.data) == "table" and value.data or {}) do out[#out + 1] = observe(ctx, r, comment_id) end
    cursor = graph.next_cursor(value)
  end
  return true, nil, usage, cursor == nil
end

-- One page of top-level comments with their replies. ctx: account,
-- target.platform_post_id, version, rank. Returns { observations, cursor,
-- usage, partial } or nil, err, usage; partial: some comment had more
-- replies than one fetch reads, so the page does not list all it covers.
function M.fetch_comments(ctx, cursor)
  local value, err, _, headers = graph.call("GET", ctx.target.platform_post_id .. "/comments",
    { fields = FETCH_FIELDS, limit = 50, after = cursor }, ctx.account.access_token)
  local usage = graph.usage(headers)
  if not value then return nil, err, usage end
  local observations, partial = {}, false
  for _, c in ipairs(type(value.data) == "table" and value.data or {}) do
    observations[#observations + 1] = observe(ctx, c)
    local replies = type(c.replies) == "table" and c.replies or {}
    for _, r in ipairs(type(replies.data) == "table" and replies.data or {}) do
      observations[#observations + 1] = observe(ctx, r, c.id)
    end
    local ok, rerr, rusage, whole = more_replies(ctx, c.id, graph.next_cursor(replies), observations)
    usage = graph.max_usage(usage, rusage)
    if not ok then return nil, rerr, usage end
    partial = partial or not whole
  end
  return { observations = observations, cursor = graph.next_cursor(value), usage = usage, partial = partial }
end

return M

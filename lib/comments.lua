-- Comments: the one write path (apply), how they are shown, found and listed.
-- See docs/comments.md.
local json = require "json"
local json_shapes = require "json_shapes"
local sqltime = require "sqltime"
local events = require "events"
local reads = require "reads"
local posts = require "posts"

local M = {}

local COLUMNS = { "id", "company_id", "environment", "post_target_id", "post_id", "social_account_id", "platform",
  "platform_comment_id", "platform_post_id", "parent_platform_comment_id", "text", "author_platform_id",
  "author_name", "is_from_account", "is_hidden", "is_deleted", "like_count" }

-- What present reads: the columns of a listing, where nothing else is needed.
local SHOWN = {}
for _, c in ipairs(COLUMNS) do
  if c ~= "company_id" and c ~= "environment" and c ~= "post_id" then SHOWN[#SHOWN + 1] = c end
end

local function prefixed(prefix, columns)
  local out = {}
  for i, c in ipairs(columns or COLUMNS) do out[i] = prefix .. c end
  return out
end

-- The select list of a Comment row, columns prefixed (e.g. "c."); with
-- shown_only, just what present needs.
function M.select_list(prefix, shown_only)
  local out = prefixed(prefix, shown_only and SHOWN)
  out[#out + 1] = sqltime.iso(prefix .. "created_at", "created_at")
  out[#out + 1] = sqltime.iso(prefix .. "updated_at", "updated_at")
  return table.concat(out, ", ")
end

-- The columns select_list reads, unformatted: for a subquery that picks the
-- rows, so that only the rows kept are formatted by the query around it.
function M.plain_list(prefix)
  local out = prefixed(prefix)
  out[#out + 1] = prefix .. "created_at"
  out[#out + 1] = prefix .. "updated_at"
  return table.concat(out, ", ")
end

-- How each column of an existing row takes an observation (`excluded`).
-- Fields with a version change only for a strictly newer observation, the
-- version being (seconds, rank), so a redelivery or an older change that
-- arrives late is a no-op; nil keeps.
-- `shown`: the column is part of the API shape (a change bumps updated_at).
local function is_newer(version_col, rank_col)
  return ("(excluded.%s, excluded.%s) > (coalesce(comments.%s, '-Infinity'), coalesce(comments.%s, 0))")
    :format(version_col, rank_col, version_col, rank_col)
end
local function newer(col, version_col, rank_col)
  return ("CASE WHEN %s THEN excluded.%s ELSE comments.%s END"):format(is_newer(version_col, rank_col), col, col)
end
-- A versioned field with its version and rank, which move together.
local function versioned(col, version_col, rank_col)
  return { col, newer(col, version_col, rank_col), shown = true },
    { version_col, newer(version_col, version_col, rank_col) },
    { rank_col, newer(rank_col, version_col, rank_col) }
end
-- How far an Instagram webhook's send time may be from the comment's own
-- timestamp before the sync corrects it (see created_at below).
M.INSTAGRAM_SEND_TIME_SLACK_SECONDS = 60

local MERGE = {}
for _, field in ipairs { { "text", "text_version", "text_rank" }, { "is_hidden", "hidden_version", "hidden_rank" },
    { "like_count", "like_version", "like_rank" } } do
  for _, m in ipairs { versioned(table.unpack(field)) } do MERGE[#MERGE + 1] = m end
end
for _, m in ipairs {
  -- Deletion is final; authorship and threading do not change once known.
  { "is_deleted", "comments.is_deleted OR excluded.is_deleted", shown = true },
  { "is_from_account", "comments.is_from_account OR excluded.is_from_account", shown = true },
  { "author_platform_id", "coalesce(comments.author_platform_id, excluded.author_platform_id)", shown = true },
  { "parent_platform_comment_id", "coalesce(comments.parent_platform_comment_id, excluded.parent_platform_comment_id)", shown = true },
  -- A name can change: the newest observation that has one wins.
  { "author_name", [[CASE WHEN excluded.author_name IS NOT NULL AND (comments.author_name IS NULL
      OR ]] .. is_newer("version", "version_rank") .. [[) THEN excluded.author_name ELSE comments.author_name END]], shown = true },
  -- A row first seen through an edit, removal or hide learns its creation
  -- time from the creation when that arrives. One first seen through an
  -- Instagram webhook (whose only time is when Meta sent it) takes the
  -- sync's timestamp only when they differ by more than a minute, i.e. for
  -- a delivery Meta retried late: moving the row changes its place in the
  -- listings, so it should move only when its time was really wrong.
  { "created_at", [[CASE WHEN NOT comments.created_at_known AND excluded.created_at_known
      AND (comments.platform <> 'instagram' OR abs(extract(epoch FROM excluded.created_at - comments.created_at)) > ]]
      .. M.INSTAGRAM_SEND_TIME_SLACK_SECONDS .. [[) THEN excluded.created_at
      ELSE comments.created_at END]], shown = true },
  { "created_at_known", "comments.created_at_known OR excluded.created_at_known" },
  -- Facebook's can_hide, as the last sync that read it said (not shown).
  { "can_hide", "coalesce(excluded.can_hide, comments.can_hide)" },
  { "version", newer("version", "version", "version_rank") },
  { "version_rank", newer("version_rank", "version", "version_rank") },
} do MERGE[#MERGE + 1] = m end

-- The state a change of which is announced (social.comment.updated).
-- Each maps to the change it makes (comment_changes), given its new value.
local STATE = { text = "'edited'", is_hidden = "CASE WHEN %s THEN 'hidden' ELSE 'unhidden' END",
  is_deleted = "'deleted'" }

local function upsert_sql()
  local set, new, old, new_shown, old_shown, new_state, old_state, changes = {}, {}, {}, {}, {}, {}, {}, {}
  for i, m in ipairs(MERGE) do
    set[i] = m[1] .. " = " .. m[2]
    new[i], old[i] = "(" .. m[2] .. ")", "comments." .. m[1]
    if m.shown then
      new_shown[#new_shown + 1], old_shown[#old_shown + 1] = new[i], old[i]
    end
    if STATE[m[1]] then
      new_state[#new_state + 1], old_state[#old_state + 1] = new[i], old[i]
      changes[#changes + 1] = ("CASE WHEN %s IS DISTINCT FROM %s THEN %s END")
        :format(new[i], old[i], STATE[m[1]]:format(new[i]))
    end
  end
  set[#set + 1] = ("updated_at = CASE WHEN (%s) IS DISTINCT FROM (%s) THEN now() ELSE comments.updated_at END")
    :format(table.concat(new_shown, ", "), table.concat(old_shown, ", "))
  set[#set + 1] = ("state_changed = (%s) IS DISTINCT FROM (%s)")
    :format(table.concat(new_state, ", "), table.concat(old_state, ", "))
  set[#set + 1] = ("state_changes = array_remove(ARRAY[%s]::text[], NULL)"):format(table.concat(changes, ", "))
  set[#set + 1] = "last_write_inserted = false"
  return [[
WITH obs AS (
  SELECT o.*, t.id AS target_id, t.post_id, t.company_id, t.environment
    FROM jsonb_to_recordset($1::jsonb) AS o(id text, social_account_id text, platform text, platform_post_id text,
           platform_comment_id text, parent_platform_comment_id text, text text, author_platform_id text,
           author_name text, is_from_account boolean, is_hidden boolean, is_deleted boolean, like_count integer,
           created_at double precision, created_guess double precision, version double precision, rank smallint,
           can_hide boolean)
    -- Only comments on targets we published; anything else is not ours.
    JOIN post_targets t ON t.social_account_id = o.social_account_id AND t.platform_post_id = o.platform_post_id
                       AND t.platform = o.platform AND t.status = 'published'
), up AS (
  INSERT INTO comments (id, company_id, environment, post_target_id, post_id, social_account_id, platform,
      platform_comment_id, platform_post_id, parent_platform_comment_id, text, author_platform_id, author_name,
      is_from_account, is_hidden, is_deleted, like_count, created_at, created_at_known, version, version_rank,
      text_version, text_rank, hidden_version, hidden_rank, like_version, like_rank, can_hide)
  SELECT id, company_id, environment, target_id, post_id, social_account_id, platform,
      platform_comment_id, platform_post_id, parent_platform_comment_id, text, author_platform_id, author_name,
      coalesce(is_from_account, false), coalesce(is_hidden, false), coalesce(is_deleted, false), coalesce(like_count, 0),
      to_timestamp(coalesce(created_at, created_guess, version)), created_at IS NOT NULL, version, coalesce(rank, 0),
      CASE WHEN text IS NOT NULL THEN version END, CASE WHEN text IS NOT NULL THEN coalesce(rank, 0) END,
      CASE WHEN is_hidden IS NOT NULL THEN version END, CASE WHEN is_hidden IS NOT NULL THEN coalesce(rank, 0) END,
      CASE WHEN like_count IS NOT NULL THEN version END, CASE WHEN like_count IS NOT NULL THEN coalesce(rank, 0) END,
      can_hide
    FROM obs
    -- One lock order for every caller, so concurrent batches cannot deadlock.
    ORDER BY social_account_id, platform_comment_id
  ON CONFLICT (social_account_id, platform_comment_id, company_id) DO UPDATE SET ]] .. table.concat(set, ",\n      ") .. [[

    -- Nothing to write when the observation changes nothing (a redelivery).
    WHERE (]] .. table.concat(new, ", ") .. [[) IS DISTINCT FROM (]] .. table.concat(old, ", ") .. [[)
  RETURNING comments.*, comments.last_write_inserted AS created
)
SELECT ]] .. M.select_list("up.") .. [[, up.created, up.state_changed, to_jsonb(up.state_changes) AS state_changes, p.client_id
  FROM up JOIN posts p ON p.id = up.post_id]]
end
local UPSERT = upsert_sql()

local REQUIRED = { "social_account_id", "platform", "platform_post_id", "platform_comment_id", "version" }

-- apply(observations, how) -> created rows, changed rows (created included)
-- Rows carry the columns of COLUMNS, created_at/updated_at as the API shows
-- them, and client_id (the client that created the post).
-- One statement per batch; several observations of the same comment in one
-- batch go in successive statements, in their order (PostgreSQL cannot
-- upsert one row twice in one statement).
-- Every change it makes is recorded, in the same transaction, through
-- comment_changes (the feed and the hidden/unhidden/deleted events):
-- how.actor made it (default the platform), how.data goes into its events,
-- how.created = false records no `created` (a reply records `replied`).
function M.apply(observations, how)
  how = how or {}
  local rounds, seen = {}, {}
  for _, o in ipairs(observations) do
    for _, k in ipairs(REQUIRED) do
      if o[k] == nil then error("comments.apply: observation without " .. k, 2) end
    end
    local key = o.social_account_id .. "\0" .. o.platform_comment_id
    local n = (seen[key] or 0) + 1
    seen[key] = n
    rounds[n] = rounds[n] or {}
    local row = { id = "cmt_" .. crypto.random_token(24) }
    for k, v in pairs(o) do row[k] = v end
    table.insert(rounds[n], row)
  end
  local created, changed, recorded = {}, {}, {}
  local function record(r, kind)
    recorded[#recorded + 1] = { row = r, type = kind, actor = how.actor, data = how.data }
  end
  db.transaction(function()
    for _, batch in ipairs(rounds) do
      local rows = assert(db.query(UPSERT, json.encode(batch)))
      for _, r in ipairs(rows) do
        changed[#changed + 1] = r
        if r.created then
          created[#created + 1] = r
          if how.created ~= false then record(r, "created") end
        else
          for _, kind in ipairs(r.state_changes) do record(r, kind) end
        end
      end
    end
    require("comment_changes").record_many(recorded)
  end)
  return created, changed
end

-- A comment by id with client_id (the client that created its post), as
-- apply returns it, or nil. Whatever its company: for internal callers.
function M.load(id)
  return assert(db.query("SELECT " .. M.select_list("c.") .. [[, p.client_id
      FROM comments c JOIN posts p ON p.id = c.post_id WHERE c.id = $1]], id))[1]
end

-- The Comment of spec 2.1, as a row shows it (lib/json.lua's row views):
-- present makes one in Lua, page writes a page straight from a result.
-- Fields no observation has told us yet show as empty strings rather than
-- break the shape.
local SHOWS = {
  id = "id", platform = "platform", socialAccountId = "social_account_id", postTargetId = "post_target_id",
  platformCommentId = "platform_comment_id", platformPostId = "platform_post_id",
  parentPlatformCommentId = "parent_platform_comment_id", text = { "text", null = "" },
  author = { platformId = { "author_platform_id", null = "" }, name = { "author_name", null = "" } },
  isFromAccount = { "is_from_account", null = false }, isHidden = { "is_hidden", null = false },
  isDeleted = { "is_deleted", null = false }, likeCount = { "like_count", null = 0 },
  createdAt = "created_at", updatedAt = "updated_at",
}

function M.present(row)
  return json.present(SHOWS, row)
end

-- The row view of SHOWS in the order of the Comment schema, made once per
-- loaded document.
local page_views = setmetatable({}, { __mode = "k" })
local function page_view()
  local shape = json_shapes.schema("Comment")
  local view = page_views[shape or SHOWS]
  if not view then
    view = json.row_view(shape, SHOWS)
    page_views[shape or SHOWS] = view
  end
  return view
end

-- What a batch from the platform (a Meta delivery, a sync page, the sandbox
-- tool) tells the post's client, inside the caller's transaction:
-- social.comment.received for each new comment someone else wrote, and
-- social.comment.updated for each known comment whose text, hidden or deleted
-- state changed. One event per comment, with its state after the batch (a
-- comment made and edited in one batch is received once, as edited).
-- created, changed: what apply returned.
function M.announce(created, changed)
  local new, last, state_changed, order = {}, {}, {}, {}
  for _, r in ipairs(created) do new[r.id] = true end
  for _, r in ipairs(changed or {}) do
    if not last[r.id] then order[#order + 1] = r.id end
    last[r.id] = r
    state_changed[r.id] = state_changed[r.id] or r.state_changed
  end
  local list = {}
  for _, id in ipairs(order) do
    local r = last[id]
    local type
    if new[id] then
      type = not r.is_from_account and "social.comment.received" or nil
    elseif state_changed[id] and not require("comment_changes").echo_of_pending(r) then
      type = "social.comment.updated"
    end
    if type then
      list[#list + 1] = { client = { company_id = r.company_id, environment = r.environment, client_id = r.client_id },
        type = type, data = { comment = M.present(r) } }
    end
  end
  events.emit_many(list)
  -- The company's moderation rules judge each new comment, after its event.
  require("moderation.rules").act(created)
end

-- A comment of the caller's company and environment, or nil.
local function find_sql()
  return "SELECT " .. M.select_list("") .. [[ FROM comments
      WHERE id = $1 AND company_id = $2 AND environment = $3]]
end

function M.find(client, id)
  if type(id) ~= "string" or #id > 64 then return nil end
  return assert(db.query(find_sql(), id, client.company_id, client.environment))[1]
end

-- M.find for GETs, which tolerate a little lag (lib/reads.lua).
function M.read(client, id)
  if type(id) ~= "string" or #id > 64 then return nil end
  return (reads.one(find_sql(), id, client.company_id, client.environment))
end

-- Qualified names: the output column created_at is the formatted text.
local LIST_SQL = "SELECT " .. M.select_list("c.", true) .. ", " .. sqltime.exact("c.created_at", "position_t") .. [[
      FROM comments c
      WHERE c.post_id = $1 AND c.company_id = $2 AND c.environment = $3
        AND ($4::timestamptz IS NULL OR (c.created_at, c.id) > ($4::timestamptz, $5))
      ORDER BY c.created_at, c.id LIMIT $6]]

-- A page of Comments from a db.read_result of at most limit + 1 rows chosen
-- with select_list and a position_t column: the JSON of the first limit
-- (for json.encode) and the position after the last of them when more
-- follow, else nil.
function M.page(res, limit)
  local n, position = #res, nil
  if n > limit then
    n = limit
    position = { t = res:get(n, "position_t"), id = res:get(n, "id") }
  end
  return res:json(page_view(), 1, n), position
end

-- One page of a post's comments, oldest first (created_at, id), after the
-- position `after` ({t, id} from a cursor, or nil), as M.page gives it, or
-- nil when the caller's company and environment have no such post. A page
-- with comments proves the post is the caller's (a comment is of its post's
-- company and environment), so the post is looked up only for an empty page:
-- most listings are one statement.
function M.list(client, post_id, after, limit)
  local res <close> = assert(db.read_result(LIST_SQL,
    post_id, client.company_id, client.environment, after and after.t, after and after.id, limit + 1))
  if #res == 0 and not posts.read(client, post_id) then return nil end
  return M.page(res, limit)
end

return M

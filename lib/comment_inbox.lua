-- GET /api/v1/comments (CONTRACT 12): a company's comments of one
-- environment, filtered, newest or oldest first, keyset-paged on
-- (created_at, id). docs/comments.md, "Inbox".
local problem = require "problem"
local cursor = require "cursor"
local post_rules = require "post_rules"
local sqltime = require "sqltime"

local M = {}

local function bad(name, message)
  problem.raise(400, "invalid_parameter", message,
    { errors = { { field = name, code = "invalid_parameter", message = message } } })
end

local BOOLEAN = { ["true"] = true, ["false"] = false }
local PLATFORMS = { facebook = true, instagram = true }
local ORDERS = { newest = true, oldest = true }

-- Ids are ASCII words; anything else names nothing (and is refused rather
-- than answered with an empty page, so a typo shows).
local function id_param(q, name)
  local v = q[name]
  if v ~= nil and (#v < 1 or #v > 64 or not v:match("^[%w_%-]+$")) then
    bad(name, name .. " must be an id, as the API gives them.")
  end
  return v
end

local function boolean_param(q, name)
  local v = q[name]
  if v == nil then return nil end
  if BOOLEAN[v] == nil then bad(name, name .. " must be true or false.") end
  return BOOLEAN[v]
end

local FIRST_TIME = -62135596800 -- 0001-01-01T00:00:00Z: PostgreSQL has no year 0

-- Passed on as seconds since 1970 (to_timestamp), however it was written:
-- PostgreSQL refuses offsets past 15:59 that RFC 3339 allows. To the
-- microsecond, as given: a rounded bound could take in or leave out a row.
local function time_param(q, name)
  local v = q[name]
  if v == nil then return nil end
  local t = post_rules.parse_time(v)
  if not t or t < FIRST_TIME then
    bad(name, name .. " must be an RFC 3339 date-time with a zone, such as 2026-01-31T09:00:00Z.")
  end
  return ("%.6f"):format(t)
end

-- A LIKE pattern that matches `s` literally, anywhere.
local function contains(s)
  return "%" .. s:gsub("[\\%%_]", "\\%0") .. "%"
end

-- The query's filters, order, page position and size; a bad value raises
-- 400 invalid_parameter naming it (invalid_cursor for a cursor).
function M.parse(q)
  local f = {
    social_account_id = id_param(q, "socialAccountId"),
    post_id = id_param(q, "postId"),
    is_hidden = boolean_param(q, "isHidden"),
    is_deleted = boolean_param(q, "isDeleted"),
    is_from_account = boolean_param(q, "isFromAccount"),
    since = time_param(q, "createdSince"),
    ["until"] = time_param(q, "createdUntil"),
    order = q.order or "newest",
  }
  if q.platform ~= nil and not PLATFORMS[q.platform] then bad("platform", "platform must be facebook or instagram.") end
  f.platform = q.platform
  if not ORDERS[f.order] then bad("order", "order must be newest or oldest.") end
  if q.q ~= nil then
    local n = utf8.len(q.q)
    if not n or n < 1 or n > 200 then bad("q", "q must be 1 to 200 characters of text.") end
    f.pattern = contains(q.q)
  end
  local lerr
  f.limit, lerr = cursor.limit(q.limit, 25, 100)
  if not f.limit then bad("limit", lerr) end
  if q.cursor then
    f.after = cursor.decode(q.cursor, { t = "time", id = "id", o = "string" })
    -- A cursor holds its order: one of the other order would skip or repeat.
    if not f.after or f.after.o ~= f.order then
      problem.raise(400, "invalid_cursor", "The cursor is not one this API gave out for this order.")
    end
  end
  return f
end

-- Bounds compare to the millisecond, as the API shows times: a comment's
-- own createdAt as either bound includes it.
-- q: the text folded by Unicode rules whatever the database's locale, stored
-- with the row (comments.text_folded, migrations/0027) and indexed by
-- trigrams, against the pattern folded by the same expression.
-- A rare q sorts every comment of the company that holds it (hundreds at a
-- million comments): the page is picked in a subquery and only its rows are
-- formatted.

-- The statement of a page and its parameters (limit + 1 rows, position_t
-- beside each).
local function page_statement(client, f)
  local comments = require "comments"
  local newest = f.order == "newest"
  local order = " ORDER BY c.created_at " .. (newest and "DESC" or "ASC") .. ", c.id " .. (newest and "DESC" or "ASC")
  local page = [[ FROM comments c
      WHERE c.company_id = $1 AND c.environment = $2
        AND ($3::text IS NULL OR c.social_account_id = $3)
        AND ($4::text IS NULL OR c.platform = $4)
        AND ($5::text IS NULL OR c.post_id = $5)
        AND ($6::boolean IS NULL OR c.is_hidden = $6)
        AND ($7::boolean IS NULL OR c.is_deleted = $7)
        AND ($8::boolean IS NULL OR c.is_from_account = $8)
        AND ($9::float8 IS NULL OR c.created_at >= date_trunc('milliseconds', to_timestamp($9::float8)))
        AND ($10::float8 IS NULL OR c.created_at < date_trunc('milliseconds', to_timestamp($10::float8)) + interval '1 millisecond')
        AND ($11::text IS NULL OR c.text_folded LIKE lower($11 COLLATE "und-x-icu"))
        AND ($12::timestamptz IS NULL OR (c.created_at, c.id) ]] .. (newest and "<" or ">") .. [[ ($12::timestamptz, $13))
      ]] .. order .. " LIMIT $14"
  local select = "SELECT " .. comments.select_list("c.") .. ", " .. sqltime.exact("c.created_at", "position_t")
  local sql = f.pattern and (select .. " FROM (SELECT " .. comments.plain_list("c.") .. page .. ") c" .. order)
    or (select .. page)
  return sql, table.pack(client.company_id, client.environment, f.social_account_id, f.platform, f.post_id,
    f.is_hidden, f.is_deleted, f.is_from_account, f.since, f["until"], f.pattern,
    f.after and f.after.t, f.after and f.after.id, f.limit + 1)
end

local function next_cursor(position, f)
  return position and cursor.encode({ t = position.t, id = position.id, o = f.order })
end

-- One page: rows (comments.present's input) and the cursor of the next page
-- or nil on the last.
function M.list(client, f)
  local sql, params = page_statement(client, f)
  local rows = assert(db.read_query(sql, table.unpack(params, 1, params.n)))
  local position
  if #rows > f.limit then
    rows[#rows] = nil
    position = { t = rows[#rows].position_t, id = rows[#rows].id }
  end
  return rows, next_cursor(position, f)
end

-- One page as JSON of Comments (comments.page) and the cursor of the next
-- page or nil on the last.
function M.page(client, f)
  local sql, params = page_statement(client, f)
  local res <close> = assert(db.read_result(sql, table.unpack(params, 1, params.n)))
  local page, position = require("comments").page(res, f.limit)
  return page, next_cursor(position, f)
end

return M

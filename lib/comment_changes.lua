-- The change feed of comments (docs/comments.md, "Change feed"; CONTRACT 12)
-- and the events of hides, unhides and deletions.
--
-- Writers append a row per change in their own transaction (comments.apply
-- does it for every write; a reply records `replied`). Rows get their
-- `sequence` later, when a reader numbers them: under a per company and
-- environment lock, the rows committed so far and not numbered yet get the
-- next numbers, in id order. A row committed later gets a later number, so
-- a reader following sequence numbers sees every change exactly once,
-- whatever order concurrent transactions commit in.
local json = require "json"
local events = require "events"
local actors = require "actors"
local comments = require "comments"
local sqltime = require "sqltime"

local M = {}

M.TYPES = { created = true, edited = true, hidden = true, unhidden = true, deleted = true, replied = true }

-- The changes that have an event of their own ({"comment": Comment}, plus
-- the caller's data). `created` and `edited` reach clients as
-- social.comment.received and .updated (comments.announce); `replied` as
-- social.comment.replied (lib/moderation.lua).
local EVENTS = { hidden = "social.comment.hidden", unhidden = "social.comment.unhidden",
  deleted = "social.comment.deleted" }

-- The moderation action a state change is the outcome of.
local ACTION = { hidden = "comment.hide", unhidden = "comment.unhide", deleted = "comment.delete" }

-- A hide, unhide or delete the platform reports (a Meta webhook, the sync)
-- while our own operation asking for exactly that is still pending is that
-- operation's outcome arriving first: the change is its actor's (and a
-- rule's carries ruleId and operationId), not the platform's, whichever of
-- the two reaches sgw first.
local function pending_cause(c)
  if c.actor ~= nil or not ACTION[c.type] then return c.actor, c.data end
  local op = assert(db.query([[SELECT a.actor_type, a.actor_id, a.operation_id
      FROM comment_audit a JOIN operations o ON o.id = a.operation_id
      WHERE a.comment_id = $1 AND a.action = $2 AND o.status IN ('queued', 'running')
      ORDER BY a.id DESC LIMIT 1]], c.row.id, ACTION[c.type]))[1]
  if not op then return nil, c.data end
  local data = op.actor_type == "rule" and { ruleId = op.actor_id, operationId = op.operation_id } or c.data
  return actors.present(op.actor_type, op.actor_id), data
end

-- Whether every state change of a row comments.apply returned is the
-- platform reporting what our own pending operations asked for (then the
-- platform batch announces nothing more: the operation's change is the news).
function M.echo_of_pending(row)
  local kinds = row.state_changes
  if type(kinds) ~= "table" or #kinds == 0 then return false end
  for _, kind in ipairs(kinds) do
    if not ACTION[kind] or pending_cause({ row = row, type = kind }) == nil then return false end
  end
  return true
end

-- list: { {row = comment row with client_id (as comments.apply returns it),
-- type = one of TYPES, actor = actors (nil: the platform), data = extra
-- event fields or nil}, ... }, in the order they happened. Records them and
-- emits their events to the client that created the post, in the caller's
-- transaction (or one of its own).
function M.record_many(list)
  if #list == 0 then return end
  local rows, list_events = {}, {}
  for i, c in ipairs(list) do
    if not M.TYPES[c.type] then error("unknown comment change " .. tostring(c.type), 2) end
    local r = c.row
    local actor, data_extra = pending_cause(c)
    local actor_type, actor_id = actors.columns(actor)
    local shown = comments.present(r)
    rows[i] = { company_id = r.company_id, environment = r.environment, comment_id = r.id, type = c.type,
      actor_type = actor_type, actor_id = actor_id, comment = shown, n = i }
    if EVENTS[c.type] then
      local data = { comment = shown }
      for k, v in pairs(data_extra or {}) do data[k] = v end
      list_events[#list_events + 1] = { type = EVENTS[c.type], data = data,
        client = { company_id = r.company_id, environment = r.environment, client_id = r.client_id } }
    end
  end
  db.transaction(function()
    assert(db.exec([[INSERT INTO comment_changes (company_id, environment, comment_id, type, actor_type, actor_id, comment)
        SELECT company_id, environment, comment_id, type, actor_type, actor_id, comment
          FROM jsonb_to_recordset($1::jsonb) AS c(company_id text, environment text, comment_id text,
                 type text, actor_type text, actor_id text, comment jsonb, n integer)
         ORDER BY n]], json.encode(rows)))
    events.emit_many(list_events)
  end)
end

-- record(comment, type, actor, data): one change. comment: a row as
-- comments.apply returns it, or a comment id.
function M.record(comment, change, actor, data)
  if type(comment) == "string" then
    comment = comments.load(comment) or error("no comment " .. comment, 2)
  end
  M.record_many({ { row = comment, type = change, actor = actor, data = data } })
end

-- Changes numbered per read at most: a backlog is numbered over several reads.
local NUMBER_BATCH = 1000

-- Numbers the changes of one company and environment committed so far
-- (at most `batch` of them). The lock makes numberers take turns; the
-- statements after it see what the previous one committed.
local function number(client, batch)
  db.transaction(function()
    assert(db.query("SELECT pg_advisory_xact_lock(hashtextextended('comment_changes/' || $1::text || '/' || $2::text, 0))",
      client.company_id, client.environment))
    local ids = assert(db.query([[SELECT id, floor(extract(epoch FROM changed_at))::bigint AS second FROM comment_changes
        WHERE company_id = $1 AND environment = $2 AND sequence IS NULL ORDER BY id LIMIT $3]],
      client.company_id, client.environment, batch))
    if #ids == 0 then return end
    -- From the oldest change's second on: the update reads the day
    -- partitions (lib/partitions.lua) from there, not every one.
    local list, since = {}, math.huge
    for i, r in ipairs(ids) do
      list[i] = r.id
      since = math.min(since, r.second)
    end
    assert(db.exec([[WITH counter AS (
          INSERT INTO comment_change_counters AS k (company_id, environment, last) VALUES ($1, $2, $4)
          ON CONFLICT (company_id, environment) DO UPDATE SET last = k.last + $4
          RETURNING k.last - $4 AS base)
        UPDATE comment_changes c SET sequence = counter.base + t.n
          FROM counter, jsonb_array_elements_text($3::jsonb) WITH ORDINALITY AS t(id, n)
         WHERE c.id = t.id::bigint AND c.changed_at >= to_timestamp($5)]],
      client.company_id, client.environment, json.encode(list), #list, since))
  end)
end

-- One page of the feed after sequence `after` (0: from the oldest retained
-- change): rows {sequence, type, actor_type, actor_id, changed_at, comment}.
function M.page(client, after, limit)
  number(client, NUMBER_BATCH)
  return assert(db.query([[SELECT sequence, type, actor_type, actor_id, comment, ]] .. sqltime.iso("changed_at") .. [[
      FROM comment_changes WHERE company_id = $1 AND environment = $2 AND sequence > $3
      ORDER BY sequence LIMIT $4]], client.company_id, client.environment, after, limit))
end

function M.present(row)
  return { sequence = row.sequence, type = row.type, comment = row.comment, changedAt = row.changed_at,
    actor = actors.present(row.actor_type, row.actor_id) }
end

return M

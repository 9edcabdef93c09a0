-- Posts and their targets: how they are stored, shown, and how a post's
-- outcome follows from its targets. See docs/publishing.md.
local json = require "json"
local jobs = require "jobs"
local sqltime = require "sqltime"
local operations = require "operations"
local events = require "events"
local reads = require "reads"

local M = {}

M.FINAL_TARGET = { published = true, failed = true, cancelled = true }
M.FINAL_POST = { published = true, partially_published = true, failed = true, cancelled = true }

local POST_COLUMNS = table.concat({ "id", "company_id", "environment", "client_id", "status", "content", "media",
  "publishing", "image", "external_reference", "operation_id", sqltime.iso("created_at"), sqltime.iso("updated_at") }, ", ")

local TARGET_COLUMNS = table.concat({ "id", "post_id", "social_account_id", "platform", "status", "attempts",
  sqltime.iso("next_attempt_at"), sqltime.iso("published_at"), "platform_post_id", "permalink_url", "error" }, ", ")

local function or_null(v)
  if v == nil then return json.null end
  return v
end

function M.present_target(t)
  local err = json.null
  if t.error then
    err = { code = t.error.code, message = t.error.message, retryable = t.error.retryable or false,
      platformCode = or_null(t.error.platformCode), platform = or_null(t.error.platform) }
  end
  return {
    id = t.id, socialAccountId = t.social_account_id, platform = t.platform, status = t.status,
    platformPostId = or_null(t.platform_post_id), permalinkUrl = or_null(t.permalink_url),
    attempts = t.attempts, nextAttemptAt = or_null(t.next_attempt_at), publishedAt = or_null(t.published_at),
    error = err,
  }
end

-- A post's targets in order ($1: the post's id).
local TARGETS_SQL = "/* generic plan */ SELECT " .. TARGET_COLUMNS .. " FROM post_targets WHERE post_id = $1 ORDER BY position"

-- The targets of the posts of some targets ($1: their ids, a JSON array),
-- post by post, each post's in order.
M.TARGETS_OF_POSTS_OF_SQL = "/* generic plan */ SELECT " .. TARGET_COLUMNS .. [[ FROM post_targets
  WHERE post_id IN (SELECT post_id FROM post_targets WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb))))
  ORDER BY post_id, position]]

function M.targets_of(post_id, query)
  return assert((query or db.query)(TARGETS_SQL, post_id))
end

function M.present(p, targets)
  local list = {}
  for i, t in ipairs(targets or M.targets_of(p.id)) do list[i] = M.present_target(t) end
  return {
    id = p.id, status = p.status, content = p.content, media = json.array(p.media),
    publishing = p.publishing, externalReference = or_null(p.external_reference),
    createdAt = p.created_at, updatedAt = p.updated_at, targets = json.array(list),
  }
end

-- A post of the caller's company and environment, or nil (another
-- company's post is as absent as a missing one).
local FIND_SQL = "SELECT " .. POST_COLUMNS .. [[ FROM posts
      WHERE id = $1 AND company_id = $2 AND environment = $3]]

function M.find(client, id, for_update)
  local rows = assert(db.query(FIND_SQL .. (for_update and " FOR UPDATE" or ""), id, client.company_id, client.environment))
  return rows[1]
end

-- M.find for GETs, which tolerate a little lag (lib/reads.lua): the post and
-- the query function to read its targets with.
function M.read(client, id)
  return reads.one(FIND_SQL, id, client.company_id, client.environment)
end

local function enqueue_target(target_id, run_at)
  assert(jobs.enqueue("publish_target", { targetId = target_id }, { run_at = run_at, max_attempts = 1000 }))
end

-- Creates the post, its targets, its operation and their jobs, inside the
-- caller's transaction. `v` is post_rules' normalized request.
function M.create(client, v, request)
  local post_id = "post_" .. crypto.random_token(24)
  local op_id = operations.new_id()
  local scheduled = v.publishing.mode == "scheduled"
  local status = scheduled and "scheduled" or "queued"
  local publishing = { mode = v.publishing.mode }
  if scheduled then publishing.scheduledAt = clock.iso(v.publishing.scheduled_at) end
  assert(db.exec([[INSERT INTO posts (id, company_id, environment, client_id, status, content, media, publishing,
      image, external_reference, operation_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)]],
    post_id, client.company_id, client.environment, client.client_id, status,
    json.encode(request.content), json.encode(json.array(request.media)), json.encode(publishing),
    v.image and json.encode(v.image) or nil, v.external_reference, op_id))
  operations.create(client, "post.publish", "post", post_id, op_id)
  for i, t in ipairs(v.targets) do
    local target_id = "tgt_" .. crypto.random_token(24)
    assert(db.exec([[INSERT INTO post_targets (id, post_id, company_id, environment, social_account_id, platform,
        position, status) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)]],
      target_id, post_id, client.company_id, client.environment, t.account_id, t.platform, i, status))
    enqueue_target(target_id, scheduled and v.publishing.scheduled_at or nil)
  end
  return post_id, op_id
end

-- Locks a post's targets (of the caller's company and environment), in the
-- order of their ids: before the post, as every step of publishing locks
-- them (lib/publisher.lua), so that a cancel meeting a batch of attempts
-- starting waits for it instead of deadlocking with it.
function M.lock_targets(client, post_id)
  assert(db.query([[SELECT id FROM post_targets WHERE post_id = $1 AND company_id = $2 AND environment = $3
      ORDER BY id FOR UPDATE]], post_id, client.company_id, client.environment))
end

-- Cancel: only while every target is still scheduled or queued (its caller
-- locked the targets, then the post).
function M.cancel(client, post)
  if post.status == "cancelled" then return true end
  local targets = M.targets_of(post.id)
  for _, t in ipairs(targets) do
    if t.status ~= "scheduled" and t.status ~= "queued" then return false end
  end
  assert(db.exec("UPDATE post_targets SET status = 'cancelled', updated_at = now() WHERE post_id = $1", post.id))
  assert(db.exec("UPDATE posts SET status = 'cancelled', updated_at = now() WHERE id = $1", post.id))
  for _, t in ipairs(targets) do t.status = "cancelled" end
  operations.finish(post.operation_id, "cancelled", M.result(post.id, "cancelled", targets), nil)
  return true
end

-- Retry: failed targets run again under a new operation; published ones are
-- never touched.
function M.retry(client, post)
  if post.status ~= "failed" and post.status ~= "partially_published" then return nil end
  local op_id = operations.create(client, "post.retry", "post", post.id)
  local rows = assert(db.query([[UPDATE post_targets SET status = 'queued', run_attempts = 0, error = NULL,
      next_attempt_at = NULL, adapter_state = '{}', updated_at = now()
      WHERE post_id = $1 AND status = 'failed' RETURNING id]], post.id))
  for _, r in ipairs(rows) do enqueue_target(r.id) end
  assert(db.exec("UPDATE posts SET status = 'queued', operation_id = $2, updated_at = now() WHERE id = $1", post.id, op_id))
  return op_id
end

-- POST /posts/{id}/retry for the API and the workspace alike: the new
-- operation's id, or nil and "not_found" / "nothing_to_retry".
function M.retry_by_id(client, id)
  local op_id, err
  db.transaction(function()
    local post = M.find(client, id, true)
    if not post then err = "not_found" return end
    op_id = M.retry(client, post)
    if not op_id then err = "nothing_to_retry" end
  end)
  return op_id, err
end

-- One page of the company's posts of one environment, newest first: their
-- ids after the position `after` ({t, id} from a cursor, or nil), and the
-- position after the last one when more follow.
function M.page(client, status, after, limit)
  local rows = assert(db.read_query("SELECT id, " .. sqltime.exact("created_at", "position_t") .. [[ FROM posts
      WHERE company_id = $1 AND environment = $2 AND ($3::text IS NULL OR status = $3)
        AND ($4::timestamptz IS NULL OR (created_at, id) < ($4::timestamptz, $5))
      ORDER BY created_at DESC, id DESC LIMIT $6]],
    client.company_id, client.environment, status, after and after.t, after and after.id, limit + 1))
  local ids = {}
  for i = 1, math.min(#rows, limit) do ids[i] = rows[i].id end
  return ids, #rows > limit and { t = rows[limit].position_t, id = rows[limit].id } or nil
end

-- The operation result and the event data of a post in a final status.
function M.result(post_id, status, targets)
  local list = {}
  for i, t in ipairs(targets) do
    list[i] = { postTargetId = t.id, status = t.status, platformPostId = or_null(t.platform_post_id),
      error = M.present_target(t).error }
  end
  return { postId = post_id, status = status, targets = json.array(list) }
end

-- The post's columns for a statement that locks the post (FOR UPDATE) and
-- hands it to M.settle_locked.
M.POST_COLUMNS = POST_COLUMNS

-- Posts' final statuses and the ends of their operations, in one statement
-- ($1: [{postId, status, operationId, operationStatus, result, error}]).
local FINAL_SQL = [[/* generic plan */ WITH v AS (
    SELECT x->>'postId' AS post_id, x->>'status' AS status, x->>'operationId' AS operation_id,
           x->>'operationStatus' AS operation_status, x->'result' AS result, x->'error' AS error
      FROM jsonb_array_elements($1::jsonb) x),
  p AS (UPDATE posts SET status = v.status, updated_at = now() FROM v WHERE posts.id = v.post_id)
  UPDATE operations o SET status = v.operation_status, result = v.result, error = v.error, updated_at = now(),
         completed_at = now()
    FROM v WHERE o.id = v.operation_id]]

-- After a target changed, inside the same transaction: derive the post's
-- status; when every target is final, finish the operation and emit
-- social.post.published to the client that created the post.
function M.settle(post_id)
  local rows = assert(db.query("/* generic plan */ SELECT " .. POST_COLUMNS .. " FROM posts WHERE id = $1 FOR UPDATE", post_id))
  return M.settle_locked(rows[1])
end

-- A post's final status by its targets, or nil while one of them is open.
local function final_status(targets)
  local published, failed = 0, 0
  for _, t in ipairs(targets) do
    if t.status == "published" then published = published + 1
    elseif t.status == "failed" then failed = failed + 1
    elseif t.status ~= "cancelled" then return nil end
  end
  return failed == 0 and "published" or (published > 0 and "partially_published" or "failed")
end

-- M.settle for posts their caller locked (FOR UPDATE, in this transaction)
-- after changing their targets: the targets are read by a statement of
-- their own, so they are seen as the transactions that held the locks
-- before left them (whichever target ends last sees every other one
-- final). locked: a list of {post = row, targets = that read (TARGETS_SQL)
-- when the caller sent it behind the lock}. The posts that end, their
-- operations and their events take one round trip however many they are.
function M.settle_locked_many(locked)
  local finals, ended = {}, {}
  for _, l in ipairs(locked) do
    local post = l.post
    if post and not M.FINAL_POST[post.status] then
      local targets = l.targets or M.targets_of(post.id)
      local status = final_status(targets)
      if not status then
        if post.status ~= "publishing" then
          assert(db.exec("/* generic plan */ UPDATE posts SET status = 'publishing', updated_at = now() WHERE id = $1", post.id))
          operations.set_running(post.operation_id)
        end
      else
        local data = M.result(post.id, status, targets)
        data.operationId = post.operation_id
        data.externalReference = or_null(post.external_reference)
        finals[#finals + 1] = { postId = post.id, status = status, operationId = post.operation_id,
          operationStatus = status == "failed" and "failed" or "succeeded", result = M.result(post.id, status, targets),
          error = status == "failed" and { code = "publish_failed", message = "No target was published." } or nil }
        ended[#ended + 1] = { client = { company_id = post.company_id, environment = post.environment,
          client_id = post.client_id }, type = "social.post.published", data = data }
      end
    end
  end
  if #finals == 0 then return end
  local event, after = events.prepare_many(ended)
  local answers = assert(db.batch({ FINAL_SQL, finals }, event))
  after(answers[2])
end

function M.settle_locked(post, targets)
  return M.settle_locked_many({ { post = post, targets = targets } })
end

return M

-- One attempt at publishing one target, as docs/publishing.md describes:
-- lock and mark, resolve an unknown earlier outcome first, call the
-- platform outside any transaction, record the outcome, settle the post.
local json = require "json"
local coalesce = require "coalesce"
local posts = require "posts"
local adapters = require "platforms.adapters"
local retry = require "retry"
local graph_errors = require "platforms.graph_errors"
local token_health = require "token_health"

local M = {}

-- The statements of an attempt find their rows by key: each keeps one plan
-- per connection (the `generic plan` mark, docs/host-api.md), which spares
-- PostgreSQL most of their cost.
local LOAD_SQL = [[/* generic plan */
  SELECT t.id, t.post_id, t.status, t.attempts, t.run_attempts, t.adapter_state,
         extract(epoch FROM t.attempt_started_at)::float8 AS attempt_started_at,
         extract(epoch FROM t.next_attempt_at)::float8 AS next_attempt_at,
         p.content, p.image, p.status AS post_status,
         a.id AS account_id, a.platform, a.platform_account_id, a.access_token_enc, a.environment,
         a.status AS account_status, a.status_reason AS account_reason, a.company_id
    FROM post_targets t JOIN posts p ON p.id = t.post_id JOIN social_accounts a ON a.id = t.social_account_id
   WHERE t.id = $1 FOR UPDATE OF t]]

-- The common case of step 1, for every attempt a job worker starts in one
-- turn of its loop (lib/coalesce.lua), in one statement without a
-- transaction of its own: each target that is due (scheduled, queued, or
-- retry_scheduled whose time has come) on an active account is locked,
-- marked 'publishing' with its attempt counted, and its post (when it was
-- not publishing yet) made 'publishing' with its operation running, as
-- posts.settle would (a target that is not final keeps the post open).
-- Targets, then posts, are locked in the order of their ids, so two
-- workers' batches cannot deadlock. $1 is the ids (a JSON array), $2
-- clock.now(). The rows come back as they were before, with `started`;
-- for a target that did not start, begin's transaction below decides (and
-- nothing of it was written).
local START_SQL = [[/* generic plan */
  WITH cur AS MATERIALIZED (
    SELECT t.id, t.post_id, t.status, t.attempts, t.run_attempts, t.adapter_state, t.next_attempt_at,
           p.content, p.image, a.id AS account_id, a.platform, a.platform_account_id, a.access_token_enc,
           a.environment, a.status AS account_status, a.company_id
      FROM post_targets t JOIN posts p ON p.id = t.post_id JOIN social_accounts a ON a.id = t.social_account_id
     WHERE t.id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))
     ORDER BY t.id FOR UPDATE OF t),
  started AS (
    UPDATE post_targets t SET status = 'publishing', attempts = t.attempts + 1, run_attempts = t.run_attempts + 1,
           attempt_started_at = to_timestamp($2), next_attempt_at = NULL, updated_at = now()
      FROM cur
     WHERE t.id = cur.id AND cur.account_status = 'active'
       AND (cur.status IN ('scheduled', 'queued')
            OR (cur.status = 'retry_scheduled'
                AND (cur.next_attempt_at IS NULL OR cur.next_attempt_at <= to_timestamp($2 + 0.5))))
    RETURNING t.id, t.post_id),
  locked AS (
    SELECT p.id, p.operation_id FROM posts p
     WHERE p.id IN (SELECT post_id FROM started)
       AND p.status NOT IN ('publishing', 'published', 'partially_published', 'failed', 'cancelled')
     ORDER BY p.id FOR UPDATE),
  post AS (
    UPDATE posts p SET status = 'publishing', updated_at = now()
      FROM locked
     WHERE p.id = locked.id
       AND p.status NOT IN ('publishing', 'published', 'partially_published', 'failed', 'cancelled')
    RETURNING p.operation_id),
  op AS (
    UPDATE operations o SET status = 'running', updated_at = now()
      FROM post WHERE o.id = post.operation_id AND o.status = 'queued')
  SELECT cur.id, cur.post_id, cur.status, cur.attempts, cur.run_attempts, cur.adapter_state, cur.content, cur.image,
         cur.account_id, cur.platform, cur.platform_account_id, cur.access_token_enc, cur.environment, cur.company_id,
         EXISTS (SELECT 1 FROM started WHERE started.id = cur.id) AS started
    FROM cur]]

local start_attempts = coalesce.new(function(target_ids)
  local now = clock.now()
  local by_id = {}
  for _, row in ipairs(assert(db.query(START_SQL, target_ids, now))) do
    row.attempt_started_at = now -- read only when it started
    by_id[row.id] = row
  end
  return by_id
end)

local function fail_now(target_id, post_id, code, message, platform_code)
  assert(db.exec([[UPDATE post_targets SET status = 'failed', error = $2, next_attempt_at = NULL, updated_at = now()
      WHERE id = $1]], target_id, json.encode({ code = code, message = message, retryable = false, platformCode = platform_code })))
  posts.settle(post_id)
end

-- Step 1: returns the row and whether an earlier attempt must be resolved,
-- or nil (nothing to do) and an optional retry_in.
local function begin(target_id)
  local row = start_attempts(target_id)
  if row and row.started then
    row.attempts, row.run_attempts = row.attempts + 1, row.run_attempts + 1
    return row, false
  end
  local resolve, later
  db.transaction(function()
    row = assert(db.query(LOAD_SQL, target_id))[1]
    if not row or posts.FINAL_TARGET[row.status] then row = nil return end
    if row.status == "retry_scheduled" and row.next_attempt_at and row.next_attempt_at > clock.now() + 0.5 then
      later = row.next_attempt_at - clock.now()
      row = nil
      return
    end
    if row.account_status == "reconnect_required" then
      -- No call to Meta: the token is known to be unusable until reconnected.
      local e = token_health.stored_error(row.account_reason)
      fail_now(row.id, row.post_id, e.code, e.message, e.platform_code)
      row = nil
      return
    elseif row.account_status ~= "active" then
      fail_now(row.id, row.post_id, "account_disconnected", "The social account was disconnected.")
      row = nil
      return
    end
    -- Found in 'publishing': an attempt may have reached the platform.
    resolve = row.status == "publishing"
    if not resolve then
      assert(db.exec([[UPDATE post_targets SET status = 'publishing', attempts = attempts + 1,
          run_attempts = run_attempts + 1, attempt_started_at = to_timestamp($2), next_attempt_at = NULL,
          updated_at = now() WHERE id = $1]], row.id, clock.now()))
      row.attempts, row.run_attempts, row.attempt_started_at = row.attempts + 1, row.run_attempts + 1, clock.now()
    end
    posts.settle(row.post_id)
  end)
  return row, resolve, later
end

local function context(row)
  local account, err = adapters.account(row)
  if not account then return nil, err end
  local image
  if row.image then
    image = { mime_type = row.image.mime_type, url = row.image.url }
    if row.image.source == "upload" then image.url = require("media").url(row.image.upload_id) end
  end
  local state = row.adapter_state or {}
  return {
    account = account,
    post = { id = row.post_id, content = row.content, image = image },
    target = { id = row.id, attempts = row.attempts, attempt_started_at = row.attempt_started_at, adapter_state = state },
    save_state = function(tbl)
      for k, v in pairs(tbl) do state[k] = v end
      assert(db.exec("UPDATE post_targets SET adapter_state = $2 WHERE id = $1", row.id, json.encode(state)))
    end,
  }
end

-- Published targets ($1: [{id, platformPostId, permalinkUrl}]), and their
-- posts locked, in the order of their ids, for posts.settle_locked_many.
local PUBLISHED_SQL = [[/* generic plan */ WITH v AS (
    SELECT x->>'id' AS id, x->>'platformPostId' AS platform_post_id, x->>'permalinkUrl' AS permalink_url
      FROM jsonb_array_elements($1::jsonb) x),
  t AS (
    UPDATE post_targets pt SET status = 'published', platform_post_id = v.platform_post_id,
           permalink_url = v.permalink_url, published_at = now(), error = NULL, next_attempt_at = NULL,
           updated_at = now()
      FROM v WHERE pt.id = v.id RETURNING pt.post_id)
  SELECT ]] .. posts.POST_COLUMNS .. [[ FROM posts WHERE id IN (SELECT post_id FROM t) ORDER BY id FOR UPDATE]]

-- Step 3 for the targets a worker's jobs published in one turn of its loop
-- (lib/coalesce.lua), in one transaction: the targets are written and their
-- posts locked in one statement (the targets first, like every other step),
-- and the posts' targets read in the same round trip by a statement of its
-- own that starts once the locks are held, so it sees what the previous
-- holders committed; then the posts are settled, those that end together.
local record_published = coalesce.new(function(target_ids, outcomes)
  local list = {}
  for i, id in ipairs(target_ids) do
    list[i] = { id = id, platformPostId = outcomes[i].platform_post_id, permalinkUrl = outcomes[i].permalink_url }
  end
  db.transaction(function()
    local answers = assert(db.batch({ PUBLISHED_SQL, list }, { posts.TARGETS_OF_POSTS_OF_SQL, target_ids }))
    local locked, of_post = {}, {}
    for i, post in ipairs(answers[1]) do
      locked[i] = { post = post, targets = {} }
      of_post[post.id] = locked[i].targets
    end
    for _, t in ipairs(answers[2]) do table.insert(of_post[t.post_id], t) end
    posts.settle_locked_many(locked)
  end)
  return {} -- nothing more to do for any of them
end)

-- How long a target whose outcome is unknown keeps asking the platform
-- (its listing) when the platform cannot answer, before it fails: by then
-- Meta has long shown what it made.
local RESOLVE_GIVE_UP_SECONDS = 86400

-- Step 3: record the outcome and settle the post; returns the job's answer.
-- A failure is recorded only while the target is still in this run's
-- attempt: a run that lost its job's lease (another instance took the job
-- and started an attempt of its own) must not turn that attempt back.
local STILL_OURS_SQL = "SELECT 1 FROM post_targets WHERE id = $1 AND status = 'publishing' AND attempts = $2 FOR UPDATE"

-- final: a failure that gets no retry, whatever its class.
local function record(row, outcome, final)
  if outcome.status == "published" then return record_published(row.id, outcome) end
  local answer
  db.transaction(function()
    if not assert(db.query(STILL_OURS_SQL, row.id, row.attempts))[1] then
      log.warn("publish_outcome_dropped", { targetId = row.id, attempt = row.attempts, outcome = outcome.status,
        reason = "the target is no longer in this run's attempt (another run took its job over, or it was cancelled)" })
      return
    end
    local status = outcome.status
    if status == "unknown" then
      -- Stays 'publishing': the next run asks the platform before trying again.
      answer = { retry_in = retry.delay(row.run_attempts, { base = config.get("publishing.retry.base_seconds"),
        max = config.get("publishing.retry.max_seconds") }) }
    else
      local e = outcome.error or { code = "platform_unavailable", message = "No answer from the platform." }
      local retryable = graph_errors.retryable(e.code)
      -- A quota wait is no failure of the platform: the post goes out when the
      -- window frees, however many waits that takes (docs/publishing.md).
      -- Nor is a wait while Meta throttles the account or the app (e.paused):
      -- no call was made; the attempt that met the throttle counted already.
      local waits = e.quota_wait or e.paused
      local again = not final and retryable and (waits or retry.should_retry(e.code, row.run_attempts))
      local stored = json.encode({ code = e.code, message = e.message, retryable = retryable, platformCode = e.platform_code,
        platform = graph_errors.public_detail(e) })
      if again then
        local delay = waits and e.retry_after or retry.delay(row.run_attempts, {
          base = config.get("publishing.retry.base_seconds"), max = config.get("publishing.retry.max_seconds"),
          retry_after = e.retry_after })
        assert(db.exec([[UPDATE post_targets SET status = 'retry_scheduled', error = $2,
            next_attempt_at = to_timestamp($3), updated_at = now() WHERE id = $1]], row.id, stored, clock.now() + delay))
        if waits then
          assert(db.exec("UPDATE post_targets SET attempts = attempts - 1, run_attempts = run_attempts - 1 WHERE id = $1", row.id))
        end
        answer = { retry_in = delay }
      else
        assert(db.exec([[UPDATE post_targets SET status = 'failed', error = $2, next_attempt_at = NULL,
            updated_at = now() WHERE id = $1]], row.id, stored))
        if token_health.applies(e) then token_health.mark(row.account_id, e) end
      end
    end
    posts.settle(row.post_id)
  end)
  return answer
end

-- The job: returns nil when the target is done, or {retry_in = s}.
function M.run(target_id)
  local row, resolve, later = begin(target_id)
  if not row then
    if later then return { retry_in = later } end
    return nil
  end
  local ctx, err = context(row)
  if not ctx then
    record(row, { status = "error", error = { code = "token_expired", message = err } })
    return nil
  end
  local adapter = adapters.for_account(ctx.account)
  if resolve then
    local found, rerr = adapter.resolve(ctx)
    if not found then
      local e = type(rerr) == "table" and rerr or { code = "platform_unavailable", message = tostring(rerr) }
      log.warn("publish_resolve_failed", { targetId = row.id, error = e.message })
      if token_health.applies(e) then token_health.mark(row.account_id, e) end
      -- Asked for a day without an answer: the post may be live, but the
      -- target cannot wait for ever.
      if clock.now() - (row.attempt_started_at or clock.now()) > RESOLVE_GIVE_UP_SECONDS then
        return record(row, { status = "error", error = { code = "platform_unavailable",
          message = "Could not find out whether the post was published: " .. tostring(e.message) } }, true)
      end
      return { retry_in = retry.delay(row.run_attempts, { base = 5, max = config.get("publishing.retry.max_seconds") }) }
    end
    if found.status == "published" then return record(row, found) end
    -- Not there after as many attempts as any failure gets: the target
    -- fails, as a retryable error would after its last attempt.
    if not retry.should_retry("platform_unavailable", row.run_attempts) then
      return record(row, { status = "error", error = { code = "platform_unavailable",
        message = "The platform did not confirm the post in " .. row.run_attempts
          .. " attempts, and does not show it." } })
    end
    -- Not there: a fresh attempt, counted as one. attempt_started_at stays
    -- the start of the first attempt whose outcome is unknown, so that the
    -- next look still reaches back to it, however long Meta's listing lags.
    db.transaction(function()
      assert(db.exec([[UPDATE post_targets SET attempts = attempts + 1, run_attempts = run_attempts + 1,
          updated_at = now() WHERE id = $1]], row.id))
    end)
    row.attempts, row.run_attempts = row.attempts + 1, row.run_attempts + 1
    ctx.target.attempts = row.attempts
  end
  local outcome = adapter.publish(ctx)
  if resolve and outcome.status == "error" and outcome.error and outcome.error.code == "duplicate_content" then
    -- Meta refuses a status identical to the Page's last one: after an
    -- attempt whose outcome was unknown, that is most likely our own post,
    -- which the listing did not show yet. Ask again on the next run.
    outcome = { status = "unknown", error = { code = "platform_unavailable", message = outcome.error.message } }
  end
  if outcome.status == "retry_later" then
    -- The platform is still working (an Instagram container): the same attempt goes on later.
    assert(db.exec("UPDATE post_targets SET attempts = attempts - 1, run_attempts = run_attempts - 1 WHERE id = $1", row.id))
    return { retry_in = outcome.retry_in or 1 }
  end
  return record(row, outcome)
end

return M

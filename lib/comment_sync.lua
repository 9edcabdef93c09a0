-- The periodic comment sync (docs/comments.md, "Sync"): reads the comments of
-- recently published live targets from the platforms and applies them as
-- observations, so that what Meta's webhooks missed shows up anyway.
--
-- Bounded and polite. A run takes up the sync.max_targets_per_run targets
-- checked least recently (never checked first, then the newest posts) and
-- reads at most sync.max_pages_per_target pages of each. It leaves an account
-- alone once Meta says that account's usage is above USAGE_LIMIT percent or
-- the account fails (an expired token), and stops altogether when the app's
-- usage is, or when the run has used most of its interval. An interrupted
-- target keeps its cursor and goes on when its turn comes again.
--
-- Reconciliation: a pass that reads a target from its first page to its last,
-- every page whole, has seen every comment the target has; the comments we
-- hold for it that the pass did not see are gone from the platform (deleted
-- there, or with their thread). A pass may take several runs: the ids it has
-- seen are kept (comment_sync_seen) until it ends. A partial page (a comment
-- with more replies than one fetch reads) makes the pass conclude nothing;
-- an error that loses the cursor starts a new one.
local json = require "json"
local comments = require "comments"
local versions = require "comment_versions"
local adapters = require "platforms.adapters"
local token_health = require "token_health"

local M = {}

M.USAGE_LIMIT = 80
-- Share of sync.interval_seconds one run may take, so runs do not overlap.
local RUN_SHARE = 0.8

-- Taken up and marked checked in one statement: a second run at the same
-- time (a slow run, several instances) takes other targets.
local TAKE_SQL = [[
  WITH due AS (
    SELECT t.id, t.published_at
      FROM post_targets t
      JOIN social_accounts a ON a.id = t.social_account_id AND a.status = 'active'
      LEFT JOIN comment_sync s ON s.post_target_id = t.id
     WHERE t.status = 'published' AND t.environment = 'live' AND t.platform_post_id IS NOT NULL
       AND t.published_at > now() - make_interval(days => $1)
     ORDER BY s.checked_at NULLS FIRST, t.published_at DESC
     LIMIT $2
  ), taken AS (
    INSERT INTO comment_sync (post_target_id, checked_at) SELECT id, now() FROM due
    ON CONFLICT (post_target_id) DO UPDATE SET checked_at = now(), updated_at = now()
    RETURNING post_target_id, cursor, checked_at, pass_id, pass_cursor, pass_whole
  )
  SELECT t.id, t.platform_post_id, taken.cursor, extract(epoch FROM taken.checked_at)::float8 AS checked_at,
         taken.pass_id, taken.pass_cursor, taken.pass_whole,
         a.id AS account_id, a.platform, a.platform_account_id, a.access_token_enc, a.environment, a.company_id,
         a.name, a.username
    FROM taken JOIN post_targets t ON t.id = taken.post_target_id JOIN social_accounts a ON a.id = t.social_account_id
   ORDER BY t.published_at DESC]]

-- Where the target stands after a read that began at cursor `from`: nothing
-- is written when another run has moved the target on meanwhile. cursor nil:
-- the pass is complete (or must start over).
local function save(target_id, from, cursor, complete, err)
  assert(db.exec([[UPDATE comment_sync SET cursor = $3, synced_at = CASE WHEN $4 THEN now() ELSE synced_at END,
      error = $5, updated_at = now() WHERE post_target_id = $1 AND cursor IS NOT DISTINCT FROM $2]],
    target_id, from, cursor, complete, err))
end

-- A pass begins at the first page, with nothing seen yet; unless another run
-- has begun one and moved on meanwhile.
local START_PASS_SQL = [[
  WITH forgotten AS (DELETE FROM comment_sync_seen WHERE post_target_id = $1)
  UPDATE comment_sync SET pass_id = $3, pass_started_at = to_timestamp($2::float8), pass_cursor = NULL,
         pass_whole = true
   WHERE post_target_id = $1 AND cursor IS NULL RETURNING post_target_id]]

-- Inside a page's transaction: the target as it stands, locked, so that the
-- run that finds it where it left it is the only one to move it on.
local OWNER_SQL = "SELECT cursor, pass_id FROM comment_sync WHERE post_target_id = $1 FOR UPDATE"

-- The pass after a page: the cursor it saved, and whether it can still
-- conclude. A pass that reached the last page keeps no id, so nothing can go
-- on with it.
local PASS_SQL = [[UPDATE comment_sync SET pass_cursor = $2, pass_whole = $3,
    pass_id = CASE WHEN $2::text IS NOT NULL THEN pass_id END WHERE post_target_id = $1]]

-- The ids a page of the pass listed.
local SEEN_SQL = [[
  INSERT INTO comment_sync_seen (post_target_id, pass_id, platform_comment_id)
  SELECT $1, $2, jsonb_array_elements_text($3::jsonb) ON CONFLICT DO NOTHING]]

-- Errors about one target (its post is gone, a cursor expired): the account's
-- other targets go on. Any other class concerns the account or the platform.
local TARGET_ERRORS = { invalid_request = true, content_rejected = true }

-- The comments we hold for a target that a complete pass did not see
-- (comment_sync_seen), as deletions, and the pass's seen ids forgotten. Left
-- out: comments sgw first stored after the pass began (created on the
-- platform meanwhile, a listing that began earlier may not show them) or
-- within sync.deletion_grace_seconds before (Meta's listings can lag behind a
-- comment just made, such as our own reply).
local VANISHED_SQL = [[
  WITH pass AS (SELECT pass_started_at FROM comment_sync WHERE post_target_id = $1),
  forgotten AS (DELETE FROM comment_sync_seen WHERE post_target_id = $1)
  SELECT c.platform_comment_id FROM comments c, pass
   WHERE c.post_target_id = $1 AND c.company_id = $3 AND NOT c.is_deleted
     AND c.first_seen_at < pass.pass_started_at - make_interval(secs => $2)
     AND NOT EXISTS (SELECT 1 FROM comment_sync_seen s
                      WHERE s.post_target_id = $1 AND s.pass_id = $4 AND s.platform_comment_id = c.platform_comment_id)]]

local function vanished(ctx, row, pass)
  local rows = assert(db.query(VANISHED_SQL, row.id, config.get("sync.deletion_grace_seconds"), row.company_id, pass))
  local out = {}
  for i, r in ipairs(rows) do
    out[i] = { social_account_id = ctx.account.id, platform = ctx.account.platform,
      platform_post_id = row.platform_post_id, platform_comment_id = r.platform_comment_id,
      is_deleted = true, version = ctx.version, rank = ctx.rank }
  end
  return out
end

-- Pages through one target's comments. Returns nil to go on with the
-- account, "account" or "app" when usage or an error says to stop.
local function sync_target(adapter, account, row, deadline_ms)
  local cursor = row.cursor
  -- The pass this run goes on with, and whether it can still conclude which
  -- comments are gone: only if every page so far was read by a run that kept
  -- what it saw (the cursor is the one the pass saved; an older sgw's run
  -- leaves another) and was whole.
  local pass, whole = row.pass_id, row.pass_whole and row.pass_id ~= nil and row.pass_cursor == cursor
  if not cursor then
    pass, whole = crypto.random_token(16), true
    -- Another run has begun a pass and moved on: the target is that run's.
    if #assert(db.query(START_PASS_SQL, row.id, row.checked_at, pass)) == 0 then return nil end
  end
  for _ = 1, config.get("sync.max_pages_per_target") do
    local version, rank = versions.fetched(clock.now())
    local ctx = { account = account, target = { id = row.id, platform_post_id = row.platform_post_id },
      version = version, rank = rank }
    local page, err, usage = adapter.fetch_comments(ctx, cursor)
    usage = (page and page.usage) or usage or { app = 0, account = 0 }
    if not page then
      -- Not sent (the job's lease): nothing was learnt, and no other call of
      -- this run would go out either.
      if err.lease then return "app" end
      log.warn("comment_sync_failed", { targetId = row.id, accountId = account.id, class = err.code,
        platformCode = err.platform_code, error = err.message })
      local target_only = TARGET_ERRORS[err.code]
      if token_health.applies(err) then token_health.mark(account.id, err) end
      save(row.id, cursor, not target_only and cursor or nil, false, err.message)
      -- Meta throttles the whole app: no other account's call would go out either.
      if usage.app > M.USAGE_LIMIT or (err.paused and err.throttle == "app") then return "app" end
      return not target_only and "account" or nil
    end
    if page.partial then whole = false end
    local ours
    db.transaction(function()
      local observations = page.observations
      local now = assert(db.query(OWNER_SQL, row.id))[1]
      ours = now ~= nil and now.cursor == cursor and now.pass_id == pass
      -- What the page shows is applied whoever moves the target on.
      if ours and whole then
        local ids = {}
        for i, o in ipairs(observations) do ids[i] = o.platform_comment_id end
        assert(db.exec(SEEN_SQL, row.id, pass, json.encode(json.array(ids))))
        if page.cursor == nil then
          local gone = vanished(ctx, row, pass)
          if #gone > 0 then
            log.info("comment_sync_vanished", { targetId = row.id, comments = #gone })
            observations = table.move(gone, 1, #gone, #observations + 1, table.move(observations, 1, #observations, 1, {}))
          end
        end
      end
      comments.announce(comments.apply(observations))
      if ours then
        save(row.id, cursor, page.cursor, page.cursor == nil, nil)
        assert(db.exec(PASS_SQL, row.id, page.cursor, whole))
      end
    end)
    -- Another run took the target up meanwhile and has moved on: it is that run's.
    if not ours then return nil end
    cursor = page.cursor
    if usage.app > M.USAGE_LIMIT or clock.mono_ms() > deadline_ms then return "app" end
    if usage.account > M.USAGE_LIMIT then return "account" end
    if not cursor then return nil end
  end
  return nil
end

-- One account's targets, in order; "app" when the whole run must stop.
local function sync_account(rows, deadline_ms)
  local account, err = adapters.account(rows[1])
  if not account then
    log.warn("comment_sync_no_token", { accountId = rows[1].account_id, error = err })
    return nil
  end
  local adapter = adapters.for_account(account)
  for _, row in ipairs(rows) do
    local stop = sync_target(adapter, account, row, deadline_ms)
    if stop then
      log.info("comment_sync_stopped", { accountId = account.id, targetId = row.id, scope = stop })
      return stop == "app" and "app" or nil
    end
  end
end

-- Targets grouped by account, accounts in the order of their first target.
local function by_account(rows)
  local groups, index = {}, {}
  for _, row in ipairs(rows) do
    local g = index[row.account_id]
    if not g then
      g = {}
      index[row.account_id] = g
      groups[#groups + 1] = g
    end
    g[#g + 1] = row
  end
  return groups
end

-- The job (handlers/jobs/sync_comments.lua).
function M.run()
  local deadline_ms = clock.mono_ms() + config.get("sync.interval_seconds") * 1000 * RUN_SHARE
  local rows = assert(db.query(TAKE_SQL, config.get("sync.lookback_days"), config.get("sync.max_targets_per_run")))
  local stopped = false
  for _, group in ipairs(by_account(rows)) do
    -- One account's surprise (a bad answer, a database hiccup) is not the others'.
    local ok, result = pcall(sync_account, group, deadline_ms)
    if not ok then
      log.error("comment_sync_account_error", { accountId = group[1].account_id, error = tostring(result) })
    elseif result == "app" then
      stopped = true
      break
    end
  end
  log.info("comment_sync_run", { targets = #rows, stoppedEarly = stopped })
end

return M

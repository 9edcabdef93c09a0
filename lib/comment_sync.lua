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
local comments = require "comments"
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
    RETURNING post_target_id, cursor
  )
  SELECT t.id, t.platform_post_id, taken.cursor,
         a.id AS account_id, a.platform, a.platform_account_id, a.access_token_enc, a.environment, a.company_id,
         a.name, a.username
    FROM taken JOIN post_targets t ON t.id = taken.post_target_id JOIN social_accounts a ON a.id = t.social_account_id
   ORDER BY t.published_at DESC]]

-- cursor nil: the pass is complete (or must start over).
local function save(target_id, cursor, complete, err)
  assert(db.exec([[UPDATE comment_sync SET cursor = $2, synced_at = CASE WHEN $3 THEN now() ELSE synced_at END,
      error = $4, updated_at = now() WHERE post_target_id = $1]], target_id, cursor, complete, err))
end

-- Errors about one target (its post is gone, a cursor expired): the account's
-- other targets go on. Any other class concerns the account or the platform.
local TARGET_ERRORS = { invalid_request = true, content_rejected = true }

-- Webhooks date a change to the whole second (Meta's created_time, rounded
-- down); a fetch counts as seen a second before it began, so that a change
-- made while it was on its way still wins over it.
local function fetch_version()
  return clock.now() - 1
end

-- Pages through one target's comments. Returns nil to go on with the
-- account, "account" or "app" when usage or an error says to stop.
local function sync_target(adapter, account, row, deadline_ms)
  local cursor = row.cursor
  for _ = 1, config.get("sync.max_pages_per_target") do
    local ctx = { account = account, target = { id = row.id, platform_post_id = row.platform_post_id },
      version = fetch_version() }
    local page, err, usage = adapter.fetch_comments(ctx, cursor)
    usage = (page and page.usage) or usage or { app = 0, account = 0 }
    if not page then
      log.warn("comment_sync_failed", { targetId = row.id, accountId = account.id, class = err.code,
        platformCode = err.platform_code, error = err.message })
      local target_only = TARGET_ERRORS[err.code]
      if token_health.applies(err) then token_health.mark(account.id, err) end
      save(row.id, not target_only and cursor or nil, false, err.message)
      if usage.app > M.USAGE_LIMIT then return "app" end
      return not target_only and "account" or nil
    end
    db.transaction(function()
      local created = comments.apply(page.observations)
      comments.announce(created)
      save(row.id, page.cursor, page.cursor == nil, nil)
    end)
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

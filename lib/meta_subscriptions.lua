-- Webhook subscriptions of connected Pages (CONTRACT section 11). Meta
-- delivers a field only when it is subscribed both by the app (`sgw meta
-- subscribe-app`) and on the Page (`POST /{page-id}/subscribed_apps`, with that
-- Page's token). An Instagram account's comments come through its linked
-- Page, so its row names that Page in page_id.
--
-- Every live account remembers its own state (webhooks_subscribed_at,
-- webhooks_fields, webhooks_checked_at, webhooks_error); the API shows
-- webhooksSubscribed from it. A failed subscription never undoes a
-- connection: the error is kept and logged, and the periodic check
-- (handlers/jobs/meta_subscriptions_check.lua) tries again.
local graph = require "platforms.graph"
local accounts = require "accounts"
local graph_version = require "meta_graph_version"
local token_check = require "token_check"

local M = {}

-- The fields sgw needs on a Page: its comments (and, for Instagram, the
-- app-level "comments" subscription of the instagram object).
M.FIELDS = "feed"

-- The app's own subscriptions (`sgw meta subscribe-app`): object -> the
-- field sgw reads from it.
M.APP_SUBSCRIPTIONS = { { object = "page", fields = "feed" }, { object = "instagram", fields = "comments" } }

local CONNECTED = "status IN ('active', 'reconnect_required')"

local function record(page_id, fields, err)
  if err then
    assert(db.exec([[UPDATE social_accounts SET webhooks_subscribed_at = NULL, webhooks_fields = NULL,
        webhooks_checked_at = now(), webhooks_error = $2
      WHERE page_id = $1 AND environment = 'live' AND ]] .. CONNECTED, page_id, err))
  else
    assert(db.exec([[UPDATE social_accounts SET webhooks_subscribed_at = coalesce(webhooks_subscribed_at, now()),
        webhooks_fields = $2, webhooks_checked_at = now(), webhooks_error = NULL
      WHERE page_id = $1 AND environment = 'live' AND ]] .. CONNECTED, page_id, fields))
  end
end

-- Subscribes the app to a Page's feed with the Page's token and records the
-- outcome on every connected live account of that Page. Returns true, or
-- nil and the error's message.
function M.subscribe(page_id, token)
  local ok, err = graph.call("POST", page_id .. "/subscribed_apps", { subscribed_fields = M.FIELDS }, token)
  if not ok then
    log.warn("meta_subscription_failed", { page = page_id, error = err.message, platformCode = err.platform_code })
    record(page_id, nil, err.message or err.code)
    return nil, err.message
  end
  log.info("meta_subscribed", { page = page_id, fields = M.FIELDS })
  record(page_id, M.FIELDS)
  return true
end

-- A live account was just connected: remember its Page and subscribe it.
-- page_id is nil when the Page is not known (an Instagram account added by
-- `sgw account add` without --page-id): recorded as the reason it has no
-- webhooks.
function M.attach(account_id, page_id, token)
  if not page_id then
    local why = "no Facebook Page is known for this account: add it again with its Page (--page-id)"
    assert(db.exec([[UPDATE social_accounts SET page_id = NULL, webhooks_subscribed_at = NULL,
        webhooks_fields = NULL, webhooks_checked_at = now(), webhooks_error = $2 WHERE id = $1]], account_id, why))
    log.warn("meta_subscription_failed", { account = account_id, error = why })
    return nil, why
  end
  assert(db.exec("UPDATE social_accounts SET page_id = $2 WHERE id = $1", account_id, page_id))
  return M.subscribe(page_id, token)
end

-- An account was disconnected: the app leaves its Page, unless another
-- connected live account (of any company) still gets that Page's webhooks.
-- Failing to leave is logged only: Meta then sends deliveries sgw drops.
function M.release(account_id)
  local rows = assert(db.query([[SELECT id, page_id, access_token_enc, platform_account_id FROM social_accounts
      WHERE id = $1 AND environment = 'live' AND status = 'disconnected' AND page_id IS NOT NULL]], account_id))
  local row = rows[1]
  if not row then return end
  assert(db.exec([[UPDATE social_accounts SET webhooks_subscribed_at = NULL, webhooks_fields = NULL,
      webhooks_error = NULL WHERE id = $1]], row.id))
  local others = assert(db.query("SELECT 1 FROM social_accounts WHERE page_id = $1 AND environment = 'live' AND "
    .. CONNECTED .. " AND id <> $2 LIMIT 1", row.page_id, row.id))
  if others[1] then return end
  local token = accounts.decrypt_token(row)
  if not token then return end
  local ok, err = graph.call("DELETE", row.page_id .. "/subscribed_apps", {}, token)
  if not ok then
    log.warn("meta_unsubscribe_failed", { page = row.page_id, error = err.message, platformCode = err.platform_code })
    return
  end
  log.info("meta_unsubscribed", { page = row.page_id })
end

-- The fields this app has on a Page (a set), or nil and the Graph error.
local function subscribed_fields(page_id, token)
  local answer, err = graph.call("GET", page_id .. "/subscribed_apps", {}, token)
  if not answer then return nil, err end
  local app_id = tostring(config.get("meta.app_id") or "")
  for _, app in ipairs(type(answer.data) == "table" and answer.data or {}) do
    if tostring(app.id) == app_id then
      local set = {}
      for _, f in ipairs(type(app.subscribed_fields) == "table" and app.subscribed_fields or {}) do
        set[f] = true
      end
      return set
    end
  end
  return {}
end

-- Checks one Page's subscription; subscribes again when the app is no
-- longer there or lacks feed (the Page's admin removed the app, Meta dropped
-- it). Returns "ok", "resubscribed" or "failed".
function M.check(page_id, token)
  local fields, err = subscribed_fields(page_id, token)
  if not fields and err.lease then
    log.info("meta_subscription_check_deferred", { page = page_id, error = err.message })
    return "failed"
  end
  if not fields then
    -- Not knowing is no reason to say the subscription is gone: only the
    -- error is kept, for the next check to clear.
    log.warn("meta_subscription_check_failed", { page = page_id, error = err.message, platformCode = err.platform_code })
    assert(db.exec([[UPDATE social_accounts SET webhooks_checked_at = now(), webhooks_error = $2
      WHERE page_id = $1 AND environment = 'live' AND ]] .. CONNECTED, page_id, err.message or err.code))
    return "failed"
  end
  if fields[M.FIELDS] then
    record(page_id, M.FIELDS)
    return "ok"
  end
  log.warn("meta_subscription_lost", { page = page_id })
  return M.subscribe(page_id, token) and "resubscribed" or "failed"
end

-- The app's subscriptions as Meta lists them (GET /{app-id}/subscriptions,
-- app token): each field sgw reads must be there, at the version sgw calls.
-- A field keeps the version it was subscribed with and its deliveries follow
-- that version, so moving meta.graph_base_url leaves the webhooks behind
-- until `sgw meta subscribe-app` runs again. Each problem is a warning in the
-- log saying so. Returns the number of problems, or nil and the Graph error
-- (0 while the Meta app is not set: nothing to ask with).
function M.check_app()
  local app_token = token_check.app_token()
  if not app_token then return 0 end
  local listed, err = graph.call("GET", config.get("meta.app_id") .. "/subscriptions", {}, app_token)
  if not listed then
    log.warn("meta_app_subscriptions_check_failed", { error = err.message, platformCode = err.platform_code })
    return nil, err
  end
  local have = {}
  for _, sub in ipairs(type(listed.data) == "table" and listed.data or {}) do
    for _, f in ipairs(type(sub) == "table" and type(sub.fields) == "table" and sub.fields or {}) do
      -- A field Meta lists without a version is there; nothing to compare.
      if type(f) == "table" then
        have[tostring(sub.object) .. "/" .. tostring(f.name)] = type(f.version) == "string" and f.version or ""
      end
    end
  end
  local configured, problems = graph_version.configured().version, 0
  for _, want in ipairs(M.APP_SUBSCRIPTIONS) do
    local version = have[want.object .. "/" .. want.fields]
    local detail = { object = want.object, field = want.fields, version = version, configured = configured,
      fix = "run sgw meta subscribe-app" }
    if not version then
      problems = problems + 1
      log.warn("meta_app_subscription_missing", detail)
    elseif version ~= configured and version ~= "" and configured ~= "unknown" then
      problems = problems + 1
      log.warn("meta_webhook_version_behind", detail)
    end
  end
  return problems
end

-- Every Page of an active live account, once, with one of its tokens.
function M.pages()
  return assert(db.query([[SELECT DISTINCT ON (page_id) page_id, access_token_enc, platform_account_id
      FROM social_accounts WHERE environment = 'live' AND status = 'active' AND page_id IS NOT NULL
        AND access_token_enc IS NOT NULL
      ORDER BY page_id, connected_at DESC]]))
end

return M

-- Token health (CONTRACT 11, README "Token health"): what a Graph answer says
-- about an account's token. Code 190 (token_expired) or 10 / 200-299
-- (permission_missing) makes the account reconnect_required until it is
-- connected again; meanwhile its targets and moderation operations fail at
-- once with the stored reason, without asking Meta. Each transition emits
-- one social.account.* event to every client of the company and environment.
local json = require "json"
local accounts = require "accounts"
local events = require "events"

local M = {}

-- The error classes (lib/platforms/graph_errors.lua) that concern the token
-- rather than the call.
M.CLASSES = { token_expired = true, permission_missing = true }

-- Did Meta answer this error about the account's token? Its platform code is
-- Meta's number. A token sgw could not decrypt (no platform code) is sgw's
-- problem, and the sandbox's simulated failures ("sandbox") fail the one
-- attempt they were asked for: neither changes the account.
function M.applies(err)
  return type(err) == "table" and M.CLASSES[err.code] == true and type(err.platform_code) == "string"
    and err.platform_code:match("^%-?%d") ~= nil
end

-- The error a target or operation of a reconnect_required account fails with:
-- the stored reason ({code, message, platformCode}).
function M.stored_error(reason)
  reason = type(reason) == "table" and reason or {}
  return { code = reason.code or "token_expired",
    message = reason.message or "The account must be connected again.",
    platform_code = reason.platformCode ~= json.null and reason.platformCode or nil }
end

local function account_row(id)
  return assert(db.query("SELECT " .. accounts.COLUMNS .. ", company_id FROM social_accounts WHERE id = $1", id))[1]
end

-- Emits `type` with {account} for the account row (which has company_id).
function M.announce(row, type)
  events.emit_to_company(row.company_id, row.environment, type, { account = accounts.present(row) })
end

-- Marks an active account reconnect_required for err ({code, message,
-- platform_code}) and emits social.account.reconnect_required; nothing when
-- it is not active (already marked, disconnected). Runs in the caller's
-- transaction, or in its own. Returns true on a transition.
function M.mark(account_id, err)
  local changed = false
  db.transaction(function()
    local reason = json.encode({ code = err.code, message = err.message, platformCode = err.platform_code or json.null })
    local rows = assert(db.query([[UPDATE social_accounts SET status = 'reconnect_required', status_reason = $2::jsonb,
        status_since = now() WHERE id = $1 AND status = 'active' RETURNING id]], account_id, reason))
    if not rows[1] then return end
    changed = true
    M.announce(account_row(account_id), "social.account.reconnect_required")
    log.warn("account_reconnect_required", { accountId = account_id, reason = err.code, platformCode = err.platform_code })
  end)
  return changed
end

return M

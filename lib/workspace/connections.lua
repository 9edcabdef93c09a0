-- Connected accounts as the workspace shows them: per environment, active
-- and disconnected, always within the signed-in person's company.
local web = require "workspace.web"
local facebook = require "workspace.facebook"
local subscriptions = require "meta_subscriptions"

local M = {}

local PLATFORMS = { facebook = "Facebook Page", instagram = "Instagram" }
local REASONS = {
  token_expired = "Facebook no longer accepts this account's access token. Connect it again to go on publishing.",
  permission_missing = "A permission sgw needs was removed on Facebook. Connect it again to go on publishing.",
}
-- Meta's subcode 492: the person who connected the account lost their role on
-- the Page. A new token of theirs fails the same way until a Page admin gives
-- the role back, so connecting again alone does not help.
local REASONS_BY_PLATFORM_CODE = {
  ["190/492"] = "The Facebook user who connected this account no longer has a role on its Page. "
    .. "A Page admin must give that role back (or someone with a role must connect it) before publishing can go on.",
}

local COLUMNS = "id, platform, name, username, environment, status, status_reason, "
  .. web.when("connected_at", "connected_at") .. ", " .. web.when("disconnected_at", "disconnected_at")

local function present(row)
  row.platform_label = PLATFORMS[row.platform]
  row.active = row.status == "active"
  row.connected = row.active or row.status == "reconnect_required"
  -- Meta's own words too: they often say what happened (password changed, app removed).
  local reason = row.status == "reconnect_required" and type(row.status_reason) == "table" and row.status_reason
  row.reconnect = reason and { why = REASONS_BY_PLATFORM_CODE[reason.platformCode] or REASONS[reason.code] or reason.code,
    meta = reason.message } or nil
  -- Instagram accounts are named by their username: no need to say it twice.
  row.handle = row.username ~= row.name and row.username or nil
  return row
end

function M.list(company_id, environment)
  local rows = web.rows("SELECT " .. COLUMNS .. [[ FROM social_accounts
      WHERE company_id = $1 AND environment = $2
      ORDER BY status = 'disconnected', connected_at DESC, id]], company_id, environment)
  for _, row in ipairs(rows) do present(row) end
  return rows
end

-- One account of the company, or nil (another company's is as absent).
function M.get(company_id, id)
  if type(id) ~= "string" or #id > 64 then return nil end
  local rows = web.rows("SELECT " .. COLUMNS .. " FROM social_accounts WHERE id = $1 AND company_id = $2",
    id, company_id)
  return rows[1] and present(rows[1])
end

-- The publisher fails targets of an account that is not active
-- (account_disconnected); posts and their history stay. The app leaves the
-- account's Page unless another account still uses it.
function M.disconnect(company_id, id)
  local changed = assert(db.exec([[UPDATE social_accounts SET status = 'disconnected', disconnected_at = now()
      WHERE id = $1 AND company_id = $2 AND status IN ('active', 'reconnect_required')]], id, company_id))
  if changed > 0 then subscriptions.release(id) end
end

function M.environment(value)
  return (value == "test" or value == "live") and value or nil
end

-- The Connections page of one environment; extra: error, page_name,
-- instagram_selected (the "Add test page" form again after a mistake).
function M.render(w, environment, extra, status)
  local accounts = M.list(w.session.company_id, environment)
  local data = extra or {}
  data.title, data.section = "Connections", "connections"
  data.live, data.sandbox = environment == "live", environment == "test"
  data.env_label = web.ENVIRONMENTS[environment]
  data.accounts, data.has_accounts = accounts, #accounts > 0
  data.facebook_ready = facebook.configured()
  data.tabs = web.environment_tabs("/workspace/connections", environment)
  return w:render("connections", data, status)
end

return M

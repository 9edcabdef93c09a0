-- API clients as the workspace shows them, always within the signed-in
-- person's company. Creating, rotating and revoking go through
-- lib/credentials.lua, as the operator commands do.
local scopes = require "scopes"
local webhook_url = require "webhook_url"
local web = require "workspace.web"
local trim = require "trim"

local M = {}

-- What each scope allows, for the checkboxes (spec 5.3).
M.SCOPE_MEANINGS = {
  ["accounts:read"] = "list connected accounts",
  ["posts:read"] = "read posts",
  ["posts:write"] = "publish, cancel, retry",
  ["comments:read"] = "read comments",
  ["comments:write"] = "reply, hide, delete",
  ["operations:read"] = "follow operations",
  ["uploads:write"] = "upload images",
  ["sandbox:write"] = "sandbox tools (sandbox only)",
}

local function present(row)
  row.scopes = scopes.from_text(row.scopes)
  row.environment_label = web.ENVIRONMENTS[row.environment]
  return row
end

-- The newest key that has not been rotated away is the current one.
local CURRENT_KEY = [[(SELECT k.key_prefix FROM api_keys k
    WHERE k.client_id = c.id AND k.revoked_at IS NULL AND k.expires_at IS NULL
    ORDER BY k.created_at DESC, k.id DESC LIMIT 1) AS key_prefix]]

local COLUMNS = "c.id, c.name, c.environment, array_to_string(c.scopes, ' ') AS scopes, c.webhook_url, "
  .. web.when("c.created_at", "created_at") .. ", " .. web.when("c.last_used_at", "last_used_at") .. ", "
  .. web.when("c.revoked_at", "revoked_at") .. ", " .. web.when("c.webhook_disabled_at", "webhook_disabled_at")
  .. ", " .. CURRENT_KEY

-- Active clients first (newest first), then revoked ones: two lists.
function M.list(company_id)
  local rows = web.rows("SELECT " .. COLUMNS .. [[ FROM api_clients c
      WHERE c.company_id = $1 ORDER BY c.created_at DESC, c.id]], company_id)
  local active, revoked = {}, {}
  for _, row in ipairs(rows) do
    local list = row.revoked_at and revoked or active
    list[#list + 1] = present(row)
  end
  return active, revoked
end

-- One client of the company (revoked or not), or nil: another company's
-- client is as absent as one that does not exist.
function M.get(company_id, id)
  if type(id) ~= "string" or #id > 64 then return nil end
  local rows = web.rows("SELECT " .. COLUMNS .. [[ FROM api_clients c
      WHERE c.id = $1 AND c.company_id = $2]], id, company_id)
  local row = rows[1]
  if not row then return nil end
  row.previous_keys = web.rows([[SELECT key_prefix AS prefix, ]] .. web.when("expires_at", "expires_at") .. [[
      FROM api_keys WHERE client_id = $1 AND revoked_at IS NULL AND expires_at > now()
      ORDER BY expires_at DESC]], id)
  return present(row)
end

-- The latest delivery attempts of the client's events (newest first).
function M.deliveries(client_id, limit)
  return web.rows([[SELECT d.event_id, e.type AS event_type, d.attempt, d.outcome, d.status_code, d.error,
      d.duration_ms, ]] .. web.when("d.created_at", "created_at") .. ", " .. web.when("d.next_retry_at", "next_retry_at") .. [[
      FROM webhook_deliveries d JOIN events e ON e.id = d.event_id
      WHERE d.client_id = $1 ORDER BY d.created_at DESC, d.id DESC LIMIT $2]], client_id, limit or 20)
end

-- The form's scope checkboxes, ticked as given (a set) or, for a new form,
-- everything but the sandbox tools.
function M.scope_choices(ticked)
  local out = {}
  for i, name in ipairs(scopes.all) do
    local checked
    if ticked then checked = ticked[name] == true else checked = name ~= "sandbox:write" end
    out[i] = { name = name, id = name:gsub(":", "-"), meaning = M.SCOPE_MEANINGS[name], checked = checked }
  end
  return out
end

-- Reads the "new client" form. Returns the options for
-- credentials.create_client, or nil and {field = message}.
function M.read_form(fields, company_id)
  local errors, ticked, list = {}, {}, {}
  local name = trim(fields.name or "")
  if name == "" or #name > 200 then errors.name = "Give the client a name of 1 to 200 characters, e.g. the application that will use it." end
  local env = fields.environment
  if env ~= "live" and env ~= "test" then errors.environment = "Choose Sandbox or Live." end
  for _, s in ipairs(scopes.all) do
    if fields["scope:" .. s] then
      ticked[s] = true
      list[#list + 1] = s
    end
  end
  if #list == 0 then errors.scopes = "Tick at least one scope: what the client may do." end
  local url = trim(fields.webhook_url or "")
  if url ~= "" then
    local ok, why = webhook_url.check(url)
    if not ok then errors.webhook_url = "The webhook URL " .. why .. "." end
  end
  local opts = { company_id = company_id, environment = env, name = name, scopes = list,
    webhook_url = url ~= "" and url or nil }
  if next(errors) then return nil, errors, opts, ticked end
  return opts
end

-- The "new client" form; values: name, environment, webhook_url, errors,
-- ticked (a set of scopes; nil for a new form).
function M.render_form(w, values, status)
  values.title, values.section = "New API client", "clients"
  values.scopes = M.scope_choices(values.ticked)
  values.test, values.live = values.environment ~= "live", values.environment == "live"
  return w:render("client_new", values, status)
end

-- Secrets, shown this once. page: heading, client_id, secrets ({id, label,
-- value, hint}), webhook, previous_until and grace (after a rotation).
function M.render_secrets(w, page, status)
  page.title, page.section = page.heading, "clients"
  return w:render("client_secrets", page, status)
end

return M

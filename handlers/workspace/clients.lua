-- GET /workspace/clients: the company's API clients. POST (name,
-- environment, scope:<s>, webhook_url): a new client, its secrets shown once.
local web = require "workspace.web"
local clients = require "workspace.clients"
local credentials = require "credentials"
local problem = require "problem"

local function created_page(w, c)
  local secrets = {
    { id = "secret-api-key", label = "API key", value = c.apiKey,
      hint = "Send it as X-Api-Key: <key> or Authorization: Bearer <key>." },
    { id = "secret-client-id", label = "OAuth client ID", value = c.clientId },
    { id = "secret-client-secret", label = "OAuth client secret", value = c.clientSecret,
      hint = "With the client ID, for POST /oauth/token (grant_type=client_credentials)." },
  }
  if c.webhookSecret then
    secrets[#secrets + 1] = { id = "secret-webhook", label = "Webhook signing secret", value = c.webhookSecret,
      hint = "Checks the webhook-signature header of the events sent to your webhook URL." }
  end
  return clients.render_secrets(w, { heading = "API client created", client_id = c.clientId, secrets = secrets,
    webhook = c.webhookSecret ~= nil }, 201)
end

return web.page(function(w)
  local company_id = w.session.company_id
  if not w.posted then
    local active, revoked = clients.list(company_id)
    return w:render("clients", { title = "API clients", section = "clients", clients = active,
      has_clients = #active > 0, revoked = revoked, has_revoked = #revoked > 0 })
  end
  local opts, errors, given, ticked = clients.read_form(w.form, company_id)
  if not opts then
    return clients.render_form(w, { errors = errors, name = given.name, environment = given.environment,
      webhook_url = given.webhook_url, ticked = ticked }, 422)
  end
  local created, err = credentials.create_client(opts)
  if not created then
    if problem.is_outage(err) then error(err, 0) end  -- the outage page
    log.error("workspace_client_create_failed", { error = err })
    return w:fail(500, "The client could not be created", "Nothing was created. Try again in a moment.",
      "/workspace/clients", "Back to API clients")
  end
  return created_page(w, created)
end)

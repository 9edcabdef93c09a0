-- GET /workspace/clients/{clientId}: one client of the company, its keys
-- (prefixes only), and its latest webhook deliveries.
local web = require "workspace.web"
local clients = require "workspace.clients"

return web.page(function(w)
  local client = clients.get(w.session.company_id, w.req.params.clientId)
  if not client then return w:not_found() end
  local deliveries = clients.deliveries(client.id, 20)
  return w:render("client_show", { title = client.name, section = "clients", client = client,
    deliveries = deliveries, has_deliveries = #deliveries > 0 })
end)

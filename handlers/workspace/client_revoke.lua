-- GET /workspace/clients/{clientId}/revoke: asks; POST: the client, its keys
-- and tokens stop working at once.
local web = require "workspace.web"
local clients = require "workspace.clients"
local credentials = require "credentials"

return web.page(function(w)
  local client = clients.get(w.session.company_id, w.req.params.clientId)
  if not client or client.revoked_at then return w:not_found() end
  if not w.posted then
    return w:render("client_revoke", { title = "Revoke " .. client.name, section = "clients", client = client })
  end
  assert(credentials.revoke_client(client.id))
  return w:redirect("/workspace/clients?notice=client_revoked")
end)

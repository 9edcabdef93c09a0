-- GET /workspace/clients/new: the form for a new API client.
local web = require "workspace.web"
local clients = require "workspace.clients"

return web.page(function(w)
  return clients.render_form(w, { environment = "test" })
end)

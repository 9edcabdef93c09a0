-- GET /workspace: the Connections page is where a company starts.
local web = require "workspace.web"

return web.page(function(w)
  return w:redirect("/workspace/connections")
end)

-- GET /workspace/connections?env=live|test: the company's accounts of one
-- environment, "Connect with Facebook" (live) and "Add test page" (sandbox).
local web = require "workspace.web"
local connections = require "workspace.connections"

return web.page(function(w)
  return connections.render(w, connections.environment(w.req.query.env) or "live")
end)

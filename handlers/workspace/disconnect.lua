-- GET /workspace/connections/{accountId}/disconnect: asks; POST: the account
-- is disconnected (it stops publishing; posts and history stay).
local web = require "workspace.web"
local connections = require "workspace.connections"

return web.page(function(w)
  local account = connections.get(w.session.company_id, w.req.params.accountId)
  if not account then return w:not_found() end
  if not w.posted then
    return w:render("disconnect", { title = "Disconnect " .. account.name, section = "connections", account = account,
      env_label = web.ENVIRONMENTS[account.environment], live = account.environment == "live" })
  end
  connections.disconnect(w.session.company_id, account.id)
  return w:redirect("/workspace/connections?env=" .. account.environment .. "&notice=account_disconnected")
end)

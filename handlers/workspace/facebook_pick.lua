-- POST /workspace/facebook/pick (attempt, page:<id>, ig:<id>): the ticked
-- Pages and Instagram accounts become live accounts of the company.
local web = require "workspace.web"
local facebook = require "workspace.facebook"

return web.page(function(w)
  local pages = facebook.take(w.session, w.form.attempt)
  if not pages then
    return w:fail(400, "This connection attempt is no longer valid",
      "It expired or its Pages were connected already. Start again with Connect with Facebook.",
      "/workspace/connections?env=live", "Back to Connections")
  end
  local n = facebook.connect(w.session.company_id, pages, w.form)
  return w:redirect("/workspace/connections?env=live&notice=" .. (n > 0 and "accounts_connected" or "nothing_connected"))
end)

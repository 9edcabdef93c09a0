-- GET /workspace/facebook/connect: off to Meta's OAuth dialog, with a state
-- bound to this session.
local web = require "workspace.web"
local facebook = require "workspace.facebook"

return web.page(function(w)
  if not facebook.configured() then
    return w:fail(503, "Facebook is not set up", "The operator must set meta.app_id and meta.app_secret before Pages can be connected.",
      "/workspace/connections?env=live", "Back to Connections")
  end
  return w:redirect(facebook.start(w.session))
end)

-- POST /workspace/logout: ends the session here and in the database.
local web = require "workspace.web"

return web.public(function(w)
  return w:sign_out()
end)

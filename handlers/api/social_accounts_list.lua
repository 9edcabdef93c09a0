-- GET /api/v1/social-accounts: the active accounts of the caller's company
-- in the caller's environment.
local accounts = require "accounts"
local json = require "json"

return function(_, ctx)
  return 200, { data = json.array(accounts.list_connected(ctx.client)) }
end

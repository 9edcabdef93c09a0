-- POST /webhooks/meta/deauthorize: a person removed the app on Facebook.
-- Every account they connected is disconnected and its token erased
-- (lib/meta_callbacks.lua); Meta only needs the 200.
local meta_callbacks = require "meta_callbacks"

return function(req)
  local payload, signed_request = meta_callbacks.read(req)
  meta_callbacks.deauthorize(signed_request, payload)
  return 200, { received = true }
end

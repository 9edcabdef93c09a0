-- POST /webhooks/meta/data-deletion: a person asked Meta to have their data
-- deleted. Done at once (lib/meta_callbacks.lua); Meta shows the person the
-- status page's URL and the confirmation code.
local meta_callbacks = require "meta_callbacks"

return function(req)
  local payload, signed_request = meta_callbacks.read(req)
  local code = meta_callbacks.delete_data(signed_request, payload)
  return 200, { url = meta_callbacks.status_url(code), confirmation_code = code }
end

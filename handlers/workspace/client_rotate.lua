-- POST /workspace/clients/{clientId}/rotate: a new API key, shown once; the
-- previous one keeps working for api.key_rotation_grace_hours.
local web = require "workspace.web"
local clients = require "workspace.clients"
local credentials = require "credentials"

local function grace_text(hours)
  if hours == math.floor(hours) then return hours .. (hours == 1 and " hour" or " hours") .. " from now" end
  return string.format("%.1f hours from now", hours)
end

return web.page(function(w)
  local client = clients.get(w.session.company_id, w.req.params.clientId)
  if not client or client.revoked_at then return w:not_found() end
  local rotated = assert(credentials.rotate_key(client.id))
  local hours = config.get("api.key_rotation_grace_hours")
  return clients.render_secrets(w, { heading = "New API key for " .. client.name, client_id = client.id,
    secrets = { { id = "secret-api-key", label = "New API key", value = rotated.apiKey } },
    previous_until = rotated.previousKeyExpiresAt:gsub("^([%d-]+)T(%d+:%d+).*$", "%1 %2 UTC"),
    grace = grace_text(hours) })
end)

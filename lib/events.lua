-- The event outbox: an event is written in the same transaction as the change
-- that causes it, so a crash can neither lose it nor send one for a change
-- that did not commit. Delivery to the client's webhook is a job of its own
-- (handlers/jobs/deliver_event.lua, lib/webhooks.lua), enqueued in that same
-- transaction.
local json = require "json"
local webhooks = require "webhooks"

local M = {}

-- Must run inside the caller's transaction.
function M.emit(client, type, data)
  local id = "evt_" .. crypto.random_token(24)
  local created = clock.now()
  local data_json = json.encode(data)
  assert(db.exec([[INSERT INTO events (id, company_id, environment, client_id, type, data, body, created_at)
      VALUES ($1, $2, $3, $4, $5, $6, $7, to_timestamp($8))]], id, client.company_id, client.environment,
    client.client_id, type, data_json, webhooks.body(id, type, created, client.environment, data_json), created))
  webhooks.enqueue(id, client.client_id)
  if M.on_emit then M.on_emit(id, client) end
  return id
end

return M

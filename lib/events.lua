-- The event outbox: an event is written in the same transaction as the change
-- that causes it, so a crash can neither lose it nor send one for a change
-- that did not commit. Delivery to the client's webhook is a job of its own
-- (handlers/jobs/deliver_event.lua, lib/webhooks.lua), enqueued in that same
-- transaction.
local json = require "json"
local json_shapes = require "json_shapes"
local webhooks = require "webhooks"

local M = {}

-- The events, and in the same statement the ids of their clients with an
-- endpoint to deliver to. A generic plan: the rows come as one JSON value,
-- and a partition is chosen per row when it is inserted, not by the plan.
local INSERT_SQL = [[/* generic plan */ WITH e AS (
    INSERT INTO events (id, company_id, environment, client_id, type, data, body, created_at)
    SELECT id, company_id, environment, client_id, type, data::jsonb, body, to_timestamp($2)
      FROM jsonb_to_recordset($1::jsonb) AS e(id text, company_id text, environment text, client_id text,
             type text, data text, body text)
    RETURNING client_id)
  SELECT id FROM api_clients WHERE id IN (SELECT client_id FROM e) AND ]] .. webhooks.ACTIVE_ENDPOINT

-- Must run inside the caller's transaction. Returns the event id.
function M.emit(client, type, data)
  return M.emit_many({ { client = client, type = type, data = data } })[1]
end

-- The statement that writes several events ({client, type, data} each), as
-- db.batch takes it, and what to do with its answer (enqueue the deliveries;
-- returns the events' ids): for a caller that sends it with its own
-- statements in one round trip. Inside the caller's transaction.
function M.prepare_many(list)
  local created = clock.now()
  local rows, ids = {}, {}
  for i, e in ipairs(list) do
    local id, data_json = "evt_" .. crypto.random_token(24), json.encode(e.data, json_shapes.event_data(e.type))
    ids[i] = id
    rows[i] = { id = id, company_id = e.client.company_id, environment = e.client.environment,
      client_id = e.client.client_id, type = e.type, data = data_json, created_second = math.floor(created),
      body = webhooks.body(id, e.type, created, e.client.environment, data_json) }
  end
  local function after(clients)
    local active = {}
    for _, c in ipairs(clients) do active[c.id] = true end
    webhooks.enqueue_many(rows, active)
    return ids
  end
  return { INSERT_SQL, json.encode(rows), created }, after
end

-- Several events ({client, type, data} each) in the statements one takes,
-- however many there are: a Meta delivery can bring hundreds of new
-- comments. Must run inside the caller's transaction. Returns their ids.
function M.emit_many(list)
  if #list == 0 then return {} end
  local statement, after = M.prepare_many(list)
  return after(assert(db.query(table.unpack(statement))))
end

-- An event about a company's account (social.account.*) to every client of
-- that company and environment with a webhook URL (CONTRACT 7). Must run
-- inside the caller's transaction.
function M.emit_to_company(company_id, environment, type, data)
  local clients = assert(db.query([[SELECT id FROM api_clients
      WHERE company_id = $1 AND environment = $2 AND webhook_url IS NOT NULL AND revoked_at IS NULL
      ORDER BY id]], company_id, environment))
  local list = {}
  for i, c in ipairs(clients) do
    list[i] = { client = { company_id = company_id, environment = environment, client_id = c.id }, type = type, data = data }
  end
  return M.emit_many(list)
end

return M

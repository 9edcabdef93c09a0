-- Operations: what a client follows after an asynchronous request.
local json = require "json"
local sqltime = require "sqltime"

local M = {}

function M.new_id() return "op_" .. crypto.random_token(24) end

-- Inside the caller's transaction. opts.trigger: what started it when the
-- client did not ask ({type = "rule", ruleId}); nil for a client's request.
function M.create(client, type, resource_type, resource_id, id, opts)
  id = id or M.new_id()
  assert(db.exec([[INSERT INTO operations (id, company_id, environment, client_id, type, status, resource_type, resource_id,
        trigger)
      VALUES ($1, $2, $3, $4, $5, 'queued', $6, $7, $8)]],
    id, client.company_id, client.environment, client.client_id, type, resource_type, resource_id,
    opts and opts.trigger and json.encode(opts.trigger) or nil))
  return id
end

function M.set_running(id)
  assert(db.exec([[/* generic plan */ UPDATE operations SET status = 'running', updated_at = now()
      WHERE id = $1 AND status = 'queued']], id))
end

-- The result so far of an operation that is not over (a bulk action's items).
function M.progress(id, result)
  assert(db.exec("UPDATE operations SET result = $2, updated_at = now() WHERE id = $1", id, result))
end

local FINISH_SQL = [[/* generic plan */ UPDATE operations SET status = $2, result = $3, error = $4,
    updated_at = now(), completed_at = now() WHERE id = $1]]

function M.finish(id, status, result, err)
  assert(db.exec(FINISH_SQL, id, status, result, err))
end

local COLUMNS = table.concat({ "id", "type", "status", "resource_type", "resource_id", "result", "error", "trigger",
  sqltime.iso("created_at"), sqltime.iso("updated_at"), sqltime.iso("completed_at") }, ", ")

function M.find(client, id)
  local rows = assert(db.query("SELECT " .. COLUMNS .. [[ FROM operations
      WHERE id = $1 AND company_id = $2 AND environment = $3]], id, client.company_id, client.environment))
  return rows[1]
end

function M.present(row)
  return {
    id = row.id, type = row.type, status = row.status,
    resource = { type = row.resource_type, id = row.resource_id },
    result = row.result or json.null, error = row.error or json.null, trigger = row.trigger or json.null,
    createdAt = row.created_at, updatedAt = row.updated_at, completedAt = row.completed_at or json.null,
  }
end

return M

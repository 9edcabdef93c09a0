-- GET /api/v1/operations/{operationId}
local problem = require "problem"
local operations = require "operations"

return function(req, ctx)
  local op = operations.find(ctx.client, req.params.operationId)
  if not op then problem.raise(404, "not_found", "No operation with this id.") end
  return 200, operations.present(op)
end

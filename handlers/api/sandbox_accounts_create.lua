-- POST /api/v1/sandbox/accounts {"platform","name"}: a test page that needs
-- no platform account; posts to it go to the simulator.
local problem = require "problem"
local fields = require "fields"
local accounts = require "accounts"
local test_pages = require "test_pages"

local SPEC = {
  platform = { type = "string", required = true, enum = { facebook = true, instagram = true } },
  name = { type = "string", required = true, min = 1, max = 200 },
}

return function(req, ctx)
  local errors = fields.check(req.json, SPEC)
  if #errors > 0 then problem.raise(422, "validation_failed", "The request has invalid fields.", { errors = errors }) end
  local body = req.json
  local id, why, limit = test_pages.create(ctx.client.company_id, body.platform, body.name)
  if why == test_pages.LIMIT_REACHED then problem.raise(409, "limit_reached", test_pages.limit_message(limit)) end
  assert(id, why)
  return 201, accounts.present(accounts.get(ctx.client, id))
end

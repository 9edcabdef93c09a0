-- POST /api/v1/sandbox/accounts {"platform","name"}: a test page that needs
-- no platform account; posts to it go to the simulator.
local problem = require "problem"
local fields = require "fields"
local accounts = require "accounts"

local SPEC = {
  platform = { type = "string", required = true, enum = { facebook = true, instagram = true } },
  name = { type = "string", required = true, min = 1, max = 200 },
}

local function digits(n)
  local t = { tostring(math.random(1, 9)) }
  for i = 2, n do t[i] = tostring(math.random(0, 9)) end
  return table.concat(t)
end

return function(req, ctx)
  local errors = fields.check(req.json, SPEC)
  if #errors > 0 then problem.raise(422, "validation_failed", "The request has invalid fields.", { errors = errors }) end
  local body = req.json
  local platform_id = body.platform == "instagram" and digits(17) or digits(15)
  local id = assert(accounts.add({
    company_id = ctx.client.company_id, environment = "test", platform = body.platform,
    platform_account_id = platform_id, name = body.name,
    username = body.platform == "instagram" and ("sandbox_" .. platform_id:sub(-6)) or nil,
  }))
  return 201, accounts.present(accounts.get(ctx.client, id))
end

-- POST /api/v1/sandbox/failures {"socialAccountId","error","count"}: the
-- next `count` publish attempts to that test account fail with that class.
local problem = require "problem"
local fields = require "fields"
local accounts = require "accounts"
local sandbox = require "platforms.sandbox"

local classes = {}
for k in pairs(sandbox.ERROR_CLASSES) do classes[k] = true end

local SPEC = {
  socialAccountId = { type = "string", required = true, max = 64 },
  error = { type = "string", required = true, enum = classes },
  count = { type = "integer", required = true, min = 1, max = 100 },
}

return function(req, ctx)
  local body = req.json
  local errors = fields.check(body, SPEC)
  if #errors == 0 and not accounts.find_active(ctx.client, body.socialAccountId) then
    errors[1] = { field = "/socialAccountId", code = "unknown_account", message = "No active test account with this id." }
  end
  if #errors > 0 then problem.raise(422, "validation_failed", "The request has invalid fields.", { errors = errors }) end
  assert(db.exec([[INSERT INTO sandbox_failures (social_account_id, error_class, remaining) VALUES ($1, $2, $3)
      ON CONFLICT (social_account_id) DO UPDATE SET error_class = EXCLUDED.error_class, remaining = EXCLUDED.remaining,
      created_at = now()]], body.socialAccountId, body.error, body.count))
  return 201, { socialAccountId = body.socialAccountId, error = body.error, count = body.count }
end

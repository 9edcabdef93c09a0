-- PUT /api/v1/moderation/rules {"rules":[...]}: replaces the company's rules
-- in this environment, all or nothing; answers them as stored.
local problem = require "problem"
local rules = require "moderation.rules"

return function(req, ctx)
  local stored, errors = rules.check(req.json)
  if stored then errors = rules.foreign_accounts(ctx.client, stored) end
  if #errors > 0 then
    problem.raise(422, "validation_failed", "The rules have invalid fields; nothing was saved.", { errors = errors })
  end
  rules.save(ctx.client.company_id, ctx.client.environment, stored)
  return 200, rules.present(stored)
end

-- PUT /api/v1/moderation/rules {"rules":[...]}: replaces the company's rules
-- in this environment, all or nothing; answers them as stored.
local problem = require "problem"
local rules = require "moderation.rules"

-- The scope's account ids that are no account of the caller's company and environment.
local function foreign_accounts(client, stored)
  local errors = {}
  for i, r in ipairs(stored) do
    local ids = r.scope ~= nil and type(r.scope) == "table" and r.scope.socialAccountIds
    if type(ids) == "table" then
      for j, id in ipairs(ids) do
        if not assert(db.query([[SELECT 1 FROM social_accounts WHERE id = $1 AND company_id = $2 AND environment = $3]],
            id, client.company_id, client.environment))[1] then
          errors[#errors + 1] = { field = "/rules/" .. (i - 1) .. "/scope/socialAccountIds/" .. (j - 1),
            code = "invalid_value", message = "No social account of yours with id " .. id .. " in this environment." }
        end
      end
    end
  end
  return errors
end

return function(req, ctx)
  local stored, errors = rules.check(req.json)
  if stored then errors = foreign_accounts(ctx.client, stored) end
  if #errors > 0 then
    problem.raise(422, "validation_failed", "The rules have invalid fields; nothing was saved.", { errors = errors })
  end
  rules.save(ctx.client.company_id, ctx.client.environment, stored)
  return 200, rules.present(stored)
end

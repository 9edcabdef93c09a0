-- POST /api/v1/moderation/rules/test {"text","authorId","platform","socialAccountId"}:
-- which saved rule would act on such a comment: {"matched": rule|null, "action"}.
local json = require "json"
local problem = require "problem"
local rules = require "moderation.rules"

return function(req, ctx)
  local rule, errors = rules.test(ctx.client, req.json)
  if errors then problem.raise(422, "validation_failed", "The request has invalid fields.", { errors = errors }) end
  if not rule then return 200, { matched = json.null, action = json.null } end
  return 200, { matched = rules.present({ rule }).rules[1], action = rule.action }
end

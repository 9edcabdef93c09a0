-- GET /api/v1/moderation/rules: the company's rules in this environment, in
-- evaluation order, every field filled in (lib/moderation/rules.lua).
local rules = require "moderation.rules"

return function(_, ctx)
  return 200, rules.present((rules.load(ctx.client.company_id, ctx.client.environment)))
end

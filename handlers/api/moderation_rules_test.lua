-- POST /api/v1/moderation/rules/test {"text","authorId","platform","socialAccountId"}:
-- which saved rule would act on such a comment: {"matched": rule|null, "action"}.
local json = require "json"
local problem = require "problem"
local fields = require "fields"
local rules = require "moderation.rules"

local SPEC = {
  text = { type = "string", required = true, max = 8000 },
  authorId = { type = "string", min = 1, max = 64 },
  platform = { type = "string", enum = rules.PLATFORMS },
  socialAccountId = { type = "string", min = 1, max = 64 },
}

return function(req, ctx)
  local body = req.json
  local errors = fields.check(body, SPEC)
  local client = ctx.client
  if #errors == 0 and body.socialAccountId then
    local account = assert(db.query([[SELECT platform FROM social_accounts WHERE id = $1 AND company_id = $2
        AND environment = $3]], body.socialAccountId, client.company_id, client.environment))[1]
    if not account then
      errors[1] = { field = "/socialAccountId", code = "invalid_value",
        message = "No social account of yours with this id in this environment." }
    elseif body.platform and body.platform ~= account.platform then
      errors[1] = { field = "/platform", code = "invalid_value", message = "The account is on " .. account.platform .. "." }
    else
      body.platform = account.platform
    end
  end
  if #errors > 0 then problem.raise(422, "validation_failed", "The request has invalid fields.", { errors = errors }) end
  local rule = rules.first_match(rules.compiled(client.company_id, client.environment),
    rules.subject(body.text, body.authorId, body.platform, body.socialAccountId))
  if not rule then return 200, { matched = json.null, action = json.null } end
  return 200, { matched = rules.present({ rule }).rules[1], action = rule.action }
end

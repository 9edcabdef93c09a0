-- POST /workspace/rules/test (env, text, authorId, socialAccountId): which
-- saved rule would act on such a comment, as POST /api/v1/moderation/rules/test.
local web = require "workspace.web"
local connections = require "workspace.connections"
local workspace_rules = require "workspace.rules"

local WOULD = { hide = "hide it", delete = "delete it", flag = "flag it (an event, nothing changes on the platform)" }

return web.page(function(w)
  local environment = connections.environment(w.form.env)
  if not environment then return w:json(400, { message = "env must be live or test." }) end
  local rule, errors = workspace_rules.test(w.session.company_id, environment, w.form)
  if errors then return w:json(422, { message = "The test has invalid fields.", errors = errors }) end
  if not rule then
    return w:json(200, { message = "No saved rule matches: the comment would stay as it is." })
  end
  local name = rule.name ~= nil and type(rule.name) == "string" and rule.name or rule.id
  return w:json(200, { ruleId = rule.id, action = rule.action,
    message = "Rule “" .. name .. "” matches: it would " .. WOULD[rule.action] .. "." })
end)

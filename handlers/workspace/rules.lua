-- GET /workspace/rules?env=: the environment's moderation rules in an
-- editor (app.js builds it from the page's data) and a Test box.
-- POST /workspace/rules (env, rules: the whole list as JSON): saves them as
-- PUT /api/v1/moderation/rules does; answers JSON for the editor.
local web = require "workspace.web"
local connections = require "workspace.connections"
local workspace_rules = require "workspace.rules"

return web.page(function(w)
  local company_id = w.session.company_id
  if w.form then
    local environment = connections.environment(w.form.env)
    if not environment then return w:json(400, { message = "env must be live or test." }) end
    local saved, errors = workspace_rules.save(company_id, environment, w.form.rules)
    if not saved then
      return w:json(422, { message = "Some rules have invalid fields; nothing was saved.", errors = errors })
    end
    log.info("workspace_rules_saved", { userId = w.session.user_id, environment = environment, count = #saved })
    return w:json(200, { message = "Saved: " .. #saved .. (#saved == 1 and " rule" or " rules")
      .. " now judge new comments.", rules = saved })
  end
  local environment = connections.environment(w.req.query.env) or "live"
  local rules_json, accounts_json = workspace_rules.editor(company_id, environment)
  return w:render("rules", {
    title = "Rules", section = "rules", env = environment, env_label = web.ENVIRONMENTS[environment],
    tabs = web.environment_tabs("/workspace/rules", environment), rules_json = rules_json,
    accounts_json = accounts_json, accounts = connections.list(company_id, environment),
  })
end)

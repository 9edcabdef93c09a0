-- GET /workspace/posts?env=live|test&before=: the company's posts of one
-- environment, newest first, with their targets and a Retry button on those
-- that failed.
local web = require "workspace.web"
local connections = require "workspace.connections"
local workspace_posts = require "workspace.posts"

return web.page(function(w)
  local q = w.req.query
  local environment = connections.environment(q.env) or "live"
  local list, older = workspace_posts.list(w.session.company_id, environment, q.before)
  return w:render("posts", {
    title = "Posts", section = "posts", posts = list, has_posts = #list > 0, paged = q.before ~= nil,
    env = environment, env_label = web.ENVIRONMENTS[environment],
    tabs = web.environment_tabs("/workspace/posts", environment),
    older = older and ("/workspace/posts?env=" .. environment .. "&before=" .. older) or nil,
  })
end)

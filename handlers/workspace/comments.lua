-- GET /workspace/comments?env=live|test&<filters>&cursor=: the company's
-- comments of one environment (the API's inbox and its filters), each with
-- its post, account, history and the moderation buttons.
local web = require "workspace.web"
local connections = require "workspace.connections"
local workspace_comments = require "workspace.comments"

local function option(value, label, current)
  return { value = value, label = label, selected = value == (current or "") }
end

local function choices(q)
  return {
    platform = { option("", "All platforms", q.platform), option("facebook", "Facebook", q.platform),
      option("instagram", "Instagram", q.platform) },
    hidden = { option("", "Hidden or not", q.isHidden), option("true", "Hidden", q.isHidden),
      option("false", "Not hidden", q.isHidden) },
    deleted = { option("", "Deleted or not", q.isDeleted), option("false", "Not deleted", q.isDeleted),
      option("true", "Deleted", q.isDeleted) },
    author = { option("", "Anyone", q.isFromAccount), option("false", "Others", q.isFromAccount),
      option("true", "The account itself", q.isFromAccount) },
    order = { option("newest", "Newest first", q.order), option("oldest", "Oldest first", q.order) },
  }
end

return web.page(function(w)
  local q = w.req.query
  local environment = connections.environment(q.env) or "live"
  local list, next_href, invalid = workspace_comments.list(w.session.company_id, environment, q)
  local accounts = { option("", "All accounts", q.socialAccountId) }
  for _, a in ipairs(connections.list(w.session.company_id, environment)) do
    accounts[#accounts + 1] = option(a.id, a.name .. " (" .. a.platform_label .. ")", q.socialAccountId)
  end
  local filtered = false
  for _, name in ipairs(workspace_comments.FILTERS) do
    if name ~= "order" and q[name] and q[name] ~= "" then filtered = true end
  end
  list = list or {}
  return w:render("comments", {
    title = "Comments", section = "comments", comments = list, has_comments = #list > 0,
    env = environment, env_label = web.ENVIRONMENTS[environment], search = q.q, filtered = filtered,
    paged = q.cursor ~= nil, invalid = invalid, accounts = accounts, choices = choices(q),
    tabs = web.environment_tabs("/workspace/comments", environment), next_href = next_href,
  }, invalid and 400 or 200)
end)

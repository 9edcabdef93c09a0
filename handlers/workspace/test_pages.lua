-- POST /workspace/connections/test-pages (name, platform): a sandbox test
-- page of the company.
local web = require "workspace.web"
local connections = require "workspace.connections"
local test_pages = require "test_pages"
local trim = require "trim"

return web.page(function(w)
  local name = trim(w.form.name or "")
  local platform = w.form.platform
  if name == "" or #name > 200 or not test_pages.PLATFORMS[platform] then
    return connections.render(w, "test", { page_name = name, instagram_selected = platform == "instagram",
      error = "Give the test page a name (1 to 200 characters) and choose Facebook Page or Instagram account." }, 422)
  end
  local id, why, limit = test_pages.create(w.session.company_id, platform, name)
  if why == test_pages.LIMIT_REACHED then
    return connections.render(w, "test", { page_name = name, instagram_selected = platform == "instagram",
      error = test_pages.limit_message(limit) }, 409)
  end
  assert(id, why)
  return w:redirect("/workspace/connections?env=test&notice=test_page_added")
end)

-- GET /sandbox/posts/{token}: where a sandbox post's permalinkUrl leads, the
-- simulated post and its comments (lib/sandbox_pages.lua). No credential:
-- the token is the key. An unknown token gets the same page shell with 404,
-- after the same single lookup.
local web = require "workspace.web"
local sandbox_pages = require "sandbox_pages"

-- Not indexed, not cached, and the token never leaves in a Referer. Images
-- come from the post's own imageUrl (any https host) or a signed media URL of
-- this gateway.
local function headers()
  local base = (config.get("public_base_url") or ""):match("^https?://[^/]+") or ""
  return {
    ["Referrer-Policy"] = "no-referrer",
    ["X-Robots-Tag"] = "noindex, nofollow",
    ["Content-Security-Policy"] = web.HEADERS["Content-Security-Policy"]
      :gsub("img%-src [^;]*", "img-src 'self' data: https: " .. base),
  }
end

return web.anonymous(function(w)
  local page = sandbox_pages.find(w.req.params.token)
  if not page then
    return w:render("error", { title = "Not found", area = "sandbox",
      message = "No sandbox post has this address. Check the permalinkUrl the API gave for the post's target.",
      next_href = "/workspace", next_label = "Open the workspace" }, 404, headers())
  end
  page.title = (page.account_name or "Sandbox post") .. " · sandbox post"
  page.area = "sandbox"
  return w:render("sandbox_post", page, 200, headers())
end)

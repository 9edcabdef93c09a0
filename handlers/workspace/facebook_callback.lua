-- GET /workspace/facebook/callback?code&state (or error=access_denied&state):
-- Meta sends the browser back. The state must be this session's and unused;
-- then the code becomes a long-lived token, and the person picks among the
-- Pages and Instagram accounts it manages.
local web = require "workspace.web"
local facebook = require "workspace.facebook"

local BACK, BACK_LABEL = "/workspace/connections?env=live", "Back to Connections"

return web.page(function(w)
  local q = w.req.query
  if not facebook.claim(w.session, q.state) then
    return w:fail(400, "This connection attempt is no longer valid",
      "It expired, was used already, or was started in another browser or session. Start again with Connect with Facebook.",
      BACK, BACK_LABEL)
  end
  if q.error or not q.code then
    return w:fail(200, "Nothing was connected",
      "Facebook did not give access (you chose Cancel, or declined the permissions). To connect Pages, choose "
      .. "Connect with Facebook again, select the Pages you want to publish to and press Continue.", BACK, BACK_LABEL)
  end
  local token, err = facebook.user_token(q.code)
  local pages, perr
  if token then pages, perr = facebook.pages(token) end
  if not pages then
    local answer = tostring((err or perr).message):gsub("[%.%s]+$", "")
    return w:fail(502, "Facebook did not complete the connection",
      "Facebook answered: " .. answer .. ". Try again; if it keeps failing, the operator should check meta.app_id, "
      .. "meta.app_secret and that " .. facebook.redirect_uri() .. " is a valid OAuth redirect URI of the Meta app.",
      BACK, BACK_LABEL)
  end
  if #pages == 0 then
    return w:fail(200, "No Pages to connect",
      "Facebook gave access to no Page. Connect again and, in the Facebook dialog, select the Pages you manage "
      .. "(and their Instagram accounts) that should publish through sgw.", BACK, BACK_LABEL)
  end
  -- Meta's deauthorize and data-deletion callbacks name the person who
  -- connected a Page: without it, a reconnected Page would keep whoever
  -- connected it before, and this person's callbacks would miss it.
  local fb_user = facebook.user_id(token)
  if not fb_user then
    return w:fail(502, "Facebook did not complete the connection",
      "Facebook gave the Pages but did not say who is connecting them. Try again; nothing was connected.",
      BACK, BACK_LABEL)
  end
  for _, p in ipairs(pages) do p.fb_user = fb_user end
  local held, herr = facebook.hold(q.state, pages)
  if not held then
    log.error("workspace_facebook_hold_failed", { error = herr })
    return w:fail(500, "The server cannot store Page tokens",
      "The operator must set crypto.encryption_key before Pages can be connected.", BACK, BACK_LABEL)
  end
  local declined = facebook.declined(token)
  return w:render("facebook_pick", { title = "Choose what to connect", section = "connections", attempt = q.state,
    pages = facebook.choices(pages), declined = #declined > 0 and table.concat(declined, ", ") or nil })
end)

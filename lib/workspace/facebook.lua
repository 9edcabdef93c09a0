-- "Connect with Facebook": Meta's OAuth dialog, then the Graph API (see
-- the Graph API notes, "Connecting Pages").
--
--   1. start: a random state, bound to the session (stored hashed), and the
--      dialog URL with our app id, redirect URI and permissions;
--   2. the browser comes back to the callback with code and state: the state
--      is claimed once, by the session that started it, before it expires;
--      the code becomes a user token, then a long-lived one (Page tokens taken
--      from a long-lived user token do not expire); /me/accounts lists the
--      Pages, their tokens and linked Instagram business accounts;
--   3. those wait, encrypted, on the attempt's row until the person picks
--      which to connect; picked ones become live accounts (lib/accounts.lua
--      encrypts their tokens), the rest is forgotten.
local graph = require "platforms.graph"
local credentials = require "credentials"
local accounts = require "accounts"
local subscriptions = require "meta_subscriptions"
local json = require "json"

local M = {}

-- What sgw does with a Page and its Instagram account: publish, read and
-- moderate comments (with their authors: pages_read_user_engagement),
-- subscribe to their webhooks, and see Pages a Business Portfolio owns
-- (business_management; without it those Pages are missing from the list).
M.PERMISSIONS = {
  "pages_show_list", "pages_read_engagement", "pages_manage_posts", "pages_manage_engagement",
  "pages_manage_metadata", "instagram_basic", "instagram_content_publish", "instagram_manage_comments",
  "pages_read_user_engagement", "business_management",
}

-- What the dialog asks for. ads_read only when meta.request_ads_read is on:
-- Meta wants it (or ads_management) for Instagram publishing when the
-- person's role on the Page came through Business Manager, but a dialog
-- asking for a permission the app was not given refuses everything
-- ("Invalid Scopes"), so the operator turns it on once the app has it.
function M.permissions()
  local list = table.move(M.PERMISSIONS, 1, #M.PERMISSIONS, 1, {})
  if config.get("meta.request_ads_read") == true then list[#list + 1] = "ads_read" end
  return list
end

-- From "Connect" until the person has picked (the dialog may take a while).
local ATTEMPT_SECONDS = 1800

local function hash(state)
  return crypto.sha256_hex(state)
end

function M.redirect_uri()
  return (config.get("public_base_url") or ""):gsub("/+$", "") .. "/workspace/facebook/callback"
end

local function app()
  return config.get("meta.app_id"), config.get("meta.app_secret")
end

-- Can Pages be connected at all? Not before the operator set the Meta app.
function M.configured()
  local id, secret = app()
  return (id or "") ~= "" and (secret or "") ~= ""
end

-- Starts an attempt for a session; returns the URL of Meta's dialog.
function M.start(session)
  local state = crypto.random_token(32)
  assert(db.exec([[INSERT INTO workspace_oauth_states (id, session_id, company_id, expires_at)
      VALUES ($1, $2, $3, now() + make_interval(secs => $4))]], hash(state), session.id, session.company_id, ATTEMPT_SECONDS))
  local dialog = config.get("meta.oauth_dialog_url")
  return dialog .. (dialog:find("?", 1, true) and "&" or "?") .. graph.encode({
    client_id = (app()), redirect_uri = M.redirect_uri(), state = state,
    scope = table.concat(M.permissions(), ","), response_type = "code",
  })
end

-- The browser is back: true when the state is one this session started and
-- has not used, now used.
function M.claim(session, state)
  if type(state) ~= "string" or #state ~= 32 then return false end
  local rows = assert(db.query([[UPDATE workspace_oauth_states SET returned_at = now()
      WHERE id = $1 AND session_id = $2 AND returned_at IS NULL AND expires_at > now() RETURNING id]],
    hash(state), session.id))
  return rows[1] ~= nil
end

-- code -> long-lived user token, or nil and the Graph error ({code, message}).
function M.user_token(code)
  local id, secret = app()
  local short, err = graph.call("GET", "oauth/access_token", {
    client_id = id, client_secret = secret, redirect_uri = M.redirect_uri(), code = code,
  })
  if not short then return nil, err end
  local long, lerr = graph.call("GET", "oauth/access_token", {
    grant_type = "fb_exchange_token", client_id = id, client_secret = secret, fb_exchange_token = short.access_token,
  })
  if not long then return nil, lerr end
  return long.access_token
end

-- The permissions the person declined in the dialog (a list, maybe empty).
function M.declined(user_token)
  local granted = {}
  local answer = graph.call("GET", "me/permissions", {}, user_token)
  if not answer then return {} end -- the connection still works; publishing will say what is missing
  for _, p in ipairs(type(answer.data) == "table" and answer.data or {}) do
    if p.status == "granted" then granted[p.permission] = true end
  end
  local out = {}
  for _, name in ipairs(M.permissions()) do
    if not granted[name] then out[#out + 1] = name end
  end
  return out
end

local function valid_id(id)
  return type(id) == "string" and #id <= 64 and id:match("^%d+$") ~= nil
end

-- The person's app-scoped Facebook user id (GET /me), or nil: Meta's
-- deauthorize and data-deletion callbacks name them by it.
function M.user_id(user_token)
  local me = graph.call("GET", "me", { fields = "id" }, user_token)
  return me and valid_id(me.id) and me.id or nil
end

-- The Pages the user token manages: {id, name, token, tasks, instagram =
-- {id, username} or nil}, or nil and the Graph error.
function M.pages(user_token)
  local out = {}
  local params = { fields = "id,name,access_token,tasks,instagram_business_account{id,username}", limit = 100 }
  for _ = 1, 20 do
    local page, err = graph.call("GET", "me/accounts", params, user_token)
    if not page then return nil, err end
    for _, p in ipairs(type(page.data) == "table" and page.data or {}) do
      local ig = p.instagram_business_account
      if valid_id(p.id) and type(p.access_token) == "string" then
        out[#out + 1] = {
          id = p.id, name = tostring(p.name or p.id), token = p.access_token,
          tasks = type(p.tasks) == "table" and p.tasks or {},
          instagram = type(ig) == "table" and valid_id(ig.id)
            and { id = ig.id, username = tostring(ig.username or ig.id) } or nil,
        }
      end
    end
    local paging = type(page.paging) == "table" and page.paging or {}
    local after = paging.next and type(paging.cursors) == "table" and paging.cursors.after
    if not after then break end
    params.after = after
  end
  return out
end

-- The Pages as the pick page shows them: without tokens, and with a warning
-- where the person's role on a Page does not include publishing.
function M.choices(pages)
  local out = {}
  for i, p in ipairs(pages) do
    local can_publish = false
    for _, task in ipairs(p.tasks) do can_publish = can_publish or task == "CREATE_CONTENT" end
    out[i] = { id = p.id, name = p.name, instagram = p.instagram, missing_tasks = #p.tasks > 0 and not can_publish }
  end
  return out
end

-- Keeps the Pages (with their tokens) on the attempt until the pick.
function M.hold(state, pages)
  local key, err = credentials.encryption_key()
  if not key then return nil, err end
  local blob = crypto.aes_gcm_encrypt(key, json.encode(pages), hash(state))
  assert(db.exec("UPDATE workspace_oauth_states SET pages_enc = $2 WHERE id = $1",
    hash(state), crypto.base64_encode(blob)))
  return true
end

-- The Pages held for this session's attempt, once; nil when there are none
-- (expired, picked already, another session's).
function M.take(session, state)
  if type(state) ~= "string" or #state ~= 32 then return nil end
  local rows = assert(db.query([[WITH held AS (
        SELECT id, pages_enc FROM workspace_oauth_states
         WHERE id = $1 AND session_id = $2 AND picked_at IS NULL AND pages_enc IS NOT NULL AND expires_at > now()
           FOR UPDATE)
      UPDATE workspace_oauth_states s SET picked_at = now(), pages_enc = NULL
        FROM held WHERE s.id = held.id RETURNING held.pages_enc]], hash(state), session.id))
  local row = rows[1]
  local key = credentials.encryption_key()
  local blob = row and key and crypto.base64_decode(row.pages_enc)
  local text = blob and crypto.aes_gcm_decrypt(key, blob, hash(state))
  return text and json.decode(text) or nil
end

-- Connects what was ticked ("page:<id>", "ig:<id>") as live accounts of
-- the company, each subscribed to the webhooks of its Page (a failure leaves
-- it connected; the periodic check tries again). Returns how many.
function M.connect(company_id, pages, ticked)
  local n = 0
  local function add(platform, id, name, username, page)
    local account = assert(accounts.add({ company_id = company_id, environment = "live", platform = platform,
      platform_account_id = id, name = name, username = username, access_token = page.token,
      connected_by_fb_user = page.fb_user }))
    subscriptions.attach(account, page.id, page.token)
    n = n + 1
  end
  for _, p in ipairs(pages) do
    if ticked["page:" .. p.id] then add("facebook", p.id, p.name, nil, p) end
    -- Instagram's content publishing API acts with the token of the Page the account is linked to.
    local ig = p.instagram
    if ig and ticked["ig:" .. ig.id] then add("instagram", ig.id, ig.username, ig.username, p) end
  end
  return n
end

return M

-- What every workspace page shares: who is signed in, the CSRF check of
-- every form, HTML from templates (handlers/workspace/templates/, escaped by
-- default), redirects, error pages and the headers that keep pages private.
--
--   local web = require "workspace.web"
--   return web.page(function(w)            -- signed in; web.public(...): anyone;
--                                          -- web.anonymous(...): anyone, no session at all
--     -- w.req, w.session (company_id, user_id, email, company_name), w.form (POST)
--     return w:render("clients", { clients = ... })
--   end)
local template = require "template"
local form = require "form"
local session = require "workspace.session"
local problem = require "problem"
local json = require "json"

local M = {}

local TEMPLATES = "handlers/workspace/templates/"

local function load_template(name)
  return asset(TEMPLATES .. name .. ".html")
end

-- The stylesheet's and script's URLs carry a digest of their content, so
-- browsers may cache them and still see a reload at once.
local function static_url(name)
  local body = asset("handlers/workspace/static/" .. name) or ""
  return "/workspace/static/" .. name .. "?v=" .. crypto.sha256_hex(body):sub(1, 12)
end
local CSS_URL, JS_URL = static_url("app.css"), static_url("app.js")

-- Pages must not be framed, sniffed, cached (they show secrets once) or
-- leak their URL (the OAuth callback's code) to other sites.
local HEADERS = {
  ["Content-Type"] = "text/html; charset=utf-8",
  ["Cache-Control"] = "no-store",
  ["Content-Security-Policy"] = "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:; "
    .. "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  ["X-Frame-Options"] = "DENY",
  ["X-Content-Type-Options"] = "nosniff",
  ["Referrer-Policy"] = "same-origin",
}
M.HEADERS = HEADERS

-- One-line messages after a redirect (?notice=...), so nothing a link
-- carries is ever shown as text.
local NOTICES = {
  signed_out = "You are signed out.",
  signed_up = "Sign-up received. Sign in with the email and password you chose.",
  client_revoked = "The API client is revoked: its keys and access tokens stopped working.",
  account_disconnected = "The account is disconnected: new posts to it fail with account_disconnected. Its history stays.",
  test_page_added = "Test page added. Publish to it with a sandbox API key (sgk_test_...).",
  accounts_connected = "Your accounts are connected and listed below.",
  post_retried = "The post's failed targets are publishing again; this page shows how it ends.",
  nothing_to_retry = "That post has nothing to retry: only failed or partially published posts can be retried.",
  nothing_connected = "Nothing was connected: no Page or Instagram account was selected.",
  comment_moderated = "The platform is being asked; the comment shows the outcome once it is done.",
}

-- A column as people read it: "2026-11-21 10:00 UTC".
function M.when(column, alias)
  return "to_char(" .. column .. " AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI \"UTC\"') AS " .. alias
end

M.ENVIRONMENTS = { live = "Live", test = "Sandbox" }

-- The Live / Sandbox tabs of a page listing one environment.
function M.environment_tabs(path, environment)
  return {
    { env = "live", label = "Live", href = path .. "?env=live", current = environment == "live" },
    { env = "test", label = "Sandbox", href = path .. "?env=test", current = environment == "test" },
  }
end

-- Rows for templates: db.query's list without its `affected` count, which
-- would make an empty list look like an object to {{#section}}.
function M.rows(sql, ...)
  local rows = assert(db.query(sql, ...))
  rows.affected = nil
  return rows
end

local W = {}
W.__index = W

local function headers(w, extra)
  local h = {}
  for k, v in pairs(HEADERS) do h[k] = v end
  if w.cookie then h["Set-Cookie"] = w.cookie end
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

-- Renders a page template inside the layout. data.title names the page;
-- data.area and data.home, the part of sgw it belongs to (default: the
-- workspace).
function W:render(name, data, status, extra_headers)
  data = data or {}
  data.csrf = self.csrf
  local s = self.session
  local page = {
    title = data.title, css = CSS_URL, js = JS_URL, csrf = self.csrf,
    area = data.area or "workspace", home = data.home or "/workspace",
    session = s and { email = s.email, company_name = s.company_name } or nil,
    nav = s and {
      { href = "/workspace/connections", label = "Connections", current = data.section == "connections" },
      { href = "/workspace/posts", label = "Posts", current = data.section == "posts" },
      { href = "/workspace/comments", label = "Comments", current = data.section == "comments" },
      { href = "/workspace/rules", label = "Rules", current = data.section == "rules" },
      { href = "/workspace/clients", label = "API clients", current = data.section == "clients" },
    } or nil,
    notice = NOTICES[self.req.query.notice or ""],
    content = template.render(name, data, load_template),
  }
  return status or 200, template.render("layout", page, load_template), headers(self, extra_headers)
end

-- A piece of a page (a template without the layout), for a script to put in place.
function W:fragment(name, data)
  data.csrf = self.csrf
  return template.render(name, data, load_template)
end

-- An answer to the workspace's own script (fetch with Accept: application/json).
function W:json(status, body)
  return status, json.encode(body), headers(self, { ["Content-Type"] = "application/json" })
end

function W:wants_json()
  return (self.req.headers["accept"] or ""):find("application/json", 1, true) ~= nil
end

-- An error page that says what happened and what to do next.
function W:fail(status, title, message, next_href, next_label)
  return self:render("error", { title = title, message = message,
    next_href = next_href or "/workspace", next_label = next_label or "Back to the workspace" }, status)
end

function W:not_found()
  return self:fail(404, "Not found", "There is nothing here, or it belongs to another company.",
    "/workspace", "Back to the workspace")
end

-- 303: the browser GETs the next page (after a form, a reload does not post again).
function W:redirect(location)
  return 303, "", headers(self, { Location = location })
end

-- Only paths of this workspace are followed after signing in, never another site.
function M.safe_next(path)
  if type(path) == "string" and path:match("^/workspace[%w/_%-%.?=&]*$") and not path:find("//", 1, true) then
    return path
  end
  return "/workspace"
end

local function url_escape(s)
  return (tostring(s):gsub("[^%w%-%._~/]", function(c) return string.format("%%%02X", c:byte()) end))
end
M.url_escape = url_escape

local function serve(fn, mode, req)
  local w = setmetatable({ req = req }, W)
  if mode == "anonymous" then return fn(w) end
  w.token = session.cookie_token(req)
  w.session = session.find(w.token)
  if not w.token then
    -- A first visit: a token for the CSRF checks of the sign-in forms.
    w.token = session.new_token()
    w.cookie = session.cookie(w.token)
  end
  w.csrf = session.csrf_for(w.token)

  -- Every method but GET and HEAD must bring the form's CSRF token; pages
  -- act only on w.posted, so a HEAD (served by the GET routes) never acts.
  if req.method ~= "GET" and req.method ~= "HEAD" then
    local fields, err = form.parse(req.body or "", 200)
    if not fields then
      -- Read before the CSRF check: what the form said (a field's name) is
      -- logged, never shown, so another site cannot put words on this page.
      log.info("workspace_form_unreadable", { requestId = req.id, route = req.path, error = err })
      return w:fail(400, "The form could not be read", "The browser sent a malformed form. Reload the page and try again.")
    end
    if not session.csrf_ok(session.cookie_token(req), fields.csrf) then
      return w:fail(403, "The form has expired",
        "This form was not sent from the current workspace page (its security token is missing or stale). "
        .. "Reload the page and send it again; if it keeps happening, allow cookies for this site.")
    end
    w.form = fields
    w.posted = req.method == "POST"
  end

  if mode == "signed_in" and not w.session then
    return w:redirect("/workspace/login?next=" .. url_escape(req.method == "GET" and req.path or "/workspace"))
  end
  return fn(w)
end

-- Keeps where an error came from before it leaves this page; an outage
-- stays a plain message so that it can be told apart.
local function traced(e)
  if problem.is_outage(e) or problem.is_problem(e) or type(traceback) ~= "function" then return e end
  return traceback(tostring(e))
end

local function wrap(fn, mode)
  return function(req)
    local ok, status, body, hdrs = xpcall(serve, traced, fn, mode, req)
    if ok then return status, body, hdrs end
    if not problem.is_outage(status) then error(status, 0) end
    -- The database is down: a page that says so (a problem document would
    -- mean nothing to a person).
    log.warn("dependency_unavailable", { requestId = req.id, route = req.path, error = tostring(status) })
    local w = setmetatable({ req = req }, W)
    return w:render("error", { title = "Temporarily unavailable",
      message = "The workspace cannot reach its database just now. Try again in a moment; if you had sent a form, check that it took effect.",
      next_href = req.method == "GET" and req.path or "/workspace", next_label = "Try again" },
      503, { ["Retry-After"] = tostring(problem.OUTAGE_RETRY_AFTER) })
  end
end

-- A page for signed-in people; others are sent to sign in.
function M.page(fn) return wrap(fn, "signed_in") end

-- A page for anyone (sign-in, sign-up).
function M.public(fn) return wrap(fn, "public") end

-- A page for anyone that neither reads nor sets a session cookie and takes
-- no form (the sandbox's post pages): w.session and w.csrf are nil.
function M.anonymous(fn) return wrap(fn, "anonymous") end

-- Signs in: a new session and cookie, then on to `next`.
function W:sign_in(user, next_path)
  session.destroy(self.session and self.token)
  self.token = session.create(user)
  self.cookie = session.cookie(self.token)
  return self:redirect(M.safe_next(next_path))
end

function W:sign_out()
  session.destroy(self.token)
  self.cookie = session.cookie(nil)
  return self:redirect("/workspace/login?notice=signed_out")
end

return M

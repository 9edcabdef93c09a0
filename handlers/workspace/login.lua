-- GET /workspace/login: the form; POST: signs in. Every failure reads the
-- same ("email or password is wrong"); wrong passwords wait longer and longer
-- per (email, address), attempts are limited per address, and per email from
-- addresses it has not signed in from (lib/workspace/login_limit.lua).
local web = require "workspace.web"
local users = require "users"
local limit = require "workspace.login_limit"

local WRONG = "The email or password is wrong."

local function form(w, values, status, headers)
  values.title = "Sign in"
  values.next = values.next or w.req.query.next
  return w:render("login", values, status, headers)
end

local function too_many(w, email, seconds)
  local minutes = math.max(1, math.ceil(seconds / 60))
  return form(w, { email = email, error = "Too many sign-in attempts. Wait " .. minutes
    .. (minutes == 1 and " minute" or " minutes") .. " and try again." }, 429, { ["Retry-After"] = tostring(seconds) })
end

return web.public(function(w)
  if not w.posted then
    if w.session then return w:redirect(web.safe_next(w.req.query.next)) end
    return form(w, {})
  end
  local f = w.form
  local email, address = users.check_email(f.email) or "", w.req.remote_addr
  local wait = limit.attempt(address)
    or (email ~= "" and (limit.try_email(email, address) or limit.try(email, address)))
  if wait then return too_many(w, f.email, wait) end
  local user = users.authenticate(f.email, f.password)
  if not user then
    return form(w, { email = f.email, next = f.next, error = WRONG }, 401)
  end
  limit.succeeded(email, address)
  return w:sign_in(user, f.next)
end)

-- GET /workspace/signup: the form; POST: a new company and its first user.
--
-- The answer never tells whether the email already had an account: a new
-- one and a taken one both get "Sign-up received, now sign in" (the same
-- 303 to the sign-in page, no session). For a taken email nothing is
-- created and nothing changes; only the log says so. Taken emails are found
-- before the password is hashed, so they cost no Argon2id; sign-ups are
-- limited per address (lib/workspace/login_limit.lua).
local web = require "workspace.web"
local users = require "users"
local companies = require "companies"
local limit = require "workspace.login_limit"
local trim = require "trim"

local RECEIVED = "/workspace/login?notice=signed_up"

local function form(w, values, status, headers)
  values.title = "Sign up"
  values.min_password = users.MIN_PASSWORD
  return w:render("signup", values, status, headers)
end

return web.public(function(w)
  if not w.posted then return form(w, {}) end
  local f = w.form
  local company = trim(f.company or "")
  local errors = {}
  if company == "" or #company > 200 then errors.company = "Enter your company's name (1 to 200 characters)." end
  local email, why = users.check_email(f.email)
  if not email then errors.email = why end
  local ok, pwhy = users.check_password(f.password)
  if not ok then errors.password = pwhy end
  if next(errors) then return form(w, { company = company, email = f.email, errors = errors }, 422) end

  local wait = limit.signup(w.req.remote_addr)
  if wait then
    local minutes = math.max(1, math.ceil(wait / 60))
    return form(w, { company = company, email = f.email, error = "Too many sign-ups from this address. Wait "
      .. minutes .. (minutes == 1 and " minute" or " minutes") .. " and try again." }, 429,
      { ["Retry-After"] = tostring(wait) })
  end

  local existing = users.find_by_email(email)
  if existing then
    -- The hash a new account costs is spent here too: a quicker answer
    -- would tell that the email is taken.
    crypto.argon2id_hash(f.password)
    log.info("workspace_signup_email_taken", { requestId = w.req.id, userId = existing })
    return w:redirect(RECEIVED)
  end
  local done, err = pcall(db.transaction, function()
    local company_id = assert(companies.create(company))
    local id, uwhy, field = users.create(company_id, email, f.password)
    if not id then error({ field = field, message = uwhy }, 0) end
    log.info("workspace_signup", { requestId = w.req.id, userId = id, companyId = company_id })
  end)
  if not done then
    -- Taken between the check and the insert: the same answer as above.
    if type(err) == "table" and err.field == "email" then
      log.info("workspace_signup_email_taken", { requestId = w.req.id })
      return w:redirect(RECEIVED)
    end
    if type(err) == "table" then
      errors[err.field] = err.message
      return form(w, { company = company, email = f.email, errors = errors }, 422)
    end
    error(err, 0)
  end
  return w:redirect(RECEIVED)
end)

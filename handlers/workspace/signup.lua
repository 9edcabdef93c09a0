-- GET /workspace/signup: the form; POST: a new company, its first user, and
-- that user signed in.
local web = require "workspace.web"
local users = require "users"
local companies = require "companies"

local function form(w, values, status)
  values.title = "Sign up"
  values.min_password = users.MIN_PASSWORD
  return w:render("signup", values, status)
end

return web.public(function(w)
  if w.req.method == "GET" then return form(w, {}) end
  local f = w.form
  local company = (f.company or ""):match("^%s*(.-)%s*$")
  local errors = {}
  if company == "" or #company > 200 then errors.company = "Enter your company's name (1 to 200 characters)." end
  local email, why = users.check_email(f.email)
  if not email then errors.email = why end
  local ok, pwhy = users.check_password(f.password)
  if not ok then errors.password = pwhy end
  if next(errors) then return form(w, { company = company, email = f.email, errors = errors }, 422) end

  local user
  local done, err = pcall(db.transaction, function()
    local company_id = assert(companies.create(company))
    local id, uwhy, field = users.create(company_id, email, f.password)
    if not id then error({ field = field, message = uwhy }, 0) end
    user = { id = id, company_id = company_id }
  end)
  if not done then
    if type(err) == "table" and err.field then
      errors[err.field] = err.field == "email" and (err.message .. " Sign in instead, or use another email.")
        or err.message
      return form(w, { company = company, email = f.email, errors = errors }, 422)
    end
    error(err, 0)
  end
  return w:sign_in(user, "/workspace/connections")
end)

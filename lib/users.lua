-- People who sign in to the workspace: one company each, an email and an
-- Argon2id password hash. Used by the workspace and by `sgw user create`.
local credentials = require "credentials"
local trim = require "trim"

local M = {}

M.MIN_PASSWORD = 12
-- Argon2 hashes any length, but a megabyte "password" is only a way to burn
-- our CPU.
M.MAX_PASSWORD = 1024

-- Returns the email as stored (trimmed, lower-case), or nil and why.
function M.check_email(email)
  email = trim(tostring(email or "")):lower()
  if email == "" then return nil, "Enter your email address." end
  if #email > 254 or not email:match("^[^%s@]+@[^%s@]+%.[^%s@.]+$") or email:find("..", 1, true) then
    return nil, "Enter an email address like name@example.com."
  end
  return email
end

-- Returns true, or nil and why.
function M.check_password(password)
  password = password or ""
  local length = utf8.len(password) or #password
  if length < M.MIN_PASSWORD then
    return nil, "Choose a password of at least " .. M.MIN_PASSWORD .. " characters."
  end
  if #password > M.MAX_PASSWORD then
    return nil, "Choose a password of at most " .. M.MAX_PASSWORD .. " bytes."
  end
  return true
end

-- Creates a user of a company. Returns the id, or nil, a message and the
-- field it concerns ("email" or "password").
function M.create(company_id, email, password)
  local normalized, why = M.check_email(email)
  if not normalized then return nil, why, "email" end
  local ok, pwhy = M.check_password(password)
  if not ok then return nil, pwhy, "password" end
  local id = credentials.new_id("usr_")
  local _, err, state = db.exec([[INSERT INTO users (id, company_id, email, password_hash)
      VALUES ($1, $2, $3, $4)]], id, company_id, normalized, crypto.argon2id_hash(password))
  if state == "23505" then return nil, "An account with this email already exists.", "email" end
  if err then return nil, err end
  return id
end

-- The id of the user with this (normalised) email, or nil.
function M.find_by_email(email)
  local row = assert(db.query("SELECT id FROM users WHERE email = $1", email))[1]
  return row and row.id
end

-- Verified against when the email is unknown, so that an unknown email
-- costs the same time as a wrong password and timing tells nothing.
local dummy_hash

-- The user behind an email and password ({id, company_id, email}), or nil.
function M.authenticate(email, password)
  email = M.check_email(email)
  password = password or ""
  if #password > M.MAX_PASSWORD then return nil end
  local rows = email and assert(db.query(
    "SELECT id, company_id, email, password_hash FROM users WHERE email = $1", email)) or {}
  local user = rows[1]
  if not user then
    dummy_hash = dummy_hash or crypto.argon2id_hash(crypto.random_token(16))
    crypto.argon2id_verify(dummy_hash, password)
    return nil
  end
  if not crypto.argon2id_verify(user.password_hash, password) then return nil end
  db.exec("UPDATE users SET last_login_at = now() WHERE id = $1", user.id)
  user.password_hash = nil
  return user
end

return M

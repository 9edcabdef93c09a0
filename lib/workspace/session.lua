-- Workspace sessions and CSRF tokens.
--
-- One cookie, HttpOnly and SameSite=Lax, carries a random token. When
-- public_base_url is https it is a __Host- cookie (Secure, Path=/, no
-- Domain): a neighbouring subdomain cannot plant one, which matters because
-- whoever plants a token can compute its CSRF token (below) and sign the
-- browser into an account of theirs. Over plain http (development) the
-- browser would refuse that prefix, so the cookie is sgw_workspace on
-- /workspace. Signed in, the token names a session row,
-- stored by its SHA-256 only; before that (the sign-in and sign-up forms) it
-- is just a random value. Either way the CSRF token of the forms is an HMAC
-- of the cookie's token: it is tied to that browser's session, changes when
-- the session does (signing in issues a new token, so a planted cookie is
-- useless), needs no storage, and cannot be computed without the cookie.
local M = {}

M.COOKIE = "sgw_workspace"
M.SECURE_COOKIE = "__Host-sgw_workspace"
local TOKEN_LENGTH = 43 -- base62: about 256 bits

local function hash(token)
  return crypto.sha256_hex(token)
end

function M.new_token()
  return crypto.random_token(TOKEN_LENGTH)
end

local function secure()
  return (config.get("public_base_url") or ""):match("^https://") ~= nil
end

local function cookie_name()
  return secure() and M.SECURE_COOKIE or M.COOKIE
end

-- The token the browser sent, or nil.
function M.cookie_token(req)
  local header = req.headers["cookie"]
  if not header then return nil end
  local wanted = cookie_name()
  -- Pair by pair, each read from its start only: one pattern over the
  -- whole header tried at every byte took seconds for 16 KB without '='.
  for pair in (header .. ";"):gmatch("([^;]*);") do
    local name, value = pair:match("^%s*([^=%s]+)=(.*)$")
    if name == wanted and #value == TOKEN_LENGTH and value:match("^%w+$") then return value end
  end
  return nil
end

function M.csrf_for(token)
  return crypto.base64url_encode(crypto.hmac_sha256(token, "sgw workspace csrf"))
end

-- Did the form carry this session's CSRF token? Compared in constant time.
function M.csrf_ok(token, submitted)
  if not token or type(submitted) ~= "string" then return false end
  return crypto.constant_eq(M.csrf_for(token), submitted)
end

-- Set-Cookie for a token (nil: delete the cookie).
function M.cookie(token)
  local https = secure()
  local parts = { cookie_name() .. "=" .. (token or ""), https and "Path=/" or "Path=/workspace", "HttpOnly",
    "SameSite=Lax" }
  if token then
    parts[#parts + 1] = "Max-Age=" .. math.floor(config.get("workspace.session_hours") * 3600)
  else
    parts[#parts + 1] = "Max-Age=0"
  end
  if https then parts[#parts + 1] = "Secure" end
  return table.concat(parts, "; ")
end

-- The signed-in session of a token: {id, user_id, company_id, email,
-- company_name}, or nil.
function M.find(token)
  if not token then return nil end
  local rows = assert(db.query([[
    SELECT s.id, s.user_id, s.company_id, u.email, c.name AS company_name
      FROM workspace_sessions s JOIN users u ON u.id = s.user_id JOIN companies c ON c.id = s.company_id
     WHERE s.id = $1 AND s.expires_at > now()]], hash(token)))
  return rows[1]
end

-- Signs a user in: a new session with a new token (never the one the browser
-- had, against session fixation). Returns the token.
function M.create(user)
  local token = M.new_token()
  assert(db.exec([[INSERT INTO workspace_sessions (id, user_id, company_id, expires_at)
      VALUES ($1, $2, $3, now() + make_interval(secs => $4))]],
    hash(token), user.id, user.company_id, config.get("workspace.session_hours") * 3600))
  return token
end

function M.destroy(token)
  if token then assert(db.exec("DELETE FROM workspace_sessions WHERE id = $1", hash(token))) end
end

return M

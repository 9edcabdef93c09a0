-- The callbacks Meta requires of a live app (CONTRACT 11, README "Meta's
-- deauthorize and data-deletion callbacks"): Meta posts a signed_request
-- when a person removes the app (deauthorize) or asks for their data to be
-- deleted (data deletion).
--
-- What sgw holds about that person: the Page tokens their consent gave
-- (erased) and their app-scoped id on the accounts they connected
-- (connected_by_fb_user; erased by a data deletion). Comments they may have
-- written carry Page-scoped ids that cannot be linked to them, and stay.
--
-- A request is known by the hash of its signed_request: the same one again
-- (Meta's retry or a replay) answers as the first did and changes nothing,
-- even after the person connected again. issued_at is not held to a window:
-- Meta retries failed callbacks, and the effect of a fresh request is what
-- the person asked for anyway.
local json = require "json"
local form = require "form"
local problem = require "problem"
local accounts = require "accounts"
local token_health = require "token_health"

local M = {}

-- A signed_request is small; this bounds the work before the HMAC.
M.MAX_LENGTH = 4096

local function unpadded(s)
  return (s:gsub("=+$", ""))
end

-- The payload of a valid signed_request ({algorithm, issued_at, user_id, ...})
-- and the request in its one spelling (below), or nil and why it is refused.
function M.parse(value, secret)
  if type(value) ~= "string" or value == "" then return nil, "The form field signed_request is missing." end
  if #value > M.MAX_LENGTH then return nil, "signed_request is longer than " .. M.MAX_LENGTH .. " characters." end
  local sig64, payload64 = value:match("^([%w_%-]+=*)%.([%w_%-]+=*)$")
  local sig = sig64 and crypto.base64url_decode(unpadded(sig64))
  if not sig then return nil, "signed_request is not base64url(signature) \".\" base64url(payload)." end
  if not crypto.constant_eq(sig, crypto.hmac_sha256(secret, payload64)) then
    return nil, "The signature of signed_request does not match its payload."
  end
  local text = crypto.base64url_decode(unpadded(payload64))
  local payload = text and text:match("^%s*{") and json.decode(text)
  if type(payload) ~= "table" then return nil, "The payload of signed_request is not a JSON object." end
  if payload.algorithm ~= "HMAC-SHA256" then
    return nil, "signed_request's algorithm must be HMAC-SHA256, not " .. tostring(payload.algorithm) .. "."
  end
  local user = payload.user_id
  if math.type(user) == "integer" then user = tostring(user) end
  if type(user) ~= "string" or not user:match("^%d+$") or #user > 64 then
    return nil, "signed_request's payload has no valid user_id."
  end
  if type(payload.issued_at) ~= "number" then return nil, "signed_request's payload has no issued_at." end
  payload.user_id = user
  -- The signature as decoded, spelt again: padding or unused low bits in its
  -- last character give other strings for the same request, which must not
  -- pass for new ones (the payload, being signed, has one spelling). Meta's
  -- own spelling is this one, so a request is known by what Meta sent.
  return payload, crypto.base64url_encode(sig) .. "." .. payload64
end

-- The verified payload of a callback request, or raises a 400 problem
-- (invalid_signed_request; 415 for a body that is not a form). Also returns
-- the signed_request in its one spelling, by which a replay is known.
function M.read(req)
  local secret = config.get("meta.app_secret") or ""
  if secret == "" then
    problem.raise(503, "service_unavailable", "meta.app_secret is not set: signed requests cannot be checked.")
  end
  local media = (req.headers["content-type"] or ""):match("^%s*([^;%s]+)")
  if media and media:lower() ~= "application/x-www-form-urlencoded" then
    problem.raise(415, "unsupported_media_type", "Send the form field signed_request as application/x-www-form-urlencoded.")
  end
  local fields, ferr = form.parse(req.body, 10)
  if not fields then problem.raise(400, "invalid_signed_request", "The form body is malformed: " .. ferr .. ".") end
  local payload, spelling = M.parse(fields.signed_request, secret)
  if not payload then problem.raise(400, "invalid_signed_request", spelling) end
  return payload, spelling
end

-- Claims a request: true for the first time it arrives, else false and the
-- confirmation code the first one got (data deletion).
local function claim(signed_request, kind)
  local hash = crypto.sha256_hex(signed_request)
  local rows = assert(db.query([[INSERT INTO meta_signed_requests (request_sha256, kind) VALUES ($1, $2)
      ON CONFLICT (request_sha256) DO NOTHING RETURNING request_sha256]], hash, kind))
  if rows[1] then return true, hash end
  local first = assert(db.query("SELECT confirmation_code FROM meta_signed_requests WHERE request_sha256 = $1", hash))[1]
  return false, hash, first and first.confirmation_code
end

-- Disconnects every account the person connected, erasing their tokens
-- (also of accounts disconnected before), and emits social.account.disconnected
-- for each that was connected. Returns how many were.
local function disconnect_user(user_id)
  local rows = assert(db.query([[UPDATE social_accounts a SET status = 'disconnected',
         disconnected_at = CASE WHEN a.status = 'disconnected' THEN a.disconnected_at ELSE now() END,
         access_token_enc = NULL, status_reason = NULL, status_since = NULL
       FROM social_accounts old
      WHERE a.id = old.id AND a.connected_by_fb_user = $1
        AND (a.status <> 'disconnected' OR a.access_token_enc IS NOT NULL)
      RETURNING a.id, old.status AS previous_status]], user_id))
  local n = 0
  for _, r in ipairs(rows) do
    if accounts.CONNECTED[r.previous_status] then
      n = n + 1
      local row = assert(db.query("SELECT " .. accounts.COLUMNS .. ", company_id FROM social_accounts WHERE id = $1",
        r.id))[1]
      token_health.announce(row, "social.account.disconnected")
    end
  end
  if #rows > 0 then log.info("meta_user_accounts_disconnected", { accounts = #rows, connected = n }) end
  return n
end

-- POST /webhooks/meta/deauthorize. Returns true when the request was new.
function M.deauthorize(signed_request, payload)
  return db.transaction(function()
    local first = claim(signed_request, "deauthorize")
    if first then disconnect_user(payload.user_id) end
    return first
  end)
end

function M.status_url(code)
  return (config.get("public_base_url") or ""):gsub("/+$", "") .. "/meta/deletion/" .. code
end

-- POST /webhooks/meta/data-deletion: the deauthorization, and the person's
-- app-scoped id erased from every account. Returns the confirmation code
-- (the first one's for the same request again).
function M.delete_data(signed_request, payload)
  return db.transaction(function()
    local first, hash, code = claim(signed_request, "data_deletion")
    if not first then return code end
    code = crypto.random_token(32)
    local n = disconnect_user(payload.user_id)
    assert(db.exec("UPDATE social_accounts SET connected_by_fb_user = NULL WHERE connected_by_fb_user = $1",
      payload.user_id))
    -- Only a hash of the person's id stays, as the record of what was asked.
    assert(db.exec([[INSERT INTO meta_deletion_requests (confirmation_code, fb_user_id, status, accounts_affected,
        completed_at) VALUES ($1, $2, 'completed', $3, now())]], code, "sha256:" .. crypto.sha256_hex(payload.user_id), n))
    assert(db.exec("UPDATE meta_signed_requests SET confirmation_code = $2 WHERE request_sha256 = $1", hash, code))
    return code
  end)
end

-- A deletion request by its confirmation code, or nil.
function M.deletion_request(code)
  if type(code) ~= "string" or not code:match("^%w+$") or #code > 64 then return nil end
  local iso = function(c) return "to_char(" .. c .. [[ AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"')]] end
  return assert(db.query("SELECT confirmation_code, status, accounts_affected, " .. iso("created_at")
    .. " AS created_at, " .. iso("completed_at") .. " AS completed_at FROM meta_deletion_requests"
    .. " WHERE confirmation_code = $1", code))[1]
end

return M

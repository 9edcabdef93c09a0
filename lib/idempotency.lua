-- Idempotency-Key (CONTRACT section 5). A route declares
-- `idempotency = "required"` or `"optional"` and the dispatcher runs its
-- handler through wrap():
--
--   1. the key is claimed in a statement of its own (committed at once), so of
--      many concurrent requests with one key exactly one goes on; the others
--      see the claim: 409 while it is in flight, the stored response once done;
--   2. the handler runs in one transaction with the storing of its response, so
--      the resource and the remembered response commit together or not at all;
--   3. a response that is not remembered (4xx, 5xx, an error) rolls back what
--      the handler wrote and gives up the claim, so the client may try again.
--      When giving it up fails too (the database went away: the client got
--      503 and will retry), the process remembers the claim it owes, and the
--      retry with the key gives it up before claiming (the same instance; on
--      another one it is taken over after LOCK_SECONDS).
--
-- Because of 2., a handler behind a key cannot make outbound HTTP calls (the
-- host refuses them inside a transaction): it enqueues a job instead, or makes
-- them in its prepare step, which runs after the claim and before the
-- transaction, and whose errors are handled like the handler's.
local json = require "json"
local json_shapes = require "json_shapes"
local problem = require "problem"

local M = {}

-- How long an in-flight claim holds before another request may take it over
-- (the claiming instance crashed, or its handler was stopped by the time
-- budget before it could give the claim up). A takeover is safe even if the
-- first handler still runs: its response is stored only while it still holds
-- the claim, else its transaction rolls back.
M.LOCK_SECONDS = 120
M.MAX_KEY_LENGTH = 255
M.CLEANUP_BATCH = 1000

-- ------------------------------------------------------------ canonical JSON

local function quote(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' or c == "\\" then return "\\" .. c end
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end

-- 1, 1.0 and 1e0 are one number: integral values print as integers, others
-- with enough digits to be exact.
local function number(n)
  if n ~= n or n == math.huge or n == -math.huge then
    error("canonical JSON: not a finite number", 0)
  end
  local i = math.tointeger(n)
  if i then return string.format("%d", i) end
  return string.format("%.17g", n)
end

-- Deterministic JSON of a decoded value: object keys sorted (byte order),
-- arrays in order, no whitespace, numbers normalised. Two bodies that mean the
-- same encode the same. ([] and {} both decode to an empty table and encode
-- as {}: the decoder cannot tell them apart.)
function M.canonical(v)
  local t = type(v)
  if v == nil or v == json.null then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then return number(v) end
  if t == "string" then return quote(v) end
  if t ~= "table" then error("canonical JSON: cannot encode a " .. t, 0) end
  local out = {}
  if #v > 0 and json.is_array(v) then
    for i = 1, #v do out[i] = M.canonical(v[i]) end
    return "[" .. table.concat(out, ",") .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for i, k in ipairs(keys) do
    local value = v[k]
    if value == nil then value = v[tonumber(k)] end
    out[i] = quote(k) .. ":" .. M.canonical(value)
  end
  return "{" .. table.concat(out, ",") .. "}"
end

-- ------------------------------------------------------------ request identity

-- 1 to 255 visible ASCII characters (0x21..0x7E).
function M.valid_key(key)
  return type(key) == "string" and #key >= 1 and #key <= M.MAX_KEY_LENGTH
    and not key:find("[^\33-\126]")
end

-- What "the same request" means: method, path and body, a JSON body compared
-- by meaning, any other body (raw uploads) byte for byte.
function M.request_hash(req)
  local body
  if req.json ~= nil then
    body = "json " .. M.canonical(req.json)
  elseif req.body and #req.body > 0 then
    body = "raw " .. req.body
  else
    body = "none"
  end
  return crypto.sha256_hex(req.method .. " " .. req.path .. "\n" .. body)
end

-- Keys belong to the API client. Real endpoints always have one (they
-- authenticate); only unauthenticated fixture routes fall back to the address.
function M.scope(req, ctx)
  local client = ctx.client
  if client then return client.client_id or client.id end
  return "anon:" .. tostring(req.remote_addr)
end

-- ------------------------------------------------------------ storage

local AT_NOW = "to_timestamp($1::float8)"

-- A row nobody holds any more: a done one past its retention, an in-flight
-- one past its lock. Both may be replaced or deleted.
local STALE = "((k.state = 'done' AND k.expires_at <= " .. AT_NOW .. ")"
  .. " OR (k.state = 'in_flight' AND k.locked_until <= " .. AT_NOW .. "))"

local CLAIM = [[
INSERT INTO idempotency_keys AS k
    (client_id, key, request_hash, state, locked_by, locked_until, created_at, expires_at)
VALUES ($2, $3, $4, 'in_flight', $5, to_timestamp($1::float8 + $6::float8),
        to_timestamp($1::float8), to_timestamp($1::float8 + $7::float8))
ON CONFLICT (client_id, key) DO UPDATE SET
    request_hash = EXCLUDED.request_hash, state = 'in_flight', locked_by = EXCLUDED.locked_by,
    locked_until = EXCLUDED.locked_until, created_at = EXCLUDED.created_at,
    expires_at = EXCLUDED.expires_at,
    response_status = NULL, response_body = NULL, response_headers = NULL
  WHERE ]] .. STALE .. [[

RETURNING k.state]]

local FIND = [[
SELECT request_hash, state, locked_by, response_status, response_body, response_headers
  FROM idempotency_keys WHERE client_id = $1 AND key = $2]]

local STORE = [[
UPDATE idempotency_keys
   SET state = 'done', response_status = $4, response_body = $5, response_headers = $6,
       locked_by = NULL, locked_until = NULL
 WHERE client_id = $1 AND key = $2 AND locked_by = $3 AND state = 'in_flight']]

local RELEASE = [[
DELETE FROM idempotency_keys
 WHERE client_id = $1 AND key = $2 AND locked_by = $3 AND state = 'in_flight']]

local function ttl_seconds()
  return (tonumber(config.get("api.idempotency_ttl_hours")) or 24) * 3600
end

-- Claims this process could not give up, by scope and key: the owner (its
-- request id) for LOCK_SECONDS, in the store every worker shares.
local function owed_key(scope, key)
  return "idempotency:owed:" .. crypto.sha256_hex(scope .. "\0" .. key)
end

local function owe_release(scope, key, owner)
  shared.set(owed_key(scope, key), owner, M.LOCK_SECONDS * 1000)
end

-- Gives up an owed claim of the in-flight row `row`; true when it did.
local function pay_owed_release(scope, key, row)
  local k = owed_key(scope, key)
  if row.state ~= "in_flight" or shared.get(k) ~= row.locked_by then return false end
  local n = db.exec(RELEASE, scope, key, row.locked_by)
  if n then shared.delete(k) end
  return n == 1
end

-- true when this request now holds the key; false, row when another holds it
-- (row nil: it was given up meanwhile); nil, err when PostgreSQL failed.
local function claim(scope, key, hash, owner)
  local rows, err = db.query(CLAIM, clock.now(), scope, key, hash, owner,
    M.LOCK_SECONDS, ttl_seconds())
  if not rows then return nil, err end
  if rows[1] then return true end
  rows, err = db.query(FIND, scope, key)
  if not rows then return nil, err end
  -- Ours already: the connection broke after the claim committed and the
  -- host sent the statement again.
  if rows[1] and rows[1].state == "in_flight" and rows[1].locked_by == owner then return true end
  return false, rows[1]
end

-- Deletes expired rows, at most `limit`; returns how many (raises on failure).
function M.cleanup(limit)
  local n, err = db.exec([[
DELETE FROM idempotency_keys WHERE (client_id, key) IN (
  SELECT client_id, key FROM idempotency_keys k
   WHERE k.expires_at <= ]] .. AT_NOW .. " AND " .. STALE .. [[
   LIMIT $2)]], clock.now(), limit or M.CLEANUP_BATCH)
  if not n then error("idempotency cleanup failed: " .. tostring(err), 0) end
  return n
end

-- ------------------------------------------------------------ responses

local REPLAYED_HEADERS = { ["content-type"] = true, location = true }

-- The body as the text the client gets, the headers to send, and those of
-- them worth replaying.
local function encode(body, headers, status, route)
  local out, keep, has_type = {}, {}, false
  for k, v in pairs(headers or {}) do
    out[k] = v
    local lower = k:lower()
    if lower == "content-type" then has_type = true end
    if REPLAYED_HEADERS[lower] then keep[k] = v end
  end
  if type(body) == "table" then
    body = json.encode(body, json_shapes.response(route, status))
    if not has_type then
      out["Content-Type"], keep["Content-Type"] = "application/json", "application/json"
    end
  end
  return body or "", out, keep
end

local function replay(row)
  local headers = {}
  if type(row.response_headers) == "table" then
    for k, v in pairs(row.response_headers) do headers[k] = v end
  end
  headers["Idempotent-Replayed"] = "true"
  return row.response_status, row.response_body or "", headers
end

local function unavailable(req, err)
  log.error("idempotency_db_error", { requestId = req.id, error = tostring(err) })
  return problem.unavailable(req, "The request could not be recorded; retry it with the same Idempotency-Key.")
end

-- Raised inside the transaction to roll back a response that is not kept.
local NOT_KEPT = setmetatable({}, { __tostring = function() return "idempotency: response not kept" end })

-- Keeps where a handler's error came from: the traceback would be lost once
-- the error has crossed db.transaction.
local function traced(e)
  if e == NOT_KEPT or problem.is_problem(e) or type(traceback) ~= "function" then return e end
  return traceback(tostring(e))
end

-- ------------------------------------------------------------ wrap

-- Runs prepare() (optional, outside any transaction) and run() (which returns
-- status, body, headers) under the request's Idempotency-Key; returns status,
-- body, headers.
function M.wrap(req, ctx, run, prepare)
  local key = req.headers and req.headers["idempotency-key"]
  if key == nil then
    if ctx.route and ctx.route.idempotency == "required" then
      return problem.response(req, 400, "idempotency_key_required",
        "This endpoint needs an Idempotency-Key header (1 to 255 visible ASCII characters).")
    end
    if prepare then prepare() end
    return run()
  end
  if not M.valid_key(key) then
    return problem.response(req, 400, "invalid_parameter",
      "The Idempotency-Key header must be 1 to 255 visible ASCII characters (no spaces).")
  end
  if db.in_transaction() then
    error("idempotency.wrap needs to run outside a transaction: its claim commits on its own", 2)
  end

  local scope, hash, owner = M.scope(req, ctx), M.request_hash(req), req.id
  local held = false
  -- Twice more only when the holder gave the key up between our two statements.
  for _ = 1, 3 do
    local claimed, row = claim(scope, key, hash, owner)
    if claimed == nil then return unavailable(req, row) end
    if claimed then held = true; break end
    if row then
      if row.request_hash ~= hash then
        return problem.response(req, 422, "idempotency_key_reused",
          "This Idempotency-Key was used for a different request (method, path or body); "
            .. "use a new key for a new request.")
      end
      if row.state == "done" then return replay(row) end
      if not pay_owed_release(scope, key, row) then break end
    end
  end
  if not held then
    return problem.response(req, 409, "idempotency_key_in_use",
      "A request with this Idempotency-Key is still in progress; retry shortly for its response.",
      { headers = { ["Retry-After"] = "1" } })
  end

  local status, body, headers
  -- A failed prepare is the handler's error: ok stays false, committed holds it.
  local prepared, ok, committed = true, false, nil
  if prepare then prepared, committed = xpcall(prepare, traced) end
  if prepared then
    ok, committed = pcall(db.transaction, function()
      local done, s, b, h = xpcall(run, traced)
      if not done then error(s, 0) end
      status, body, headers = s, b, h
      if type(status) ~= "number" or status < 200 or status >= 400 then error(NOT_KEPT, 0) end
      local text, out, keep = encode(body, headers, status, ctx.route)
      local n, serr = db.exec(STORE, scope, key, owner, status, text, keep)
      -- Our claim was taken over (we ran past LOCK_SECONDS): the other request
      -- owns the key now, so nothing of ours may be kept.
      if n ~= 1 then error("idempotency claim lost before the response was stored: " .. (serr or "taken over"), 0) end
      body, headers = text, out
      return true
    end)
    if ok and committed then return status, body, headers end
  end

  local n, rerr = db.exec(RELEASE, scope, key, owner)
  if not n then
    log.warn("idempotency_release_failed", { requestId = req.id, error = tostring(rerr) })
    owe_release(scope, key, owner)
  end
  if committed == NOT_KEPT then return status, body, headers end
  if problem.is_outage(committed) then return unavailable(req, committed) end
  error(committed, 0)
end

return M

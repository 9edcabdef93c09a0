-- POST /webhooks/meta: a Meta delivery. The signature is checked over the
-- raw bytes (Meta escapes non-ASCII as \uXXXX; a re-serialised body would not
-- match); a signed delivery is stored durably before the 200, and the job
-- process_meta_delivery turns it into comments.
local problem = require "problem"
local json = require "json"
local jobs = require "jobs"
local meta_webhooks = require "meta_webhooks"

local function signed(req)
  local secret = config.get("meta.app_secret") or ""
  local given = (req.headers["x-hub-signature-256"] or ""):match("^sha256=(%x+)$")
  if secret == "" or not given or #given ~= 64 then return false end
  return crypto.constant_eq(given:lower(), crypto.hmac_sha256_hex(secret, req.body or ""))
end

return function(req)
  if not signed(req) then
    -- Every 401 names a scheme (contract: Bearer); the signature is what counts here.
    return problem.response(req, 401, "unauthenticated", "X-Hub-Signature-256 is missing or does not match the body.",
      { headers = { ["WWW-Authenticate"] = "Bearer" } })
  end
  if not meta_webhooks.storable(req.body or "") then
    -- A NUL byte or invalid UTF-8 cannot be stored as text, and Meta would
    -- retry a refusal for 36 h: kept hex-encoded as a record, skipped, 200.
    local rows = assert(db.query([[INSERT INTO meta_webhook_deliveries (body, processed_at, error)
        VALUES ($1, now(), $2) RETURNING id]], crypto.hex_encode(req.body),
      "the body is not UTF-8 text without NUL bytes (stored hex-encoded); not processed"))
    log.warn("meta_delivery_skipped", { deliveryId = rows[1].id, reason = "body not UTF-8 text without NUL bytes" })
    return 200, { received = true }
  end
  -- An object, not an array: cjson decodes both to a table.
  local delivery = json.decode(req.body or "")
  if type(delivery) ~= "table" or not req.body:match("^%s*{") then
    return problem.response(req, 400, "invalid_json", "The body is not a JSON object.")
  end
  db.transaction(function()
    -- The job finds the delivery by id and by the second it came in, so it
    -- reads one or two day partitions, not all of them.
    local rows = assert(db.query([[INSERT INTO meta_webhook_deliveries (body) VALUES ($1)
        RETURNING id, floor(extract(epoch FROM received_at))::bigint AS second]], req.body))
    assert(jobs.enqueue("process_meta_delivery", { deliveryId = rows[1].id, receivedSecond = rows[1].second },
      { max_attempts = 20 }))
  end)
  return 200, { received = true }
end

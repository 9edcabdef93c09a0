-- Events to clients' webhooks (CONTRACT 7): the body, the Standard Webhooks
-- signature, the retry schedule, one delivery attempt and its record, and
-- setting a client's endpoint. lib/events.lua writes an event and enqueues
-- its `deliver_event` job in the caller's transaction; the job calls
-- deliver() once per attempt.
local credentials = require "credentials"
local jobs = require "jobs"
local json = require "json"
local partitions = require "partitions"

local M = {}

-- Any 2xx within this many seconds is success (CONTRACT 7).
M.TIMEOUT_SECONDS = 10

-- The delivery body. Built by hand so that the envelope's fields come in a
-- fixed order; `data_json` is the event's data, already encoded.
function M.body(id, type, created_at, environment, data_json)
  return string.format('{"id":%s,"type":%s,"createdAt":%s,"environment":%s,"data":%s}',
    json.encode(id), json.encode(type), json.encode(clock.iso(created_at)), json.encode(environment), data_json)
end

-- Standard Webhooks: HMAC-SHA256 keyed with the bytes the secret's base64
-- part stands for, over "<id>.<timestamp>.<body>".
function M.signature(secret, id, timestamp, body)
  local key = assert(crypto.base64_decode(secret:sub(#"whsec_" + 1)), "malformed webhook secret")
  return "v1," .. crypto.base64_encode(crypto.hmac_sha256(key, id .. "." .. timestamp .. "." .. body))
end

-- What tenants see of an attempt that got no answer (the API Clients page
-- shows it beside the status code of one that did): the class of failure
-- only. The transport's own text would tell them which ports answer
-- on an address they could not reach otherwise; it goes to the log only.
local REASONS = { forbidden = "destination not allowed", timeout = "timed out", too_large = "response too large" }
function M.failure_reason(res, kind)
  if res then return nil end -- the status code says it
  return REASONS[kind] or "connection failed"
end

-- scheme://host:port of a URL, for logs: the path and query may carry the
-- tenant's own tokens, and so may user information.
function M.origin(url)
  local scheme, authority = tostring(url):match("^(%a[%w+.-]*)://([^/?#]*)")
  if not scheme then return "?" end
  scheme, authority = scheme:lower(), authority:gsub("^.*@", "")
  if not authority:match(":%d+$") then authority = authority .. (scheme == "https" and ":443" or ":80") end
  return scheme .. "://" .. authority:lower()
end

-- Seconds until the next attempt after failed attempt number `attempt` of an
-- event created at `created` (unix seconds), or nil to give up: base * 2^(n-1)
-- capped at max, with equal jitter (between half and all of it, so endpoints
-- that failed together do not all come back together), and never later than
-- max_age_hours after the event, which gets one last attempt then.
function M.next_retry_in(attempt, created, now, random)
  local deadline = created + config.get("webhooks.retry.max_age_hours") * 3600
  if now >= deadline then return nil end
  local ceiling = math.min(config.get("webhooks.retry.max_seconds"),
    config.get("webhooks.retry.base_seconds") * 2 ^ math.max(0, attempt - 1))
  local wait = ceiling * (0.5 + 0.5 * (random or math.random)())
  return math.min(wait, deadline - now)
end

-- Which api_clients rows have an endpoint to deliver to, as a condition on
-- them (lib/events.lua asks it in the statement that writes the events).
M.ACTIVE_ENDPOINT = "webhook_url IS NOT NULL AND webhook_disabled_at IS NULL AND revoked_at IS NULL"

-- A deliver_event job for each event ({id, client_id, created_second: the
-- Unix second it was created in}) whose client is in `active` (a set of
-- client ids with an active endpoint). Inside the transaction that writes
-- the events, so a job exists exactly when its event does.
function M.enqueue_many(events, active)
  local payloads = {}
  for _, e in ipairs(events) do
    if active[e.client_id] then payloads[#payloads + 1] = { eventId = e.id, createdSecond = e.created_second } end
  end
  if #payloads == 0 then return end
  -- Failed deliveries come back through retry_in, which never buries a
  -- job; max_attempts only bounds raised errors (a database outage, an
  -- unreadable secret).
  assert(jobs.enqueue_many("deliver_event", payloads, { max_attempts = 1000 }))
end

local EVENT_SQL = [[
  SELECT e.id, e.body, e.client_id, e.company_id, e.environment,
         extract(epoch FROM e.created_at)::float8 AS created,
         c.webhook_url, c.webhook_secret_enc, c.webhook_disabled_at, c.revoked_at
    FROM events e JOIN api_clients c ON c.id = e.client_id
   WHERE e.id = $1]]
-- With the event's second, one or two day partitions are read instead of
-- every one; jobs enqueued before events were partitioned have only the id.
local EVENT_AT_SQL = EVENT_SQL .. " AND " .. partitions.near("e.created_at", 2)

local function record(ev, attempt, r)
  db.transaction(function()
    assert(db.exec([[INSERT INTO webhook_deliveries (event_id, client_id, company_id, environment, attempt, url,
        outcome, status_code, error, duration_ms, next_retry_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now() + make_interval(secs => $11))]],
      ev.id, ev.client_id, ev.company_id, ev.environment, attempt, ev.webhook_url,
      r.outcome, r.status_code, r.error, r.duration_ms, r.retry_in))
    if r.outcome == "gone" then
      -- Only the URL that answered 410: one set since then stays on.
      assert(db.exec([[UPDATE api_clients SET webhook_disabled_at = now()
          WHERE id = $1 AND webhook_url = $2 AND webhook_disabled_at IS NULL]], ev.client_id, ev.webhook_url))
    end
  end)
end

-- One delivery attempt of an event. Returns nothing when done (delivered,
-- gone, given up, or nowhere to send it) or {retry_in = seconds}.
function M.deliver(event_id, attempt, created_second)
  local ev
  if math.tointeger(created_second) then
    ev = assert(db.query(EVENT_AT_SQL, event_id, created_second))[1]
  else
    ev = assert(db.query(EVENT_SQL, event_id))[1]
  end
  if not ev then return end
  local fields = { eventId = event_id, clientId = ev.client_id, attempt = attempt }
  local skip = (not ev.webhook_url and "no webhook URL") or (ev.webhook_disabled_at and "endpoint disabled")
    or (ev.revoked_at and "client revoked")
  if skip then
    fields.reason = skip
    log.info("webhook_event_dropped", fields)
    return
  end
  -- A secret that cannot be read is an operator's problem (wrong
  -- crypto.encryption_key): raise, so the job is tried again later.
  local secret, rebound = credentials.open_webhook_secret(ev.client_id, ev.webhook_secret_enc)
  if not secret then error(rebound, 0) end
  if rebound then
    -- Only if the row still holds what was read: a new URL brings its own secret.
    assert(db.exec("UPDATE api_clients SET webhook_secret_enc = $3 WHERE id = $1 AND webhook_secret_enc = $2",
      ev.client_id, ev.webhook_secret_enc, rebound))
  end
  local timestamp = tostring(math.floor(clock.now()))
  local started = clock.mono_ms()
  local res, err, kind = http.request({
    method = "POST",
    url = ev.webhook_url,
    body = ev.body,
    timeout = M.TIMEOUT_SECONDS,
    headers = {
      ["Content-Type"] = "application/json",
      ["webhook-id"] = ev.id,
      ["webhook-timestamp"] = timestamp,
      ["webhook-signature"] = M.signature(secret, ev.id, timestamp, ev.body),
    },
    -- The host checks the address it actually connects to, every attempt: a
    -- name that was public at registration may point inside now (DNS rebinding).
    deny_private_addresses = not config.get("webhooks.allow_private_targets"),
  })
  if kind == "lease" then
    -- Not sent (the job's lease was not confirmed lately): no attempt to record.
    fields.detail = err
    log.warn("webhook_delivery_deferred", fields)
    return { retry_in = jobs.LEASE_RETRY_SECONDS, attempt = false }
  end
  local r = { status_code = res and res.status, error = M.failure_reason(res, kind),
    duration_ms = math.floor(clock.mono_ms() - started) }
  if res and res.status >= 200 and res.status <= 299 then
    r.outcome = "delivered"
  elseif res and res.status == 410 then
    r.outcome = "gone"
  else
    r.retry_in = M.next_retry_in(attempt, ev.created, clock.now())
    r.outcome = r.retry_in and "failed" or "gave_up"
  end
  record(ev, attempt, r)
  metrics.inc("sgw_webhook_deliveries_total", { outcome = r.outcome })

  fields.origin, fields.status, fields.error, fields.durationMs = M.origin(ev.webhook_url), r.status_code, r.error, r.duration_ms
  fields.detail = err and err:sub(1, 300)
  if r.outcome == "delivered" then
    log.debug("webhook_delivered", fields)
  elseif r.outcome == "gone" then
    log.warn("webhook_endpoint_disabled", fields)
  elseif r.outcome == "gave_up" then
    log.error("webhook_delivery_abandoned", fields)
  else
    fields.retryIn = r.retry_in
    log.warn("webhook_delivery_failed", fields)
    return { retry_in = r.retry_in }
  end
end

-- Sets (url) or removes (nil) a client's endpoint. A new URL gets a new
-- secret, so a receiver that knew the old one cannot be impersonated by
-- whoever had it, and turns a disabled endpoint back on. Returns
-- {clientId, webhookUrl, webhookSecret} (the secret shown once) or nil, err.
function M.set_endpoint(client_id, url)
  local secret, enc, err
  if url then
    secret = credentials.new_webhook_secret()
    enc, err = credentials.seal_webhook_secret(client_id, secret)
    if not enc then return nil, err end
  end
  local rows = assert(db.query([[UPDATE api_clients SET webhook_url = $2, webhook_secret_enc = $3,
      webhook_disabled_at = NULL WHERE id = $1 AND revoked_at IS NULL RETURNING id]], client_id, url, enc))
  if not rows[1] then return nil, "no active client " .. client_id end
  return { clientId = client_id, webhookUrl = url, webhookSecret = secret }
end

return M

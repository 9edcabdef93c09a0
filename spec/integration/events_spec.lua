-- Events to clients' webhooks end to end: a post publishes and the receiver
-- (spec/support/webhook_receiver.py, which checks Standard Webhooks
-- signatures with its own code) gets social.post.published; retries send the
-- same bytes; 410 turns the endpoint off; a crash after the commit still
-- delivers; private addresses are refused at delivery time; a new URL gets a
-- new secret.
local stack = require "stack"
local cjson = require "cjson.safe"
local receiver = require "receiver"

local SETTINGS = {
  ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
  ["webhooks.allow_private_targets"] = true,
  ["webhooks.retry.base_seconds"] = 0.2,
  ["webhooks.retry.max_seconds"] = 1,
  ["api.rate_limit.per_minute"] = 100000,
  ["jobs.poll_interval_ms"] = 200,
  -- A job whose instance was killed is claimed again after this.
  ["jobs.lease_seconds"] = 3,
}

local function settings(extra)
  local t = {}
  for k, v in pairs(SETTINGS) do t[k] = v end
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local cli = stack.cli

-- ------------------------------------------------------------ receivers

local start_receiver, stop_receivers = receiver.start, receiver.stop_all

-- ------------------------------------------------------------ the spec

describe("events", function()
  local sgw, company, account, n = nil, nil, nil, 0
  local SCOPES = "accounts:read posts:read posts:write operations:read sandbox:write"

  local function new_client(url)
    local argv = { "client", "create", "--company", company, "--environment", "test", "--scopes", SCOPES }
    if url then
      argv[#argv + 1] = "--webhook-url"
      argv[#argv + 1] = url
    end
    return cli(sgw, argv)
  end

  local function api(key, method, path, body)
    local headers = { ["X-Api-Key"] = key }
    if method == "POST" then
      n = n + 1
      headers["Idempotency-Key"] = "events-" .. n .. "-" .. math.random(1, 1e9)
    end
    return sgw:json(method, path, { body = body, headers = headers })
  end

  -- Publishes a text post to the sandbox page; returns the 202 body.
  local function publish(key, extra)
    local body = { targets = { { socialAccountId = account, platform = "facebook" } },
      content = { type = "text", message = "Events spec " .. math.random(1, 1e9) },
      publishing = { mode = "immediate" } }
    for k, v in pairs(extra or {}) do body[k] = v end
    local status, accepted = api(key, "POST", "/api/v1/posts", body)
    assert.are.equal(202, status, cjson.encode(accepted))
    return accepted
  end

  local function wait_final(key, op_id)
    return stack.wait_operation(function(path) return api(key, "GET", path) end, op_id)
  end

  local function wait_deliveries(r, count, pred)
    return stack.eventually(function()
      local list = r.deliveries()
      if #list >= count and (not pred or pred(list)) then return list end
    end, 30, 0.1, count .. " deliveries")
  end

  local function sql(query)
    return stack.psql(sgw.database_url, query)
  end

  -- Every delivery job has run (and none is waiting for a retry): what a
  -- receiver has got by then is all it gets.
  local function deliveries_settled()
    stack.eventually(function()
      return sql("SELECT count(*) FROM jobs WHERE kind = 'deliver_event'") == "0"
    end, 30, 0.05, "the delivery jobs to finish")
  end

  setup(function()
    sgw = stack.start_sgw { name = "events", set = settings() }
    company = cli(sgw, { "company", "create", "--name", "Events Co" }).companyId
    local _, acc = api(new_client().apiKey, "POST", "/api/v1/sandbox/accounts", { platform = "facebook", name = "Events page" })
    account = acc.id
  end)

  teardown(function()
    stack.cleanup()
    stop_receivers()
  end)

  it("delivers social.post.published once, signed, with the contract's data", function()
    local r = start_receiver()
    local c = new_client(r.hook)
    assert.matches("^whsec_", c.webhookSecret)
    r.config({ secret = c.webhookSecret })
    local accepted = publish(c.apiKey, { externalReference = "order-17" })
    local d = wait_deliveries(r, 1)[1]
    assert.is_true(d.verified, d.reason)
    assert.are.equal("application/json", d.contentType)
    local ev = assert(cjson.decode(d.body))
    assert.matches("^evt_", ev.id)
    assert.are.equal(d.id, ev.id)
    assert.are.equal("social.post.published", ev.type)
    assert.are.equal("test", ev.environment)
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$", ev.createdAt)
    assert.are.equal(accepted.resource.postId, ev.data.postId)
    assert.are.equal("published", ev.data.status)
    assert.are.equal(accepted.operationId, ev.data.operationId)
    assert.are.equal("order-17", ev.data.externalReference)
    assert.are.equal(1, #ev.data.targets)
    assert.matches("^tgt_", ev.data.targets[1].postTargetId)
    assert.are.equal("published", ev.data.targets[1].status)
    assert.is_string(ev.data.targets[1].platformPostId)

    deliveries_settled()
    assert.are.equal(1, #r.deliveries())
    assert.are.equal("delivered|1|204", sql("SELECT outcome || '|' || attempt || '|' || status_code "
      .. "FROM webhook_deliveries WHERE event_id = '" .. ev.id .. "'"))
    local _, metrics = sgw:admin("GET", "/metrics")
    assert.truthy(metrics:find('sgw_webhook_deliveries_total{outcome="delivered"}', 1, true))
  end)

  it("retries a failing receiver with the same id and the same body bytes, and records each attempt", function()
    local r = start_receiver()
    local c = new_client(r.hook)
    r.config({ secret = c.webhookSecret, fail = 3 })
    publish(c.apiKey)
    local list = wait_deliveries(r, 4)
    for i, d in ipairs(list) do
      assert.is_true(d.verified, d.reason)
      assert.are.equal(list[1].id, d.id)
      assert.are.equal(list[1].body, d.body)
      assert.are.equal(i < 4 and 500 or 204, d.status)
    end
    local id = list[1].id
    stack.eventually(function()
      return sql("SELECT count(*) FROM webhook_deliveries WHERE event_id = '" .. id .. "'") == "4"
    end, 10, 0.1, "four recorded attempts")
    assert.are.equal("1 failed 500 true,2 failed 500 true,3 failed 500 true,4 delivered 204 false", sql(
      "SELECT string_agg(attempt || ' ' || outcome || ' ' || status_code || ' ' || (next_retry_at IS NOT NULL), ',' "
      .. "ORDER BY attempt) FROM webhook_deliveries WHERE event_id = '" .. id .. "'"))
  end)

  it("turns the endpoint off on 410 Gone and sends nothing more", function()
    local r = start_receiver()
    local c = new_client(r.hook)
    r.config({ secret = c.webhookSecret, gone = true })
    publish(c.apiKey)
    wait_deliveries(r, 1)
    stack.eventually(function()
      return sql("SELECT webhook_disabled_at IS NOT NULL FROM api_clients WHERE id = '" .. c.clientId .. "'") == "t"
    end, 10, 0.1, "the endpoint to be disabled")
    local later = publish(c.apiKey)
    wait_final(c.apiKey, later.operationId)
    deliveries_settled()
    assert.are.equal(1, #r.deliveries())
    assert.are.equal("2", sql("SELECT count(*) FROM events WHERE client_id = '" .. c.clientId .. "'"))
    assert.are.equal("gone", sql("SELECT string_agg(outcome, ',') FROM webhook_deliveries WHERE client_id = '"
      .. c.clientId .. "'"))
    -- Setting a URL again turns it back on.
    cli(sgw, { "client", "set-webhook", "--client", c.clientId, "--url", r.hook })
    assert.are.equal("f", sql("SELECT webhook_disabled_at IS NOT NULL FROM api_clients WHERE id = '" .. c.clientId .. "'"))
  end)

  it("issues a new secret with set-webhook, and sends nothing after --none", function()
    local r = start_receiver()
    local c = new_client(r.hook)
    local out = cli(sgw, { "client", "set-webhook", "--client", c.clientId, "--url", r.hook })
    assert.are.equal(c.clientId, out.clientId)
    assert.are.equal(r.hook, out.webhookUrl)
    assert.matches("^whsec_", out.webhookSecret)
    assert.are_not.equal(c.webhookSecret, out.webhookSecret)
    r.config({ secret = out.webhookSecret })
    publish(c.apiKey)
    local d = wait_deliveries(r, 1)[1]
    assert.is_true(d.verified, d.reason)
    assert.are.equal(204, d.status)

    local none = cli(sgw, { "client", "set-webhook", "--client", c.clientId, "--none" })
    assert.are.equal(cjson.null, none.webhookUrl)
    assert.are.equal(cjson.null, none.webhookSecret)
    local later = publish(c.apiKey)
    wait_final(c.apiKey, later.operationId)
    deliveries_settled()
    assert.are.equal(1, #r.deliveries())
    local code = sgw:command({ "client", "set-webhook", "--client", c.clientId })
    assert.are.equal(2, code)
  end)

  it("still delivers after sgw is killed between the commit and the delivery", function()
    local r = start_receiver()
    local c = new_client(r.hook)
    -- The first attempt hangs, so sgw dies with the delivery in flight.
    r.config({ secret = c.webhookSecret, hang = 1, hangSeconds = 20 })
    publish(c.apiKey)
    local first = wait_deliveries(r, 1)[1]
    assert.are.equal(137, sgw:kill())
    sgw = stack.start_sgw { name = "events-restarted", database_url = sgw.database_url, set = settings() }
    local list = wait_deliveries(r, 2, function(l) return l[#l].status == 204 end)
    local last = list[#list]
    assert.is_true(last.verified, last.reason)
    assert.are.equal(first.id, last.id)
    assert.are.equal(first.body, last.body)
  end)

  it("refuses private addresses when they are not allowed, at registration and at delivery", function()
    local r = start_receiver()
    local c = new_client(r.hook) -- registered while allowed
    r.config({ secret = c.webhookSecret })
    assert(sgw:stop())
    sgw = stack.start_sgw { name = "events-private", database_url = sgw.database_url,
      set = settings({ ["webhooks.allow_private_targets"] = false }) }

    local code, out = sgw:command({ "client", "create", "--company", company, "--environment", "test",
      "--scopes", SCOPES, "--webhook-url", r.hook })
    assert.are.equal(2, code)
    assert.matches("private", out)
    code = sgw:command({ "client", "set-webhook", "--client", c.clientId, "--url", r.hook })
    assert.are.equal(2, code)
    -- Other spellings of the loopback address are the loopback address.
    local port = r.hook:match("^http://[^/]+:(%d+)/")
    for _, host in ipairs { "127.1", "2130706433", "0x7f000001", "0177.0.0.1", "0x7f.0.0.1", "127.0.0.1." } do
      code, out = sgw:command({ "client", "set-webhook", "--client", c.clientId,
        "--url", "http://" .. host .. ":" .. port .. "/hook" })
      assert.are.equal(2, code, host)
      assert.matches("private, loopback or reserved address %(127%.0%.0%.1%)", out)
    end

    publish(c.apiKey)
    stack.eventually(function()
      return sql("SELECT count(*) FROM webhook_deliveries WHERE client_id = '" .. c.clientId .. "'") ~= "0"
    end, 30, 0.1, "a refused attempt to be recorded")
    assert.are.equal("failed||destination not allowed", sql("SELECT outcome || '|' || "
      .. "coalesce(status_code::text, '') || '|' || error FROM webhook_deliveries WHERE client_id = '"
      .. c.clientId .. "' ORDER BY attempt LIMIT 1"))
    assert.are.equal(0, #r.deliveries())
    -- The specs below send to loopback receivers again.
    assert(sgw:stop())
    sgw = stack.start_sgw { name = "events-again", database_url = sgw.database_url, set = settings() }
  end)

  it("tells tenants only the class of a failure, and logs the endpoint's origin, never its path", function()
    -- A port nothing listens on, and a URL that carries the tenant's token.
    local closed = stack.free_port()
    local c = new_client("http://127.0.0.1:" .. closed .. "/hooks/in?token=tenant-secret-17")
    publish(c.apiKey)
    stack.eventually(function()
      return sql("SELECT count(*) FROM webhook_deliveries WHERE client_id = '" .. c.clientId .. "'") ~= "0"
    end, 30, 0.1, "a failed attempt to be recorded")
    assert.are.equal("failed||connection failed", sql("SELECT outcome || '|' || "
      .. "coalesce(status_code::text, '') || '|' || error FROM webhook_deliveries WHERE client_id = '"
      .. c.clientId .. "' ORDER BY attempt LIMIT 1"))
    local line = stack.eventually(function()
      for l in sgw:log():gmatch("[^\n]+") do
        if l:find("webhook_delivery_failed", 1, true) and l:find(c.clientId, 1, true) then return l end
      end
    end, 10, 0.1, "the failed delivery's log line")
    assert.matches("http://127.0.0.1:" .. closed, line, 1, true)
    assert.is_nil(line:find("tenant-secret-17", 1, true))
    assert.is_nil(line:find("/hooks/in", 1, true))
    assert.is_nil(sgw:log():find("tenant-secret-17", 1, true))
    sql("UPDATE api_clients SET revoked_at = now() WHERE id = '" .. c.clientId .. "'")
  end)

  it("binds a webhook secret to its client: copied to another client it does not open", function()
    local r = start_receiver()
    local a = new_client(r.hook)
    local b = new_client(r.hook)
    r.config({ secret = b.webhookSecret })
    -- b's row now holds a's sealed secret: b's deliveries cannot be signed.
    sql("UPDATE api_clients SET webhook_secret_enc = (SELECT webhook_secret_enc FROM api_clients WHERE id = '"
      .. a.clientId .. "') WHERE id = '" .. b.clientId .. "'")
    publish(b.apiKey)
    stack.eventually(function()
      return sgw:log():find("does not decrypt", 1, true)
    end, 30, 0.1, "the delivery to fail on the secret")
    assert.are.equal(0, #r.deliveries())
    assert.are.equal("0", sql("SELECT count(*) FROM webhook_deliveries WHERE client_id = '" .. b.clientId .. "'"))
    sql("UPDATE api_clients SET revoked_at = now() WHERE id = '" .. b.clientId .. "'")
  end)

  it("keeps delivering with a secret sealed before the binding, and seals it again bound", function()
    local r = start_receiver()
    local c = new_client(r.hook)
    r.config({ secret = c.webhookSecret })
    -- What earlier versions stored: AES-256-GCM without associated data.
    local code, legacy = stack.sh("python3 -c " .. stack.shell_quote([[
import base64, os, sys
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
key, nonce = base64.b64decode(sys.argv[1]), os.urandom(12)
print(base64.b64encode(nonce + AESGCM(key).encrypt(nonce, sys.argv[2].encode(), None)).decode())
]]) .. " " .. stack.shell_quote(stack.ENCRYPTION_KEY) .. " " .. stack.shell_quote(c.webhookSecret))
    assert.are.equal(0, code, legacy)
    legacy = legacy:gsub("%s+$", "")
    sql("UPDATE api_clients SET webhook_secret_enc = '" .. legacy .. "' WHERE id = '" .. c.clientId .. "'")
    publish(c.apiKey)
    local d = wait_deliveries(r, 1)[1]
    assert.is_true(d.verified, d.reason)
    local now = sql("SELECT webhook_secret_enc FROM api_clients WHERE id = '" .. c.clientId .. "'")
    assert.are_not.equal(legacy, now)
    -- Bound now: copied to another client's row it no longer opens there.
    local other = new_client(r.hook)
    sql("UPDATE api_clients SET webhook_secret_enc = '" .. now .. "' WHERE id = '" .. other.clientId .. "'")
    local function refusals() return select(2, sgw:log():gsub("does not decrypt", "")) end
    local before = refusals()
    publish(other.apiKey)
    stack.eventually(function() return refusals() > before end, 30, 0.1, "the copied secret to be refused")
    assert.are.equal(1, #r.deliveries())
    -- Its job would keep trying: a revoked client's events are dropped.
    sql("UPDATE api_clients SET revoked_at = now() WHERE id = '" .. other.clientId .. "'")
  end)
end)

-- Events to clients' webhooks end to end: a post publishes and the receiver
-- (spec/support/webhook_receiver.py, which checks Standard Webhooks
-- signatures with its own code) gets social.post.published; retries send the
-- same bytes; 410 turns the endpoint off; a crash after the commit still
-- delivers; private addresses are refused at delivery time; a new URL gets a
-- new secret.
local stack = require "stack"
local cjson = require "cjson.safe"
local webhook_receivers = require "webhook_receivers"


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

local start_receiver = webhook_receivers.start
local stop_receivers = webhook_receivers.stop_all

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

    stack.sleep(1) -- nothing more arrives
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
    stack.sleep(1)
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
    stack.sleep(1)
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

    publish(c.apiKey)
    stack.eventually(function()
      return sql("SELECT count(*) FROM webhook_deliveries WHERE client_id = '" .. c.clientId .. "'") ~= "0"
    end, 30, 0.1, "a refused attempt to be recorded")
    assert.are.equal("failed||destination address not allowed", sql("SELECT outcome || '|' || "
      .. "coalesce(status_code::text, '') || '|' || error FROM webhook_deliveries WHERE client_id = '"
      .. c.clientId .. "' ORDER BY attempt LIMIT 1"))
    assert.are.equal(0, #r.deliveries())
  end)
end)

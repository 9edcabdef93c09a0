-- Identity and tenancy against the real stack: API keys in both headers,
-- OAuth client credentials, scopes, tenancy across companies and
-- environments, rotation with its grace period, revocation reaching every
-- instance at once, and secrets that never appear in clear.
local stack = require "stack"
local fixture_root = require "fixture_root"
local cjson = require "cjson.safe"

local ENCRYPTION_KEY = stack.ENCRYPTION_KEY

local function b64(s)
  local out = io.popen("printf '%s' '" .. s .. "' | base64 -w0"):read("a")
  return out
end

local cli = stack.cli

local function refused_401(status, body, headers)
  assert.are.equal(401, status, body)
  assert.are.equal("Bearer", headers["www-authenticate"])
  local p = cjson.decode(body)
  assert.are.equal("unauthenticated", p.code)
  assert.are.equal("application/problem+json", headers["content-type"])
  assert.is_truthy(headers["x-ratelimit-limit"])
  return p
end

describe("identity", function()
  local a, b, root
  local company_a, company_b, client_a, client_b, live_a, narrow_a

  setup(function()
    root = fixture_root.create("identity")
    local url = stack.migrated_database("identity")
    local set = {
      ["lua.root"] = root,
      ["clock.allow_control"] = true,
      ["crypto.encryption_key"] = ENCRYPTION_KEY,
      ["api.credential_cache_seconds"] = 600,   -- long: invalidation must come from the epoch
      ["api.rate_limit.anonymous_per_minute"] = 100000,
    }
    a = stack.start_sgw { name = "identity-a", database_url = url, set = set }
    b = stack.start_sgw { name = "identity-b", database_url = url, set = set, migrate = false }
    company_a = cli(a, { "company", "create", "--name", "Company A" }).companyId
    company_b = cli(a, { "company", "create", "--name", "Company B" }).companyId
    local all = "accounts:read posts:read posts:write comments:read comments:write operations:read uploads:write sandbox:write"
    client_a = cli(a, { "client", "create", "--company", company_a, "--environment", "test", "--scopes", all, "--name", "A test" })
    client_b = cli(a, { "client", "create", "--company", company_b, "--environment", "test", "--scopes", all, "--name", "B test" })
    live_a = cli(a, { "client", "create", "--company", company_a, "--environment", "live", "--scopes", all })
    narrow_a = cli(a, { "client", "create", "--company", company_a, "--environment", "test", "--scopes", "posts:read" })
    cli(a, { "account", "add", "--company", company_a, "--environment", "test", "--platform", "facebook",
      "--platform-account-id", "1001", "--name", "A test page", "--access-token", "EAA-secret-a-test" })
    cli(a, { "account", "add", "--company", company_a, "--environment", "live", "--platform", "instagram",
      "--platform-account-id", "17841400000000001", "--name", "A live IG", "--username", "a_live", "--access-token", "IGQ-secret-a-live" })
    cli(a, { "account", "add", "--company", company_b, "--environment", "test", "--platform", "facebook",
      "--platform-account-id", "2002", "--name", "B test page", "--access-token", "EAA-secret-b" })
  end)

  teardown(function() stack.cleanup() end)

  describe("the CLI", function()
    it("creates clients with keys and secrets of the documented shapes", function()
      assert.matches("^cmp_%w+$", company_a)
      assert.matches("^cli_%w+$", client_a.clientId)
      assert.matches("^sgk_test_%w+$", client_a.apiKey)
      assert.is_true(#client_a.apiKey >= #"sgk_test_" + 32)
      assert.matches("^sgs_test_%w+$", client_a.clientSecret)
      assert.matches("^sgk_live_%w+$", live_a.apiKey)
      assert.matches("^sgs_live_%w+$", live_a.clientSecret)
      assert.are.equal(cjson.null, client_a.webhookSecret) -- every key of the contract, null here
    end)

    it("gives a webhook secret when a webhook URL is set", function()
      local c = cli(a, { "client", "create", "--company", company_a, "--environment", "test", "--scopes", "posts:read",
        "--webhook-url", "https://hooks.example.com/sgw" })
      assert.matches("^whsec_", c.webhookSecret)
      local code, out = a:command { "client", "create", "--company", company_a, "--environment", "test",
        "--scopes", "posts:read", "--webhook-url", "http://127.0.0.1:9/x" }
      assert.are.equal(2, code)
      assert.truthy(out:find("private", 1, true), out)
    end)

    it("refuses unknown scopes and environments with a message", function()
      local code, out = a:command { "client", "create", "--company", company_a, "--environment", "test", "--scopes", "posts:read everything:write" }
      assert.are.equal(2, code)
      assert.truthy(out:find("everything:write", 1, true), out)
      code, out = a:command { "client", "create", "--company", company_a, "--environment", "prod", "--scopes", "posts:read" }
      assert.are.equal(2, code)
      assert.truthy(out:find("--environment", 1, true), out)
    end)

    it("stores only hashes of keys, secrets and platform tokens", function()
      local dump = select(2, stack.sh("pg_dump --data-only " .. stack.shell_quote(a.database_url)))
      assert.is_true(#dump > 1000)
      for _, secret in ipairs { client_a.apiKey, client_a.clientSecret, live_a.apiKey, "EAA-secret-a-test", "IGQ-secret-a-live" } do
        assert.is_nil(dump:find(secret, 1, true), "found in clear in the database")
      end
    end)
  end)

  describe("API keys", function()
    it("work in X-Api-Key and in Authorization: Bearer", function()
      local s1, body1 = a:json("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = client_a.apiKey } })
      local s2, body2 = a:json("GET", "/api/v1/social-accounts", { headers = { Authorization = "Bearer " .. client_a.apiKey } })
      assert.are.equal(200, s1)
      assert.are.equal(200, s2)
      assert.are.same(body1, body2)
      assert.are.equal(1, #body1.data)
      local acc = body1.data[1]
      assert.matches("^acc_", acc.id)
      assert.are.equal("facebook", acc.platform)
      assert.are.equal("A test page", acc.name)
      assert.are.equal("1001", acc.platformAccountId)
      assert.are.equal("test", acc.environment)
      assert.are.equal("active", acc.status)
      assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$", acc.connectedAt)
    end)

    it("are refused alike when missing, malformed, truncated, of a wrong prefix or unknown", function()
      local details = {}
      local cases = {
        {},
        { ["X-Api-Key"] = "" },
        { ["X-Api-Key"] = "hello" },
        { ["X-Api-Key"] = client_a.apiKey:sub(1, -5) },
        { ["X-Api-Key"] = client_a.apiKey:gsub("^sgk_test_", "sgk_prod_") },
        { ["X-Api-Key"] = "sgk_test_" .. string.rep("A", 40) },
        { ["X-Api-Key"] = string.rep("x", 5000) },
        { Authorization = "Basic " .. b64("a:b") },
        { Authorization = "Bearer" },
        { Authorization = "Bearer sgat_" .. string.rep("z", 48) },
      }
      for i, headers in ipairs(cases) do
        local status, body, h = a:request("GET", "/api/v1/social-accounts", { headers = headers })
        local p = refused_401(status, body, h)
        if i > 1 and not headers.Authorization then details[p.detail] = true end
      end
      -- every bad key reads the same: nothing tells whether a key exists
      local n = 0
      for _ in pairs(details) do n = n + 1 end
      assert.are.equal(1, n)
    end)

    it("refuses two different credentials in the two headers", function()
      refused_401(a:request("GET", "/api/v1/social-accounts", {
        headers = { ["X-Api-Key"] = client_a.apiKey, Authorization = "Bearer " .. client_b.apiKey } }))
      assert.are.equal(200, (a:request("GET", "/api/v1/social-accounts", {
        headers = { ["X-Api-Key"] = client_a.apiKey, Authorization = "Bearer " .. client_a.apiKey } })))
    end)

    it("are checked for scope, with the RFC 6750 challenge", function()
      local status, body, headers = a:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = narrow_a.apiKey } })
      assert.are.equal(403, status)
      assert.are.equal('Bearer error="insufficient_scope", scope="accounts:read"', headers["www-authenticate"])
      assert.are.equal("insufficient_scope", cjson.decode(body).code)
    end)

    it("are never logged", function()
      for _, inst in ipairs { a, b } do
        local log = inst:log()
        for _, secret in ipairs { client_a.apiKey, client_b.apiKey, client_a.clientSecret, "EAA-secret-a-test" } do
          assert.is_nil(log:find(secret, 1, true), "a secret appears in the log")
        end
      end
    end)
  end)

  describe("tenancy", function()
    it("shows each company only its own accounts, and each environment only its own", function()
      local _, body_a = a:json("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = client_a.apiKey } })
      local _, body_b = b:json("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = client_b.apiKey } })
      local _, body_live = a:json("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = live_a.apiKey } })
      assert.are.same({ "A test page" }, { body_a.data[1].name, body_a.data[2] and body_a.data[2].name })
      assert.are.same({ "B test page" }, { body_b.data[1].name, body_b.data[2] and body_b.data[2].name })
      assert.are.equal(1, #body_live.data)
      assert.are.equal("A live IG", body_live.data[1].name)
      assert.are.equal("live", body_live.data[1].environment)
      assert.are.equal("a_live", body_live.data[1].username)
    end)

    it("refuses a companyId anywhere in a body", function()
      local status, body = a:json("POST", "/test/items/x/notes/y", {
        body = { note = "hi", nested = { { companyId = company_b } }, companyId = company_b },
      })
      assert.are.equal(422, status)
      assert.are.equal("validation_failed", body.code)
      local fields = {}
      for _, e in ipairs(body.errors) do
        assert.are.equal("field_not_allowed", e.code)
        fields[e.field] = true
      end
      assert.are.same({ ["/companyId"] = true, ["/nested/0/companyId"] = true }, fields)
    end)
  end)

  describe("OAuth client credentials", function()
    local function token_request(inst, body, headers)
      headers = headers or {}
      headers["Content-Type"] = headers["Content-Type"] or "application/x-www-form-urlencoded"
      return inst:request("POST", "/oauth/token", { body = body, headers = headers })
    end

    local function basic(client)
      return { Authorization = "Basic " .. b64(client.clientId .. ":" .. client.clientSecret) }
    end

    it("issues a Bearer token for all the client's scopes, usable on the API", function()
      local status, body, headers = token_request(a, "grant_type=client_credentials", basic(client_a))
      assert.are.equal(200, status, body)
      assert.are.equal("no-store", headers["cache-control"])
      assert.is_truthy(headers["x-ratelimit-limit"])
      local t = cjson.decode(body)
      assert.are.equal("Bearer", t.token_type)
      assert.are.equal(3600, t.expires_in)
      assert.truthy(t.scope:find("accounts:read", 1, true))
      local s, list = b:json("GET", "/api/v1/social-accounts", { headers = { Authorization = "Bearer " .. t.access_token } })
      assert.are.equal(200, s)
      assert.are.equal("A test page", list.data[1].name)
    end)

    it("narrows to the requested scopes, with form-field client authentication", function()
      local status, body = token_request(a, "grant_type=client_credentials&scope=posts%3Aread&client_id="
        .. client_a.clientId .. "&client_secret=" .. client_a.clientSecret)
      assert.are.equal(200, status, body)
      local t = cjson.decode(body)
      assert.are.equal("posts:read", t.scope)
      local s, _, h = a:request("GET", "/api/v1/social-accounts", { headers = { Authorization = "Bearer " .. t.access_token } })
      assert.are.equal(403, s)
      assert.truthy(h["www-authenticate"]:find("insufficient_scope", 1, true))
    end)

    it("answers RFC 6749 errors", function()
      local function err(status, body, headers)
        local e = cjson.decode(body)
        assert.are.equal("no-store", headers["cache-control"])
        assert.is_string(e.error_description)
        return status, e.error, headers
      end
      local wrong = { clientId = client_a.clientId, clientSecret = client_b.clientSecret }
      local s, e, h = err(token_request(a, "grant_type=client_credentials", basic(wrong)))
      assert.are.same({ 401, "invalid_client" }, { s, e })
      assert.matches("^Basic", h["www-authenticate"])
      s, e = err(token_request(a, "grant_type=client_credentials"))
      assert.are.same({ 401, "invalid_client" }, { s, e })
      s, e = err(token_request(a, "grant_type=password", basic(client_a)))
      assert.are.same({ 400, "unsupported_grant_type" }, { s, e })
      s, e = err(token_request(a, "scope=posts%3Aread", basic(client_a)))
      assert.are.same({ 400, "invalid_request" }, { s, e })
      s, e = err(token_request(a, "grant_type=client_credentials&grant_type=client_credentials", basic(client_a)))
      assert.are.same({ 400, "invalid_request" }, { s, e })
      s, e = err(token_request(a, "grant_type=client_credentials&client_id=" .. client_a.clientId, basic(client_a)))
      assert.are.same({ 400, "invalid_request" }, { s, e })
      s, e = err(token_request(narrow_a and a, "grant_type=client_credentials&scope=accounts%3Aread", basic(narrow_a)))
      assert.are.same({ 400, "invalid_scope" }, { s, e })
      s, e = err(token_request(a, "grant_type=client_credentials&scope=nonsense%3Ascope", basic(client_a)))
      assert.are.same({ 400, "invalid_scope" }, { s, e })
      s, e = err(token_request(a, '{"grant_type":"client_credentials"}', { Authorization = basic(client_a).Authorization, ["Content-Type"] = "application/json" }))
      assert.are.same({ 400, "invalid_request" }, { s, e })
    end)

    it("expires tokens after oauth.token_ttl_seconds", function()
      local _, body = token_request(a, "grant_type=client_credentials", basic(client_b))
      local token = cjson.decode(body).access_token
      assert.are.equal(200, (a:request("GET", "/api/v1/social-accounts", { headers = { Authorization = "Bearer " .. token } })))
      local c = stack.start_sgw { name = "identity-clock", database_url = a.database_url, migrate = false,
        set = { ["lua.root"] = root, ["clock.allow_control"] = true, ["api.rate_limit.anonymous_per_minute"] = 100000 } }
      assert.are.equal(200, (c:request("GET", "/api/v1/social-accounts", { headers = { Authorization = "Bearer " .. token } })))
      assert.are.equal(200, (c:admin("POST", "/clock/advance?seconds=3601")))
      refused_401(c:request("GET", "/api/v1/social-accounts", { headers = { Authorization = "Bearer " .. token } }))
      c:stop()
    end)
  end)

  describe("rotation and revocation", function()
    it("keeps the previous key working for the grace period, then refuses it", function()
      local c = cli(a, { "client", "create", "--company", company_a, "--environment", "test", "--scopes", "accounts:read" })
      local clock = stack.start_sgw { name = "identity-rotate", database_url = a.database_url, migrate = false,
        set = { ["lua.root"] = root, ["clock.allow_control"] = true, ["api.rate_limit.anonymous_per_minute"] = 100000 } }
      assert.are.equal(200, (clock:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } })))
      local rotated = cli(a, { "client", "rotate-key", "--client", c.clientId })
      assert.matches("^sgk_test_", rotated.apiKey)
      assert.are_not.equal(c.apiKey, rotated.apiKey)
      assert.matches("^%d%d%d%d%-%d%d%-%d%dT.*Z$", rotated.previousKeyExpiresAt)
      for _, key in ipairs { c.apiKey, rotated.apiKey } do
        assert.are.equal(200, (clock:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = key } })))
      end
      -- the default grace is 24 h
      clock:admin("POST", "/clock/advance?seconds=" .. (23 * 3600))
      assert.are.equal(200, (clock:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } })))
      clock:admin("POST", "/clock/advance?seconds=" .. (2 * 3600))
      refused_401(clock:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } }))
      assert.are.equal(200, (clock:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = rotated.apiKey } })))
      clock:stop()
    end)

    it("revokes a client at once on every instance, keys and tokens alike", function()
      local c = cli(a, { "client", "create", "--company", company_b, "--environment", "test", "--scopes", "accounts:read" })
      local _, tbody = a:request("POST", "/oauth/token", { body = "grant_type=client_credentials",
        headers = { ["Content-Type"] = "application/x-www-form-urlencoded",
          Authorization = "Basic " .. b64(c.clientId .. ":" .. c.clientSecret) } })
      local token = cjson.decode(tbody).access_token
      -- warm both instances' caches
      for _ = 1, 3 do
        for _, inst in ipairs { a, b } do
          assert.are.equal(200, (inst:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } })))
          assert.are.equal(200, (inst:request("GET", "/api/v1/social-accounts", { headers = { Authorization = "Bearer " .. token } })))
        end
      end
      local out = cli(a, { "client", "revoke", "--client", c.clientId })
      assert.are.equal(c.clientId, out.clientId)
      for _, inst in ipairs { a, b } do
        for _ = 1, 4 do -- every worker of the instance, not just one
          refused_401(inst:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } }))
          refused_401(inst:request("GET", "/api/v1/social-accounts", { headers = { Authorization = "Bearer " .. token } }))
        end
      end
      local s, body = a:request("POST", "/oauth/token", { body = "grant_type=client_credentials",
        headers = { ["Content-Type"] = "application/x-www-form-urlencoded",
          Authorization = "Basic " .. b64(c.clientId .. ":" .. c.clientSecret) } })
      assert.are.equal(401, s)
      assert.are.equal("invalid_client", cjson.decode(body).error)
    end)

    it("revokes on every instance when the revoking command cannot reach Redis", function()
      local c = cli(a, { "client", "create", "--company", company_b, "--environment", "test", "--scopes", "accounts:read" })
      local function status(inst)
        return (inst:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } }))
      end
      for _ = 1, 3 do
        for _, inst in ipairs { a, b } do assert.are.equal(200, status(inst)) end
      end
      -- The command's own bump of the epoch finds no Redis; the job its
      -- transaction enqueued, run by an instance that reaches Redis, tells
      -- every instance (their caches would keep the key for 600 s).
      local code, out = a:command({ "client", "revoke", "--client", c.clientId },
        { "--set", "redis.url=redis://127.0.0.1:" .. stack.free_port() })
      assert.are.equal(0, code, out)
      for _, inst in ipairs { a, b } do
        stack.eventually(function() return status(inst) == 401 end, 15, 0.05, "the revoked key to be refused")
        for _ = 1, 4 do
          refused_401(inst:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } }))
        end
      end
    end)

    it("revokes at once a busy client whose requests are counted in rate-limit blocks", function()
      -- A limit this large lets workers take blocks of requests from Redis
      -- and serve from them without asking Redis each time.
      local c = cli(a, { "client", "create", "--company", company_b, "--environment", "test",
        "--scopes", "accounts:read", "--rate-limit", "1000000" })
      local function pipelined(inst)
        local _, text = inst:admin("GET", "/metrics")
        return tonumber(text:match("\nsgw_redis_pipelined_calls_total (%d+)")) or 0
      end
      local before = pipelined(a)
      for i = 1, 200 do
        local status, _, headers = a:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } })
        assert.are.equal(200, status)
        -- At a million a minute the bucket refills faster than these
        -- requests come: it stays (nearly) full, never above the limit.
        local remaining = tonumber(headers["x-ratelimit-remaining"])
        assert.is_true(remaining >= 1000000 - i and remaining < 1000000, "remaining " .. remaining .. " at request " .. i)
      end
      assert.is_true(pipelined(a) - before < 100, "blocks spare Redis most calls: " .. (pipelined(a) - before))
      for _ = 1, 50 do
        assert.are.equal(200, (b:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } })))
      end
      cli(a, { "client", "revoke", "--client", c.clientId })
      for _, inst in ipairs { a, b } do
        for _ = 1, 8 do
          refused_401(inst:request("GET", "/api/v1/social-accounts", { headers = { ["X-Api-Key"] = c.apiKey } }))
        end
      end
    end)
  end)
end)

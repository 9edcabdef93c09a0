-- Pure parts of identity: credential shapes, header parsing, scopes, forms,
-- webhook URL rules.
local fake = require "fake_host"
fake.install()

local scopes = require "scopes"
local form = require "form"
local credentials = require "credentials"
local auth = require "auth"
local webhook_url = require "webhook_url"

describe("credentials", function()
  it("recognises API keys by prefix and length", function()
    assert.are.equal("test", credentials.api_key_environment("sgk_test_" .. string.rep("a", 32)))
    assert.are.equal("live", credentials.api_key_environment("sgk_live_" .. string.rep("Z", 40)))
    assert.is_nil(credentials.api_key_environment("sgk_test_" .. string.rep("a", 31)))
    assert.is_nil(credentials.api_key_environment("sgk_prod_" .. string.rep("a", 40)))
    assert.is_nil(credentials.api_key_environment("sgk_test_" .. string.rep("a", 30) .. "-_"))
    assert.is_nil(credentials.api_key_environment("sgk_test_" .. string.rep("a", 300)))
  end)

  it("makes keys, secrets and ids of the documented shapes", function()
    local key = credentials.new_api_key("live")
    assert.matches("^sgk_live_%w+$", key)
    assert.are.equal("live", credentials.api_key_environment(key))
    assert.matches("^sgs_test_%w+$", credentials.new_client_secret("test"))
    assert.matches("^cli_%w+$", credentials.new_id("cli_"))
    assert.is_true(credentials.is_access_token(credentials.new_access_token()))
    assert.are.equal("sgk_live_" .. key:sub(10, 13), credentials.prefix_of(key))
  end)

  it("drops its cache whenever the epoch moves or cannot be read", function()
    assert.is_true(credentials.observe_epoch(1))
    assert.is_false(credentials.observe_epoch(1))
    assert.is_true(credentials.observe_epoch(2))
    assert.is_true(credentials.observe_epoch(nil))
  end)

  it("sends an identity cached before another worker dropped the cache back to the database", function()
    credentials.observe_epoch(7)
    local generation = shared.get("credentials:generation")
    assert.is_false(credentials.observe_epoch(7, generation))
    assert.is_true(credentials.observe_epoch(8))   -- another worker saw the change first
    assert.is_true(credentials.observe_epoch(8, generation))
    assert.is_false(credentials.observe_epoch(8, shared.get("credentials:generation")))
  end)
end)

describe("credentials.lookup's cache", function()
  local key = "sgk_test_" .. string.rep("c", 40)
  local queries
  before_each(function()
    queries = 0
    -- Digests need only be distinct here.
    crypto.sha256 = function(text) return "digest:" .. text end
    crypto.hex_encode = function(text) return (text:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end
    _G.db = { query = function(_, hash)
      queries = queries + 1
      return { { hash = hash, client_id = "cli_1", company_id = "cmp_1", environment = "test",
                 scopes = "posts:read", rate_limit_per_minute = 600 } }
    end }
  end)
  after_each(function() _G.db, crypto.sha256, crypto.hex_encode = nil, nil, nil end)

  it("asks the database once, then serves the identity until it expires or the cache is dropped", function()
    local a = assert(credentials.lookup(key, true))
    assert.are.equal("cli_1", a.client_id)
    assert.are.equal(1, queries)
    local b = assert(credentials.lookup(key, true))          -- from the store
    assert.are.same({ a.client_id, a.rate_limit, a.scope_list }, { b.client_id, b.rate_limit, b.scope_list })
    assert.are.equal(b, (credentials.lookup(key, true)))      -- this worker's copy of it, the same table
    assert.are.equal(1, queries)
    -- Another worker dropped the cache (a rotation it heard of): asked again.
    shared.incr("credentials:generation", 1, 0)
    assert(credentials.lookup(key, true))
    assert.are.equal(2, queries)
    assert(credentials.lookup(key, true))
    assert.are.equal(2, queries)
    -- Past api.credential_cache_seconds: asked again.
    clock.set(clock.now() + config.get("api.credential_cache_seconds") + 1)
    assert(credentials.lookup(key, true))
    assert.are.equal(3, queries)
  end)
end)

describe("auth.presented", function()
  local key = "sgk_test_" .. string.rep("k", 40)
  local function req(headers) return { headers = headers } end

  it("takes the key from X-Api-Key or Authorization: Bearer", function()
    assert.are.equal(key, auth.presented(req { ["x-api-key"] = key }))
    assert.are.equal(key, auth.presented(req { authorization = "Bearer " .. key }))
    assert.are.equal(key, auth.presented(req { authorization = "bearer   " .. key .. " " }))
    assert.are.equal(key, auth.presented(req { ["x-api-key"] = key, authorization = "Bearer " .. key }))
    assert.is_nil(auth.presented(req {}))
  end)

  it("refuses other schemes, two different credentials and empty ones", function()
    assert.is_false(auth.presented(req { authorization = "Basic YTpi" }))
    assert.is_false(auth.presented(req { authorization = "Bearer" }))
    assert.is_false(auth.presented(req { ["x-api-key"] = key, authorization = "Bearer other" }))
    assert.is_false(auth.presented(req { ["x-api-key"] = "  " }))
  end)

  -- Anyone can send these, before any limit applies: trimming them took
  -- steps in the square of their length (1.5 s of CPU for 16 KB of \v;
  -- hours for these).
  it("trims a megabyte of white space around a key, or of white space alone, in one pass", function()
    local run = string.rep("\v", 1024 * 1024)
    assert.is_false(auth.presented(req { ["x-api-key"] = run }))
    assert.are.equal(key, auth.presented(req { ["x-api-key"] = run .. key .. run }))
    assert.are.equal(key, auth.presented(req { authorization = "Bearer " .. key .. run }))
  end)
end)

describe("scopes", function()
  it("parses space-separated lists, keeping order and dropping repeats", function()
    assert.are.same({ "posts:read", "posts:write" }, scopes.parse("posts:read  posts:write posts:read"))
    assert.are.same({}, scopes.parse(""))
  end)

  it("names the first unknown scope", function()
    local list, unknown = scopes.parse("posts:read admin:all")
    assert.is_nil(list)
    assert.are.equal("admin:all", unknown)
  end)
end)

describe("form", function()
  it("decodes application/x-www-form-urlencoded", function()
    assert.are.same({ grant_type = "client_credentials", scope = "posts:read posts:write" },
      form.parse("grant_type=client_credentials&scope=posts%3Aread+posts%3Awrite"))
    assert.are.same({ a = "" }, form.parse("a="))
  end)

  it("refuses repeated fields and broken escapes", function()
    local f, err = form.parse("a=1&a=2")
    assert.is_nil(f)
    assert.truthy(err:find("repeated", 1, true))
    assert.is_nil(form.parse("a=%zz"))
    assert.is_nil(form.parse("a=%4"))
    assert.is_nil(form.parse(string.rep("a=1&", 60), 50))
  end)
end)

describe("webhook_url", function()
  it("accepts public http(s) URLs", function()
    assert.is_true(webhook_url.check("https://hooks.example.com/sgw?x=1"))
    assert.is_true(webhook_url.check("http://93.184.215.14:8080/hook"))
    -- Numbers in other spellings are public addresses too (8.8.8.8).
    assert.is_true(webhook_url.check("http://134744072/"))
    assert.is_true(webhook_url.check("http://0x08.0x08.0x08.0x08/"))
    assert.is_true(webhook_url.check("https://8.8.2056/"))
  end)

  it("reads numeric hosts the way resolvers do", function()
    local cases = {
      ["127.1"] = "127.0.0.1", ["2130706433"] = "127.0.0.1", ["0x7f000001"] = "127.0.0.1",
      ["0177.0.0.1"] = "127.0.0.1", ["0x7f.1"] = "127.0.0.1", ["127.0.1"] = "127.0.0.1",
      ["10.0.258"] = "10.0.1.2", ["0"] = "0.0.0.0", ["127.0.0.1."] = "127.0.0.1", ["017700000001"] = "127.0.0.1",
    }
    for host, want in pairs(cases) do
      assert.are.equal(want, table.concat(webhook_url.ipv4(host), "."), host)
    end
    assert.is_nil(webhook_url.ipv4("hooks.example.com"))
    assert.is_nil(webhook_url.ipv4("1.2.3.example"))
    assert.is_nil(webhook_url.ipv4("0x1g"))
    for _, host in ipairs { "256.1.1.1", "1.2.3.4.5", "1.2.65536", "4294967296", "08.1.1.1", "example.1" } do
      assert.is_false(webhook_url.ipv4(host), host)
    end
  end)

  it("refuses numeric spellings of private addresses, and every non-global range", function()
    for _, url in ipairs {
      "http://127.1/", "http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/", "http://0x7f.1:8080/",
      "http://167772161/", "http://0xa9fea9fe/latest", "http://192.0.0.8/", "http://198.18.0.1/",
      "http://240.0.0.1/", "http://255.255.255.255/", "http://224.0.0.1/", "http://100.64.0.1/",
      "http://203.0.113.7/", "http://256.1.1.1/", "http://127%2e0.0.1/", "http://localhost./",
    } do
      local ok, why = webhook_url.check(url)
      assert.is_nil(ok, url)
      assert.is_string(why, url)
    end
    local _, why = webhook_url.check("http://0x7f000001/")
    assert.matches("127.0.0.1", why, 1, true)
  end)

  it("refuses other schemes and private, loopback and link-local hosts", function()
    for _, url in ipairs {
      "ftp://example.com/", "example.com/hook", "http://127.0.0.1/", "http://localhost:3000/",
      "http://10.1.2.3/", "http://192.168.0.1/", "http://172.20.0.1/", "http://169.254.169.254/latest",
      "http://[::1]/", "https://user@127.0.0.1/", "https://" .. string.rep("a", 3000) .. ".com/",
    } do
      assert.is_nil(webhook_url.check(url), url)
    end
  end)
end)

-- The edge against the real stack: what an unauthenticated or slow caller
-- can make the process hold (401 before the body, the in-flight body budget,
-- the whole-body time limit, each address's share of that budget), the
-- client address behind trusted proxies,
-- token requests limited per client_id, and the admin listener's token.
local stack = require "stack"
local img = require "image_fixtures"
local socket = require "socket"
local cjson = require "cjson.safe"

local MiB = 1024 * 1024

local function rss_kib(pid)
  local f = assert(io.open("/proc/" .. pid .. "/status"))
  local text = f:read("a")
  f:close()
  return tonumber(text:match("VmRSS:%s*(%d+)"))
end

local function connect(inst)
  local c = assert(socket.tcp())
  c:settimeout(5)
  assert(c:connect("127.0.0.1", inst.http_port))
  return c
end

-- Reads a response's status line and headers (lower-case names).
local function read_head(c)
  local line, err = c:receive("*l")
  if not line then return nil, err end
  local status = tonumber(line:match("^HTTP/1%.1 (%d+)"))
  local headers = {}
  while true do
    local h = assert(c:receive("*l"))
    if h == "" then break end
    local k, v = h:match("^([^:]+):%s*(.*)$")
    headers[k:lower()] = v
  end
  return status, headers
end

local function read_response(c)
  local status, headers = read_head(c)
  if not status then return nil, headers end
  local body = ""
  local n = tonumber(headers["content-length"] or "0")
  if n > 0 then body = assert(c:receive(n)) end
  return status, headers, body
end

local function upload_head(len, key, extra)
  return "POST /api/v1/uploads HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\n"
    .. (key and ("X-Api-Key: " .. key .. "\r\n") or "") .. (extra or "")
    .. "Content-Length: " .. len .. "\r\n\r\n"
end

local function cli(inst, argv) return stack.cli(inst, argv) end

local function new_client(inst, scopes)
  local company = cli(inst, { "company", "create", "--name", "Edge" }).companyId
  return cli(inst, { "client", "create", "--company", company, "--environment", "test", "--scopes", scopes })
end

local function metric(inst, name)
  local _, text = inst:admin("GET", "/metrics")
  return text and tonumber(text:match("\n" .. name .. " ([%d.e+]+)\n"))
end

-- An instance for the body specs: anonymous requests unlimited, and `set`.
local function start_with_bodies(name, set)
  set["crypto.encryption_key"] = stack.ENCRYPTION_KEY
  set["api.rate_limit.anonymous_per_minute"] = 100000
  return stack.start_sgw { name = name, set = set }
end

describe("edge", function()
  teardown(function() stack.cleanup() end)

  describe("request bodies", function()
    local sgw, key

    setup(function()
      sgw = start_with_bodies("edge-bodies", {
        ["http.max_inflight_body_bytes"] = 2 * MiB,
        ["http.body_timeout_seconds"] = 2,
        ["http.connection_timeout_seconds"] = 30,
      })
      key = new_client(sgw, "uploads:write accounts:read posts:write").apiKey
    end)

    it("refuses 40 keyless 8 MiB uploads at their headers without holding their bodies", function()
      local before = rss_kib(sgw.pid)
      local len = 8 * MiB - 1
      local chunk = string.rep("\255", 64 * 1024)
      local conns = {}
      for i = 1, 40 do
        local c = connect(sgw)
        -- The headers and a first part of the body go out in one write (one
        -- segment on loopback) before the answer is read.
        local first = chunk:sub(1, 1024)
        assert(c:send(upload_head(len) .. first))
        local started = stack.now()
        local status, headers, body = read_response(c)
        assert.are.equal(401, status, "connection " .. i)
        assert.is_true(stack.now() - started < 2, "answered at once, not after the body")
        assert.are.equal("Bearer", headers["www-authenticate"])
        assert.are.equal("application/problem+json", headers["content-type"])
        assert.matches("^req_", headers["x-request-id"])
        assert.is_truthy(headers["x-ratelimit-limit"])
        assert.are.equal("close", headers["connection"])
        assert.are.equal("unauthenticated", cjson.decode(body).code)
        conns[i] = { c = c, sent = #first }
      end
      -- The callers go on sending the rest of their bodies: the server takes
      -- no more than its socket buffers before it closes.
      local deadline = stack.now() + 20
      local open = #conns
      while open > 0 and stack.now() < deadline do
        local writable = {}
        for _, k in ipairs(conns) do
          if not k.done then writable[#writable + 1] = k.c end
        end
        local _, ready = socket.select(nil, writable, 1)
        for _, k in ipairs(conns) do
          if not k.done and ready[k.c] then
            k.c:settimeout(0)
            local n, err, partial = k.c:send(chunk, 1, math.min(#chunk, len - k.sent))
            k.sent = k.sent + (n or partial or 0)
            if err == "closed" or k.sent >= len or (err and err ~= "timeout") then
              k.done = true
              open = open - 1
            end
          end
        end
      end
      local accepted = 0
      for _, k in ipairs(conns) do
        accepted = accepted + k.sent
        k.c:close()
      end
      assert.is_true(accepted < 40 * len / 4, "the server stopped reading (" .. accepted .. " bytes taken)")
      local grown = rss_kib(sgw.pid) - before
      -- Holding the bodies would take 320 MiB; a sanitizer build needs some room.
      assert.is_true(grown < 48 * 1024, "RSS grew by " .. grown .. " KiB")
      assert.are.equal(0, metric(sgw, "sgw_http_inflight_body_bytes"))
    end)

    it("refuses a malformed credential before the body, a well-formed unknown one after it", function()
      local c = connect(sgw)
      assert(c:send(upload_head(1000, "sgk_test_short")))
      local status, headers = read_response(c)
      assert.are.equal(401, status)
      assert.are.equal("Bearer", headers["www-authenticate"])
      c:close()
      -- Shaped like a key: its body is read, then it is looked up and refused.
      c = connect(sgw)
      local body = img.jpeg(8, 8)
      assert(c:send(upload_head(#body, "sgk_test_" .. string.rep("A", 40)) .. body))
      status = read_response(c)
      assert.are.equal(401, status)
      c:close()
      -- A GET without a key gets the same problem, on a connection kept open.
      local s, b, h = sgw:request("GET", "/api/v1/social-accounts")
      assert.are.equal(401, s)
      assert.are.equal("Bearer", h["www-authenticate"])
      assert.are.equal("unauthenticated", cjson.decode(b).code)
      s, b, h = sgw:request("GET", "/api/v1/social-accounts", { headers = { Authorization = "Basic Zm9vOmJhcg==" } })
      assert.are.equal(401, s)
    end)

    it("answers 503 with Retry-After beyond the in-flight body budget, and frees it", function()
      -- One upload holds 1.5 MiB of the 2 MiB budget while its body arrives.
      local holder = connect(sgw)
      assert(holder:send(upload_head(math.floor(1.5 * MiB), key) .. "\255\216"))
      stack.eventually(function() return metric(sgw, "sgw_http_inflight_body_bytes") == math.floor(1.5 * MiB) end,
        5, 0.02, "the first body to be counted")
      local c = connect(sgw)
      assert(c:send(upload_head(MiB, key)))
      local status, headers, body = read_response(c)
      assert.are.equal(503, status)
      assert.are.equal("1", headers["retry-after"])
      assert.are.equal("service_unavailable", cjson.decode(body).code)
      assert.is_truthy(headers["x-ratelimit-limit"])
      c:close()
      -- A chunked body is held to the budget as it grows.
      c = connect(sgw)
      assert(c:send("POST /api/v1/uploads HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nX-Api-Key: " .. key
        .. "\r\nTransfer-Encoding: chunked\r\n\r\n"))
      local piece = string.rep("\255", 256 * 1024)
      for _ = 1, 4 do assert(c:send(string.format("%x\r\n", #piece) .. piece .. "\r\n")) end
      assert(c:send("0\r\n\r\n"))
      status = read_response(c)
      assert.are.equal(503, status)
      c:close()
      holder:close()
      stack.eventually(function() return metric(sgw, "sgw_http_inflight_body_bytes") == 0 end,
        5, 0.02, "the budget to be given back")
      local jpeg = img.jpeg(640, 480)
      local s, b = sgw:request("POST", "/api/v1/uploads", { body = jpeg,
        headers = { ["X-Api-Key"] = key, ["Content-Type"] = "image/jpeg" } })
      assert.are.equal(201, s, b)
      assert.are.equal(#jpeg, cjson.decode(b).sizeBytes)
    end)

    it("ends a body that stalls or trickles at http.body_timeout_seconds", function()
      -- Stalled: 10 of 1,000 bytes, then nothing; the idle time-out is 30 s.
      local c = connect(sgw)
      c:settimeout(15)
      local started = stack.now()
      assert(c:send(upload_head(1000, key) .. "\255\216\255\224\0\16JFIF"))
      local line, err = c:receive("*l")
      local took = stack.now() - started
      assert.is_nil(line)
      assert.are.equal("closed", err)
      assert.is_true(took >= 1.5 and took < 5, "closed after " .. took .. " s")
      c:close()
      -- Trickling: a steady 200 bytes a second never idles, and is cut all the same.
      local dir = stack.build_dir() .. "/test-roots/edge-trickle-" .. sgw.http_port
      local q = stack.shell_quote
      assert(stack.sh("mkdir -p " .. q(dir)) == 0)
      local f = assert(io.open(dir .. "/body", "wb"))
      f:write(string.rep("x", 4000))
      f:close()
      started = stack.now()
      local _, out = stack.sh("curl -s -o /dev/null -w '%{http_code}' --limit-rate 200 -H 'Content-Type: image/jpeg' "
        .. "-H 'X-Api-Key: " .. key .. "' --data-binary @" .. q(dir .. "/body") .. " " .. sgw.base_url .. "/api/v1/uploads")
      took = stack.now() - started
      assert.are.equal("000", out, "no answer: the connection was closed")
      assert.is_true(took < 8, "cut after " .. took .. " s, not after the 20 s the body needs")
      assert.are.equal(0, metric(sgw, "sgw_http_inflight_body_bytes"))
    end)
  end)

  describe("behind a proxy", function()
    local proxied, direct

    setup(function()
      local set = { ["api.rate_limit.anonymous_per_minute"] = 2, ["crypto.encryption_key"] = stack.ENCRYPTION_KEY }
      set["http.trusted_proxies"] = "10.0.0.0/8, 127.0.0.1"
      proxied = stack.start_sgw { name = "edge-proxied", set = set }
      direct = stack.start_sgw { name = "edge-direct", set = {
        ["api.rate_limit.anonymous_per_minute"] = 2,
        ["http.trusted_proxies"] = "10.0.0.0/8",
      } }
    end)

    local function anon(inst, headers)
      return inst:request("GET", "/api/v1/openapi.json", { headers = headers })
    end

    it("gives each forwarded client address its own anonymous bucket", function()
      local a = { ["X-Forwarded-For"] = "198.51.100.1" }
      assert.are.equal(200, anon(proxied, a))
      assert.are.equal(200, anon(proxied, a))
      local s, _, h = anon(proxied, a)
      assert.are.equal(429, s)
      assert.is_truthy(h["retry-after"])
      -- Another client behind the same proxy is not refused.
      local s2, _, h2 = anon(proxied, { ["X-Forwarded-For"] = "198.51.100.2" })
      assert.are.equal(200, s2)
      assert.are.equal("1", h2["x-ratelimit-remaining"])
      -- A caller's own X-Forwarded-For entries sit left of what the proxy
      -- appended: the right-most address not a proxy of ours counts.
      assert.are.equal(429, anon(proxied, { ["X-Forwarded-For"] = "203.0.113.7, 198.51.100.1" }))
      assert.are.equal(429, anon(proxied, { ["X-Forwarded-For"] = "198.51.100.1, 10.1.2.3" }))
      -- RFC 7239 Forwarded, when there is no X-Forwarded-For.
      assert.are.equal(200, anon(proxied, { Forwarded = 'for="[2001:db8::7]:4711";proto=https' }))
      assert.are.equal(200, anon(proxied, { Forwarded = 'for="[2001:db8::7]:4711";proto=https' }))
      assert.are.equal(429, anon(proxied, { Forwarded = "for=192.0.2.9, for=\"[2001:db8::7]\"" }))
    end)

    it("ignores the headers from a peer that is not a trusted proxy", function()
      assert.are.equal(200, anon(direct, { ["X-Forwarded-For"] = "198.51.100.11" }))
      assert.are.equal(200, anon(direct, { ["X-Forwarded-For"] = "198.51.100.12" }))
      assert.are.equal(429, anon(direct, { ["X-Forwarded-For"] = "198.51.100.13" }))
      assert.are.equal(429, anon(direct, { Forwarded = "for=198.51.100.14" }))
    end)

    it("refuses a trusted_proxies entry that is not an address", function()
      local ok, err = pcall(stack.start_sgw, { name = "edge-bad-proxies", set = { ["http.trusted_proxies"] = "10.0.0.0/33" } })
      assert.is_false(ok)
      assert.matches("http.trusted_proxies", tostring(err))
    end)
  end)

  describe("an address's share of the body budget", function()
    local sgw
    local MADE_UP = "sgk_test_" .. string.rep("Z", 40)

    setup(function()
      sgw = start_with_bodies("edge-body-share", {
        ["http.max_inflight_body_bytes"] = 16 * MiB,
        ["http.max_inflight_body_bytes_per_address"] = 2 * MiB,
        ["http.trusted_proxies"] = "127.0.0.1",
        ["http.body_timeout_seconds"] = 20,
        ["http.connection_timeout_seconds"] = 30,
      })
    end)

    local function from(addr) return "X-Forwarded-For: " .. addr .. "\r\n" end

    -- Starts an upload from addr whose body then stalls: it holds len bytes.
    local function hold(addr, len)
      local c = connect(sgw)
      assert(c:send(upload_head(len, MADE_UP, from(addr)) .. "\255\216"))
      return c
    end

    -- The answer to the headers of an upload from addr, sent alone.
    local function refused_at_headers(addr, len)
      local c = connect(sgw)
      assert(c:send(upload_head(len, MADE_UP, from(addr))))
      local status, headers, body = read_response(c)
      c:close()
      assert.are.equal(503, status, addr)
      assert.are.equal("1", headers["retry-after"])
      assert.are.equal("service_unavailable", cjson.decode(body).code)
    end

    -- A whole upload from addr under the made-up key: its body was taken
    -- (then the key was looked up and refused), so it was within the share.
    local function taken(addr)
      local jpeg = img.jpeg(64, 64)
      local c = connect(sgw)
      assert(c:send(upload_head(#jpeg, MADE_UP, from(addr)) .. jpeg))
      local status = read_response(c)
      c:close()
      assert.are.equal(401, status, addr)
    end

    local function held_bytes(n)
      stack.eventually(function() return metric(sgw, "sgw_http_inflight_body_bytes") == n end,
        5, 0.02, n .. " bytes of bodies held")
    end

    it("keeps one address's stalled bodies under made-up keys from taking the budget of others", function()
      local held = { hold("198.51.100.20", MiB), hold("198.51.100.20", MiB) }
      held_bytes(2 * MiB)
      refused_at_headers("198.51.100.20", MiB)
      -- Another address still sends bodies, and a real client uploads.
      taken("198.51.100.21")
      local key = new_client(sgw, "uploads:write").apiKey
      local jpeg = img.jpeg(640, 480)
      local s, b = sgw:request("POST", "/api/v1/uploads", { body = jpeg,
        headers = { ["X-Api-Key"] = key, ["Content-Type"] = "image/jpeg", ["X-Forwarded-For"] = "198.51.100.22" } })
      assert.are.equal(201, s, b)
      -- One IPv6 /64 is one share, whichever of its addresses sends.
      held[3] = hold("2001:db8:5:6::1", 2 * MiB)
      held_bytes(4 * MiB)
      refused_at_headers("2001:db8:5:6:ffff::99", MiB)
      taken("2001:db8:5:7::1")
      -- Given back when the connections go: the share is whole again.
      for _, c in ipairs(held) do c:close() end
      held_bytes(0)
      taken("198.51.100.20")
      taken("2001:db8:5:6::1")
    end)
  end)

  describe("token requests", function()
    local sgw, a, b

    setup(function()
      sgw = stack.start_sgw { name = "edge-oauth", set = {
        ["oauth.rate_limit_per_minute"] = 3,
        ["api.rate_limit.anonymous_per_minute"] = 30,
        ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
      } }
      a = new_client(sgw, "accounts:read")
      b = new_client(sgw, "accounts:read")
    end)

    local function token(body)
      return sgw:request("POST", "/oauth/token", { body = body,
        headers = { ["Content-Type"] = "application/x-www-form-urlencoded" } })
    end

    local function valid(client)
      return token("grant_type=client_credentials&client_id=" .. client.clientId .. "&client_secret=" .. client.clientSecret)
    end

    it("limits per client_id: 61 junk requests from one address do not refuse a valid client", function()
      local refused = 0
      for i = 1, 61 do
        local junk = ({ "grant_type=client_credentials",
          "grant_type=client_credentials&client_id=nonsense&client_secret=x",
          "grant_type=client_credentials&client_id=cli_" .. i .. "unknown&client_secret=sgs_test_x" })[i % 3 + 1]
        local s = token(junk)
        assert.is_true(s == 401 or s == 429, "junk answered " .. tostring(s))
        if s == 429 then refused = refused + 1 end
      end
      assert.is_true(refused > 0, "junk without a client_id is limited per address")
      local s, body, h = valid(a)
      assert.are.equal(200, s, body)
      assert.are.equal("3", h["x-ratelimit-limit"])
      assert.are.equal(200, valid(a))
      assert.are.equal(200, valid(a))
      -- Its own allowance is spent; another client's is not.
      local s4, _, h4 = valid(a)
      assert.are.equal(429, s4)
      assert.is_truthy(h4["retry-after"])
      assert.are.equal(200, valid(b))
    end)
  end)

  describe("admin listener", function()
    local TOKEN = "adm_" .. string.rep("k", 40)
    local sgw

    setup(function()
      sgw = stack.start_sgw { name = "edge-admin", wait_for = false, set = { ["admin.token"] = TOKEN } }
      stack.wait_port(sgw.admin_port, "the admin listener")
    end)

    it("requires admin.token as a Bearer token when it is set", function()
      local auth = { Authorization = "Bearer " .. TOKEN }
      stack.eventually(function() return sgw:admin("GET", "/healthz", { headers = auth }) == 200 end,
        15, 0.1, "healthz with the token")
      for _, path in ipairs { "/healthz", "/readyz", "/metrics" } do
        local s, body, h = sgw:admin("GET", path)
        assert.are.equal(401, s, path)
        assert.matches("^Bearer", h["www-authenticate"])
        assert.is_nil(body:find("sgw_", 1, true))
        assert.are.equal(401, sgw:admin("GET", path, { headers = { Authorization = "Bearer " .. TOKEN .. "x" } }))
        assert.are.equal(401, sgw:admin("GET", path, { headers = { Authorization = "Bearer " .. TOKEN:sub(1, -2) } }))
      end
      local s, text = sgw:admin("GET", "/metrics", { headers = auth })
      assert.are.equal(200, s)
      assert.matches("sgw_http_inflight_requests", text)
      -- `sgw reload` reads the token from the same configuration.
      local code, out = sgw:reload()
      assert.are.equal(0, code, out)
    end)
  end)
end)

-- The client examples (examples/) run as a developer would run them, against
-- a real sgw with a sandbox company: each publish example takes an image post
-- to `published` and prints the permalinks, and each verify example receives
-- the real signed social.post.published event of that post and refuses a
-- tampered delivery with 400. The Node examples need `npm ci` in
-- examples/node (scripts/dev does it).
local stack = require "stack"
local cjson = require "cjson.safe"

local q = stack.shell_quote
local SCOPES = "accounts:read posts:read posts:write operations:read uploads:write sandbox:write"

local EXAMPLES = {
  { name = "python", publish = "/usr/bin/python3 examples/python/publish_and_follow.py",
    verify = "/usr/bin/python3 examples/python/verify_webhook.py" },
  { name = "node", publish = "node examples/node/publish_and_follow.mjs",
    verify = "node examples/node/verify_webhook.mjs" },
}

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

-- A Standard Webhooks signature of `body`, computed apart from sgw and the examples.
local function sign(secret, id, ts, body)
  local code, out = stack.sh("printf %s " .. q(body) .. " | python3 -c " .. q([[
import base64, hashlib, hmac, sys
key = base64.b64decode(sys.argv[1][len("whsec_"):])
print(base64.b64encode(hmac.new(key, (sys.argv[2] + "." + sys.argv[3] + ".").encode() + sys.stdin.buffer.read(),
  hashlib.sha256).digest()).decode())]]) .. " " .. q(secret) .. " " .. q(id) .. " " .. q(ts))
  assert(code == 0, out)
  return "v1," .. out:gsub("%s+$", "")
end

describe("the client examples", function()
  local sgw, company, logs
  local pids = {}

  setup(function()
    assert(read_file("examples/node/node_modules/standardwebhooks/package.json") ~= "",
      "examples/node/node_modules is missing: run `npm ci` in examples/node (scripts/dev test does)")
    sgw = stack.start_sgw { name = "examples", set = {
      ["crypto.encryption_key"] = stack.ENCRYPTION_KEY,
      ["webhooks.allow_private_targets"] = true,
      ["api.rate_limit.per_minute"] = 100000,
      ["jobs.poll_interval_ms"] = 100,
    } }
    company = stack.cli(sgw, { "company", "create", "--name", "Examples Co" }).companyId
    logs = stack.build_dir() .. "/test-logs"
    os.execute("mkdir -p " .. q(logs))
  end)

  teardown(function()
    for _, pid in ipairs(pids) do os.execute("kill " .. pid .. " 2>/dev/null") end
    stack.cleanup()
  end)

  for _, ex in ipairs(EXAMPLES) do
    it("in " .. ex.name .. ": publish a post to the end and verify its signed event", function()
      -- The receiver first, on a port of its own; its client's webhook points at it.
      local port = stack.free_port()
      local client = stack.cli(sgw, { "client", "create", "--company", company, "--environment", "test",
        "--scopes", SCOPES, "--webhook-url", "http://127.0.0.1:" .. port .. "/hook" })
      local headers = { ["X-Api-Key"] = client.apiKey }
      for _, platform in ipairs({ "facebook", "instagram" }) do
        local status, acc = sgw:json("POST", "/api/v1/sandbox/accounts", { headers = headers,
          body = { platform = platform, name = "Examples " .. ex.name .. " " .. platform } })
        assert.are.equal(201, status, cjson.encode(acc))
      end

      local log = logs .. "/example-" .. ex.name .. "-verify-" .. port .. ".log"
      -- `timeout`: should this spec die, the receiver does not outlive it for long.
      local code, out = stack.sh("SGW_WEBHOOK_SECRET=" .. q(client.webhookSecret) .. " timeout 300 " .. ex.verify
        .. " " .. port .. " > " .. q(log) .. " 2>&1 < /dev/null & echo $!")
      assert(code == 0, out)
      pids[#pids + 1] = tonumber(out:match("%d+"))
      stack.eventually(function() return read_file(log):find("listening on", 1, true) end, 15, 0.05,
        ex.name .. " receiver to listen")

      local started = stack.now()
      code, out = stack.sh("SGW_BASE_URL=" .. q(sgw.base_url) .. " SGW_API_KEY=" .. q(client.apiKey)
        .. " SGW_DEADLINE_SECONDS=60 " .. ex.publish .. " scripts/demo.jpg")
      assert.are.equal(0, code, out)
      assert.truthy(out:find("uploaded upl_", 1, true), out)
      local post = assert(out:match("post (%S+) accepted"), out)
      assert.truthy(out:find("final status: published", 1, true), out)
      local base = sgw.base_url:gsub("%p", "%%%0")
      for _, platform in ipairs({ "facebook", "instagram" }) do
        assert.truthy(out:find("tgt_%w+ " .. platform .. " published permalink: " .. base .. "/sandbox/posts/%w+"), out)
      end
      assert.is_true(stack.now() - started < 60)

      -- The real event of that post, verified by the example.
      local verified = stack.eventually(function()
        return read_file(log):match("verified social%.post%.published (evt_%w+)")
      end, 30, 0.05, ex.name .. " receiver to verify social.post.published")
      local event = assert(stack.psql(sgw.database_url, "SELECT data->>'postId' FROM events WHERE id = '"
        .. verified .. "'"))
      assert.are.equal(post, event)

      -- A delivery whose body changed after signing is refused.
      local ts = tostring(os.time())
      local body = cjson.encode({ id = "evt_forged", type = "social.post.published", data = { postId = post } })
      local status = stack.request("POST", "http://127.0.0.1:" .. port .. "/hook", {
        body = body:gsub("published", "failed"),
        headers = { ["Content-Type"] = "application/json", ["webhook-id"] = "evt_forged",
          ["webhook-timestamp"] = ts, ["webhook-signature"] = sign(client.webhookSecret, "evt_forged", ts, body) } })
      assert.are.equal(400, status)
      -- And so is one signed with another secret.
      status = stack.request("POST", "http://127.0.0.1:" .. port .. "/hook", { body = body,
        headers = { ["Content-Type"] = "application/json", ["webhook-id"] = "evt_forged", ["webhook-timestamp"] = ts,
          ["webhook-signature"] = sign("whsec_" .. string.rep("A", 43) .. "=", "evt_forged", ts, body) } })
      assert.are.equal(400, status)
      local lines = read_file(log)
      assert.truthy(lines:find("refused:", 1, true), lines)
      assert.is_nil(lines:find("verified social.post.failed", 1, true))
      assert.is_nil(lines:find("evt_forged", 1, true))
    end)
  end
end)

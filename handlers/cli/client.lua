-- sgw client create --company ID --environment test|live --scopes "s1 s2" [--name N] [--webhook-url URL] [--rate-limit N]
--   -> {"clientId","apiKey","clientSecret","webhookSecret"}
-- sgw client rotate-key --client ID  -> {"apiKey","previousKeyExpiresAt"}
-- sgw client revoke --client ID      -> {"clientId","revokedAt"}
-- sgw client set-webhook --client ID --url URL|--none
--   -> {"clientId","webhookUrl","webhookSecret"} (a new secret with every URL)
local cli = require "cli"
local credentials = require "credentials"
local json = require "json"
local scopes = require "scopes"
local webhook_url = require "webhook_url"
local webhooks = require "webhooks"

local usage = [[usage:
  sgw client create --company ID --environment test|live --scopes "s1 s2" [--name N] [--webhook-url URL] [--rate-limit N]
  sgw client rotate-key --client ID
  sgw client revoke --client ID
  sgw client set-webhook --client ID --url URL|--none]]

local function create(flags)
  if not flags.company then return cli.fail("--company is required\n" .. usage, 2) end
  local env = flags.environment
  if env ~= "test" and env ~= "live" then return cli.fail("--environment must be test or live", 2) end
  local list, unknown = scopes.parse(flags.scopes)
  if not list then
    return cli.fail("unknown scope '" .. unknown .. "'; known: " .. table.concat(scopes.all, " "), 2)
  end
  if #list == 0 then return cli.fail("--scopes needs at least one scope; known: " .. table.concat(scopes.all, " "), 2) end
  local rate_limit
  if flags["rate-limit"] then
    rate_limit = math.tointeger(tonumber(flags["rate-limit"]))
    if not rate_limit or rate_limit < 1 then return cli.fail("--rate-limit must be a positive whole number", 2) end
  end
  if flags["webhook-url"] then
    local ok, why = webhook_url.check(flags["webhook-url"])
    if not ok then return cli.fail("--webhook-url: " .. why, 2) end
  end
  local name = flags.name or ("Client " .. os.date("!%Y-%m-%d %H:%M"))
  if #name > 200 then return cli.fail("--name is longer than 200 characters", 2) end
  local rows = assert(db.query("SELECT id FROM companies WHERE id = $1", flags.company))
  if not rows[1] then return cli.fail("no company " .. flags.company) end
  local out, err = credentials.create_client({
    company_id = flags.company, environment = env, scopes = list, name = name,
    rate_limit = rate_limit, webhook_url = flags["webhook-url"],
  })
  if not out then return cli.fail(err) end
  out.webhookSecret = out.webhookSecret or json.null -- every key of the contract, null when there is none
  return cli.ok(out)
end

local function set_webhook(flags, none)
  if not flags.client then return cli.fail("--client is required\n" .. usage, 2) end
  if none == (flags.url ~= nil) then return cli.fail("give either --url URL or --none\n" .. usage, 2) end
  if flags.url then
    local ok, why = webhook_url.check(flags.url)
    if not ok then return cli.fail("--url: " .. why, 2) end
  end
  local out, err = webhooks.set_endpoint(flags.client, flags.url)
  if not out then return cli.fail(err) end
  return cli.ok({ clientId = out.clientId, webhookUrl = out.webhookUrl or json.null,
    webhookSecret = out.webhookSecret or json.null })
end

return function(args)
  -- --none is the one flag without a value, which cli.parse does not know.
  local none, rest = false, {}
  for _, a in ipairs(args) do
    if a == "--none" then none = true else rest[#rest + 1] = a end
  end
  local pos, flags = cli.parse(rest, {
    company = true, environment = true, scopes = true, name = true,
    ["webhook-url"] = true, ["rate-limit"] = true, client = true, url = true,
  })
  if not pos then return cli.fail(flags .. "\n" .. usage, 2) end
  local ok, err = cli.need_database()
  if not ok then return cli.fail(err) end
  local verb = pos[1]
  if verb == "create" then return create(flags) end
  if verb == "set-webhook" then return set_webhook(flags, none) end
  if verb == "rotate-key" or verb == "revoke" then
    if not flags.client then return cli.fail("--client is required\n" .. usage, 2) end
    local out, rerr
    if verb == "rotate-key" then out, rerr = credentials.rotate_key(flags.client)
    else out, rerr = credentials.revoke_client(flags.client) end
    if not out then return cli.fail(rerr) end
    return cli.ok(out)
  end
  return cli.fail(usage, 2)
end

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

local function create(flags)
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

local function set_webhook(flags)
  if (flags.none ~= nil) == (flags.url ~= nil) then
    return cli.fail("give either --url URL or --none; see sgw client set-webhook --help", 2)
  end
  if flags.url then
    local ok, why = webhook_url.check(flags.url)
    if not ok then return cli.fail("--url: " .. why, 2) end
  end
  local out, err = webhooks.set_endpoint(flags.client, flags.url)
  if not out then return cli.fail(err) end
  return cli.ok({ clientId = out.clientId, webhookUrl = out.webhookUrl or json.null,
    webhookSecret = out.webhookSecret or json.null })
end

-- Every verb works on the database.
local function with_database(run)
  return function(flags)
    local ok, err = cli.need_database()
    if not ok then return cli.fail(err) end
    return run(flags)
  end
end

local function answer(out, err)
  if not out then return cli.fail(err) end
  return cli.ok(out)
end

local CLIENT = { "client", "ID", "the client's id", required = true }

return cli.command {
  name = "client", summary = "API clients: the credentials a company's programs call the API with.",
  subcommands = {
    { name = "create", summary = "create a client; prints its id, API key, secret and webhook secret once",
      flags = {
        { "company", "ID", "the company it belongs to", required = true },
        { "environment", "test|live", "test: the sandbox; live: Meta", required = true },
        { "scopes", "\"S1 S2\"", "space-separated scopes (" .. table.concat(scopes.all, " ") .. ")", required = true },
        { "name", "NAME", "what it is called, up to 200 characters", default = "Client <UTC date and time>" },
        { "webhook-url", "URL", "where its events are delivered (https)", default = "none" },
        { "rate-limit", "N", "requests per minute", default = "api.rate_limit.per_minute" },
      },
      run = with_database(create) },
    { name = "rotate-key", summary = "issue a new API key; the previous one works for api.key_rotation_grace_hours",
      flags = { CLIENT }, run = with_database(function(flags) return answer(credentials.rotate_key(flags.client)) end) },
    { name = "revoke", summary = "revoke a client: its keys and tokens stop working at once",
      flags = { CLIENT }, run = with_database(function(flags) return answer(credentials.revoke_client(flags.client)) end) },
    { name = "set-webhook", summary = "set or remove the client's webhook URL (a new signing secret with every URL)",
      flags = { CLIENT, { "url", "URL", "the new webhook URL (https)" }, { "none", nil, "remove the webhook instead" } },
      run = with_database(set_webhook) },
  },
}

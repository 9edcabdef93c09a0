-- sgw account add --company ID --environment live|test --platform facebook|instagram
--   --platform-account-id ID --name N [--username U] --access-token T
--   [--page-id PAGE] [--facebook-user-id ID]  ->  {"accountId"}
-- A live account's Page is subscribed to the app's webhooks (for Instagram,
-- the linked Page given by --page-id); a failed subscription is said on
-- standard error and the account stays connected (lib/meta_subscriptions.lua).
-- A live account's token is first described by Meta's debug_token when the
-- Meta app is set: one Meta calls invalid is refused (every call would fail
-- with 190), so is a user token for a Facebook Page (Meta wants the Page's
-- own token: "(#200) ... posted to a page as the page itself") and another
-- Page's token (debug_token's profile_id); one that expires is connected
-- with a warning (a Page token taken from a short-lived user token lasts an
-- hour). When Meta cannot be asked, the account is connected unchecked,
-- with a warning.
-- --facebook-user-id: the Facebook user whose consent gave the token (Meta's
-- deauthorize and data-deletion callbacks find the account by it). Without
-- it, debug_token's user_id is taken; unknown when there is none.
local cli = require "cli"
local accounts = require "accounts"
local subscriptions = require "meta_subscriptions"
local token_check = require "token_check"

-- What debug_token says of a live account's token: its data (nil when
-- Meta could not be asked) and a warning for standard error, or nil, nil and
-- why it is refused.
local function described_token(flags)
  local asked, data, err = pcall(token_check.debug_token, flags["access-token"])
  if not (asked and data) then
    return nil, "connected without checking its token: Meta's debug_token did not answer ("
      .. tostring(asked and err.message or data) .. "); the periodic token check asks again"
  end
  if data.is_valid == false then
    local e = type(data.error) == "table" and data.error or {}
    return nil, nil, "Meta says this access token is not valid (" .. tostring(e.message or "is_valid: false")
      .. "); nothing was connected. Give a current token of the account."
  end
  if flags.platform == "facebook" and data.type == "USER" then
    return nil, nil, "this is a user access token; a Facebook Page publishes only with its own Page token "
      .. "(GET /" .. flags["platform-account-id"] .. "?fields=access_token with this user token gives it); "
      .. "nothing was connected"
  end
  -- A Page token names its Page (profile_id): another Page's token would be
  -- refused on every call.
  local page = flags.platform == "facebook" and flags["platform-account-id"] or flags["page-id"]
  if data.type == "PAGE" and data.profile_id ~= nil and page and tostring(data.profile_id) ~= page then
    return nil, nil, "this is the Page token of Page " .. tostring(data.profile_id) .. ", not of Page " .. page
      .. "; nothing was connected"
  end
  local expires = math.tointeger(tonumber(data.expires_at))
  if expires and expires > 0 then
    return data, "the token expires at " .. os.date("!%Y-%m-%dT%H:%M:%SZ", expires) .. " (a Page token taken "
      .. "from a short-lived user token lasts an hour; one taken from a long-lived user token does not expire)"
  end
  return data
end

local function add(flags)
  if flags.environment ~= "live" and flags.environment ~= "test" then return cli.fail("--environment must be live or test", 2) end
  if flags.platform ~= "facebook" and flags.platform ~= "instagram" then return cli.fail("--platform must be facebook or instagram", 2) end
  if not flags["platform-account-id"]:match("^[%w_.-]+$") or #flags["platform-account-id"] > 64 then
    return cli.fail("--platform-account-id must be the platform's id (letters, digits, _ . -)", 2)
  end
  local page_id = flags["page-id"]
  if page_id and not page_id:match("^%d+$") or page_id and #page_id > 64 then
    return cli.fail("--page-id must be the Facebook Page's numeric id", 2)
  end
  if flags.platform == "facebook" then
    if page_id and page_id ~= flags["platform-account-id"] then
      return cli.fail("--page-id is for Instagram accounts: a Facebook account is its own Page", 2)
    end
    page_id = flags["platform-account-id"]
  end
  if #flags.name > 200 then return cli.fail("--name is longer than 200 characters", 2) end
  local fb_user = flags["facebook-user-id"]
  if fb_user and not (fb_user:match("^%d+$") and #fb_user <= 64) then
    return cli.fail("--facebook-user-id must be the user's numeric id", 2)
  end
  local ok, err = cli.need_database()
  if not ok then return cli.fail(err) end
  local rows = assert(db.query("SELECT id FROM companies WHERE id = $1", flags.company))
  if not rows[1] then return cli.fail("no company " .. flags.company) end
  local warnings = {}
  if flags.environment == "live" and token_check.app_token() then
    local data, warning, refusal = described_token(flags)
    if refusal then return cli.fail(refusal) end
    warnings[#warnings + 1] = warning
    if not fb_user and data and type(data.user_id) == "string" then fb_user = data.user_id end
  end
  local id, aerr = accounts.add({
    company_id = flags.company, environment = flags.environment, platform = flags.platform,
    platform_account_id = flags["platform-account-id"], name = flags.name, username = flags.username,
    access_token = flags["access-token"], connected_by_fb_user = fb_user,
  })
  if not id then return cli.fail("could not add the account: " .. aerr) end
  if flags.environment == "live" then
    local subscribed, serr = subscriptions.attach(id, page_id, flags["access-token"])
    if not subscribed then
      warnings[#warnings + 1] = "connected, but its webhooks are not subscribed (" .. serr
        .. "); the periodic check tries again"
    end
  end
  local code, out = cli.ok({ accountId = id })
  return code, out, warnings[1] and table.concat(warnings, "\n") or nil
end

return cli.command {
  name = "account", summary = "Facebook Pages and Instagram accounts connected with a token.",
  subcommands = {
    { name = "add", summary = "connect a Page or Instagram account; prints {\"accountId\"}",
      about = "Connects a Facebook Page or Instagram professional account to a company with a token.\n"
        .. "While the Meta app is set, a live account's token is described by Meta first: an invalid\n"
        .. "one, a user token for a Facebook Page, or another Page's token is refused; one that expires\n"
        .. "is connected with a warning. A live account's Page is subscribed to the app's webhooks; a\n"
        .. "failed subscription is said on standard error, the account stays connected and the\n"
        .. "periodic check tries again.",
      flags = {
        { "company", "ID", "the company it belongs to", required = true },
        { "environment", "live|test", "live: Meta's Graph API; test: the sandbox", required = true },
        { "platform", "facebook|instagram", "what kind of account", required = true },
        { "platform-account-id", "ID", "the Page's or Instagram account's id at Meta", required = true },
        { "name", "NAME", "its display name, up to 200 characters", required = true },
        { "username", "U", "the Instagram username", default = "none" },
        { "access-token", "TOKEN", "the Page access token (stored encrypted)", required = true },
        { "page-id", "PAGE", "instagram: the Facebook Page it is linked to (webhooks go through it)", default = "none" },
        { "facebook-user-id", "ID", "the Facebook user whose consent gave the token", default = "asked of Meta's debug_token when the app is set" },
      },
      run = add },
  },
}

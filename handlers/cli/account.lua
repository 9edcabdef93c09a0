-- sgw account add --company ID --environment live|test --platform facebook|instagram
--   --platform-account-id ID --name N [--username U] --access-token T
--   [--page-id PAGE] [--facebook-user-id ID]  ->  {"accountId"}
-- A live account's Page is subscribed to the app's webhooks (for Instagram,
-- the linked Page given by --page-id); a failed subscription is said on
-- standard error and the account stays connected (lib/meta_subscriptions.lua).
-- --facebook-user-id: the Facebook user whose consent gave the token (Meta's
-- deauthorize and data-deletion callbacks find the account by it). Without
-- it, a live account asks Meta's debug_token when the Meta app is set, best
-- effort: a token Meta does not describe leaves it unknown.
local cli = require "cli"
local accounts = require "accounts"
local subscriptions = require "meta_subscriptions"
local token_check = require "token_check"

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
  if not fb_user and flags.environment == "live" and token_check.app_token() then
    local asked, data = pcall(token_check.debug_token, flags["access-token"])
    fb_user = asked and data and data.is_valid ~= false and type(data.user_id) == "string" and data.user_id or nil
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
      local code, out = cli.ok({ accountId = id })
      return code, out, "connected, but its webhooks are not subscribed (" .. serr
        .. "); the periodic check tries again"
    end
  end
  return cli.ok({ accountId = id })
end

return cli.command {
  name = "account", summary = "Facebook Pages and Instagram accounts connected with a token.",
  subcommands = {
    { name = "add", summary = "connect a Page or Instagram account; prints {\"accountId\"}",
      about = "Connects a Facebook Page or Instagram professional account to a company with a token.\n"
        .. "A live account's Page is subscribed to the app's webhooks; a failed subscription is said\n"
        .. "on standard error, the account stays connected and the periodic check tries again.",
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

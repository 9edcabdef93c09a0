-- Which adapter speaks for an account, and the account as adapters see it
-- (docs/publishing.md, "Adapters"): test accounts always go to the simulator,
-- never to a platform.
local accounts = require "accounts"

local M = {}

local LIVE = {
  facebook = "platforms.facebook",
  instagram = "platforms.instagram",
}

function M.for_account(account)
  if account.environment == "test" then return require "platforms.sandbox" end
  return require(LIVE[account.platform])
end

-- ctx.account from a row with the account's columns (account_id or id,
-- platform, platform_account_id, access_token_enc, environment, company_id,
-- name, username). A live account whose token does not decrypt: nil and why.
function M.account(row)
  local token, err = accounts.decrypt_token(row)
  if row.environment == "live" and not token then return nil, err end
  return { id = row.account_id or row.id, platform = row.platform, platform_account_id = row.platform_account_id,
    access_token = token, environment = row.environment, company_id = row.company_id,
    name = row.name, username = row.username }
end

return M

-- Timer meta.subscriptions: every connected live Page still has the app's
-- webhooks (lib/meta_subscriptions.lua); a lost subscription is made again.
-- The app's own subscriptions are checked too (missing, or at another Graph
-- API version): those take the operator, so they are only said in the log.
local subscriptions = require "meta_subscriptions"
local accounts = require "accounts"

return function()
  local counts = { ok = 0, resubscribed = 0, failed = 0 }
  for _, row in ipairs(subscriptions.pages()) do
    local token = accounts.decrypt_token(row)
    local outcome = token and subscriptions.check(row.page_id, token) or "failed"
    counts[outcome] = counts[outcome] + 1
  end
  counts.app_problems = subscriptions.check_app()
  log.info("meta_subscriptions_checked", counts)
end

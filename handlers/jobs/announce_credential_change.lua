-- Tells every instance that credentials changed: enqueued by a rotation or
-- a revocation in its own transaction (lib/credentials.lua). The change
-- bumps the epoch at once; this job bumps it again, and keeps trying while
-- Redis does not take it, since an instance that still reaches Redis would
-- otherwise serve the changed credential from its cache. Once
-- api.credential_cache_seconds have passed since the change, no cache holds
-- it any more and the job is done either way.
local credentials = require "credentials"

local RETRY_SECONDS = 1
-- A lookup that read the row just before the change committed may have
-- cached it a moment after changed_at, and instances' clocks differ a
-- little: keep trying that much longer.
local MARGIN_SECONDS = 5

return function(payload)
  if credentials.bump_epoch() then return end
  local changed_at = tonumber(payload.changed_at) or 0
  if clock.now() >= changed_at + config.get("api.credential_cache_seconds") + MARGIN_SECONDS then
    log.warn("credential_change_unannounced", { changed_at = changed_at,
      detail = "Redis did not take the news; every cache has expired since" })
    return
  end
  -- A wait for Redis, not a failed attempt.
  return { retry_in = RETRY_SECONDS, attempt = false }
end

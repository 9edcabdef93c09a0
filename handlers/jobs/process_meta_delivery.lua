-- Job: one stored Meta delivery becomes comment observations, applied in
-- one transaction with its events and its processed mark, so running it
-- twice changes nothing.
local json = require "json"
local meta_webhooks = require "meta_webhooks"
local comments = require "comments"
local partitions = require "partitions"

-- The connected accounts standing for a Page or Instagram user, asked once
-- per delivery. A disconnected one takes nothing more in: its company let it
-- go (or Meta said its user removed the app or asked for deletion), while the
-- Page may stay subscribed to the app for another company's account.
local function account_lookup()
  local cache = {}
  return function(platform, platform_account_id)
    local key = platform .. ":" .. platform_account_id
    if not cache[key] then
      local rows = assert(db.query([[SELECT id FROM social_accounts WHERE platform = $1 AND platform_account_id = $2
          AND status <> 'disconnected' ORDER BY id]], platform, platform_account_id))
      local ids = {}
      for i, r in ipairs(rows) do ids[i] = r.id end
      cache[key] = ids
    end
    return cache[key]
  end
end

-- The delivery's row: by id and the second it came in (receivedSecond), so
-- one or two day partitions are read; a job enqueued before the table was
-- partitioned has the id alone.
local function where(second)
  if second then return "id = $1 AND " .. partitions.near("received_at", 2) end
  return "id = $1 AND $2::bigint IS NULL"
end

return function(payload)
  local id = math.tointeger(payload.deliveryId)
  if not id then error("process_meta_delivery: deliveryId must be an integer", 0) end
  local second = math.tointeger(payload.receivedSecond)
  local cond = where(second)
  db.transaction(function()
    local rows = assert(db.query([[SELECT body FROM meta_webhook_deliveries
        WHERE ]] .. cond .. [[ AND processed_at IS NULL FOR UPDATE]], id, second))
    if not rows[1] then return end
    local delivery = json.decode(rows[1].body)
    local observations, skipped = meta_webhooks.normalize(delivery, account_lookup())
    local created, changed = comments.apply(observations)
    comments.announce(created, changed)
    -- A delivery skipped as a whole (not a page or instagram object) keeps why.
    local whole = skipped[1] and skipped[1].entry == nil and skipped[1].reason or nil
    if #skipped > 0 then
      log.info("meta_delivery_skipped", { deliveryId = id, skipped = #skipped, first = skipped[1].reason })
    end
    assert(db.exec([[UPDATE meta_webhook_deliveries SET processed_at = now(), error = $3, result = $4::jsonb
        WHERE ]] .. cond, id, second, whole,
      json.encode({ observations = #observations, created = #created, skipped = json.array(skipped) })))
  end)
end

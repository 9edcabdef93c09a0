-- What sgw deletes once it is old enough (config `retention.*`, in days;
-- 0 keeps everything of that kind). Each kind is deleted oldest first in
-- batches of retention.batch_size rows, one statement each, so that no
-- transaction holds many locks or runs long; the job comes back at once
-- while a batch was full.
--
--   oauth_tokens      access tokens expired that many days ago
--   meta_deliveries   Meta webhook deliveries processed that many days ago
--                     (unprocessed ones are kept whatever their age)
--   events            events created that many days ago, with their
--                     delivery attempts (older than webhooks.retry.max_age_hours,
--                     so no delivery is still pending)
--   uploads           uploads made that many days ago that no post uses
--   comment_changes   comment change feed rows (lib/comment_changes.lua)
--                     of changes made that many days ago; rows no reader
--                     has numbered yet are kept whatever their age, so the
--                     feed starts at the oldest change still kept
--
-- Instagram container slots (platforms.instagram_quota) are no history:
-- they go once they leave meta.instagram_container_window_seconds, for
-- every account (an account's own go when it takes a new slot; an idle or
-- disconnected one takes none). Nor are expired workspace sessions and
-- "Connect with Facebook" attempts, which go once they expire (the latter
-- may hold Page tokens, encrypted, of an attempt nobody finished); until
-- then every reader passes them by (expires_at > now()).
--
-- Events, delivery attempts, Meta deliveries and comment changes live in
-- daily partitions (lib/partitions.lua): a day that ended that many days
-- ago is dropped whole, unless it holds a row the kind keeps (an
-- unprocessed delivery, an unnumbered change); such a day, and the default
-- partition, are then deleted row by row like the other kinds. A kind kept
-- forever (0) gets no new day partitions (see lib/partitions.lua).
local partitions = require "partitions"

local M = {}

local KINDS = {
  { name = "oauth_tokens", sql = [[DELETE FROM access_tokens WHERE token_hash IN (
      SELECT token_hash FROM access_tokens WHERE expires_at < now() - make_interval(days => $1)
       ORDER BY expires_at LIMIT $2)]] },
  -- The outer conditions on age repeat the inner ones so that the planner
  -- reads only the old partitions (the default one, mostly), not every day.
  { name = "meta_deliveries", partitions = { { table = "meta_webhook_deliveries", keep = "processed_at IS NULL" } },
    sql = [[DELETE FROM meta_webhook_deliveries WHERE received_at < now() - make_interval(days => $1) AND id IN (
      SELECT id FROM meta_webhook_deliveries
       WHERE processed_at IS NOT NULL AND received_at < now() - make_interval(days => $1)
       ORDER BY received_at LIMIT $2)]] },
  -- Attempts are written after their event, so a day of attempts is
  -- dropped no earlier than its events' day (and not counted: the kind
  -- counts events). Attempts that old without their event (it was in a
  -- dropped day, they in the default partition) go by their own age.
  { name = "events", partitions = { { table = "events" }, { table = "webhook_deliveries", uncounted = true } },
    sql = [[WITH old AS (
        SELECT id FROM events WHERE created_at < now() - make_interval(days => $1)
         ORDER BY created_at LIMIT $2),
      attempts AS (DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM old)),
      strays AS (DELETE FROM webhook_deliveries WHERE created_at < now() - make_interval(days => $1) AND id IN (
        SELECT id FROM webhook_deliveries WHERE created_at < now() - make_interval(days => $1)
         ORDER BY created_at LIMIT $2))
      DELETE FROM events WHERE created_at < now() - make_interval(days => $1) AND id IN (SELECT id FROM old)]] },
  { name = "uploads", sql = [[DELETE FROM uploads WHERE id IN (
      SELECT u.id FROM uploads u
       WHERE u.created_at < now() - make_interval(days => $1)
         AND NOT EXISTS (SELECT 1 FROM posts p
                          WHERE p.image ->> 'source' = 'upload' AND p.image ->> 'upload_id' = u.id)
       ORDER BY u.created_at LIMIT $2)]] },
  { name = "comment_changes", partitions = { { table = "comment_changes", keep = "sequence IS NULL" } },
    sql = [[DELETE FROM comment_changes WHERE changed_at < now() - make_interval(days => $1) AND id IN (
      SELECT id FROM comment_changes
       WHERE sequence IS NOT NULL AND changed_at < now() - make_interval(days => $1)
       ORDER BY changed_at LIMIT $2)]] },
}

-- What goes once it expires, whatever retention.*: a batch per run ($1 the
-- batch size; $2, when the kind has a `param`, that setting).
local EXPIRED = {
  -- SKIP LOCKED: rows another transaction is deleting at the same moment
  -- (a slot reservation under its account's lock, a sign-out), in its own
  -- order, are left to it, so the two can never wait on each other.
  { name = "instagram_containers", param = "meta.instagram_container_window_seconds",
    sql = [[DELETE FROM instagram_containers WHERE id IN (
      SELECT id FROM instagram_containers WHERE made_at <= now() - make_interval(secs => $2)
       ORDER BY made_at LIMIT $1 FOR UPDATE SKIP LOCKED)]] },
  { name = "workspace_oauth_states", sql = [[DELETE FROM workspace_oauth_states WHERE id IN (
      SELECT id FROM workspace_oauth_states WHERE expires_at < now()
       ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)]] },
  { name = "workspace_sessions", sql = [[DELETE FROM workspace_sessions WHERE id IN (
      SELECT id FROM workspace_sessions WHERE expires_at < now()
       ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)]] },
}

-- Creates the partitions ahead, drops the old ones, then deletes one batch
-- of each kind. Returns {kind = rows deleted} and whether any batch was full
-- (more are waiting).
function M.run()
  local kept_forever = {}
  for _, kind in ipairs(KINDS) do
    if config.get("retention." .. kind.name .. "_days") == 0 then
      for _, p in ipairs(kind.partitions or {}) do kept_forever[p.table] = true end
    end
  end
  partitions.create_ahead(kept_forever)
  local batch = math.floor(config.get("retention.batch_size"))
  local deleted, more = {}, false
  for _, kind in ipairs(KINDS) do
    local days = config.get("retention." .. kind.name .. "_days")
    if days > 0 then
      local dropped = 0
      for _, p in ipairs(kind.partitions or {}) do
        local n = partitions.drop_older(p.table, days, p.keep)
        if not p.uncounted then dropped = dropped + n end
      end
      local n = assert(db.exec(kind.sql, days, batch))
      if n >= batch then more = true end
      n = n + dropped
      deleted[kind.name] = n
      if n > 0 then metrics.inc("sgw_retention_deleted_total", { kind = kind.name }, n) end
    end
  end
  for _, kind in ipairs(EXPIRED) do
    local n
    if kind.param then n = assert(db.exec(kind.sql, batch, config.get(kind.param)))
    else n = assert(db.exec(kind.sql, batch)) end
    if n >= batch then more = true end
    if n > 0 then
      deleted[kind.name] = n
      metrics.inc("sgw_retention_deleted_total", { kind = kind.name }, n)
    end
  end
  return deleted, more
end

return M

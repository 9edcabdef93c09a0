-- Periodic jobs: each timer enqueues its job (handlers/jobs/<job>.lua) once
-- per interval across all instances (see docs/host-api.md, "Jobs").

-- Read once per instance at start and at each reload: the time to say which
-- Graph API version this instance is pinned to (lib/meta_graph_version.lua).
require("meta_graph_version").announce()

return {
  -- Expired Idempotency-Keys and their stored responses (lib/idempotency.lua).
  { name = "idempotency.cleanup", every = 3600, job = "idempotency_cleanup" },
  -- Comments the Meta webhooks missed (lib/comment_sync.lua).
  { name = "comments.sync", every = "sync.interval_seconds", job = "sync_comments" },
  -- Tokens Meta no longer honours, and their expiry dates (lib/token_check.lua).
  { name = "meta.token_check", every = config.get("meta.token_check_interval_hours") * 3600, job = "check_tokens" },
  -- Old tokens, Meta deliveries, events and unused uploads (lib/retention.lua);
  -- the day partitions ahead (lib/partitions.lua).
  { name = "retention", every = "retention.interval_seconds", job = "retention" },
  -- Pages whose webhook subscription was lost (lib/meta_subscriptions.lua).
  { name = "meta.subscriptions", every = "meta.subscription_check_interval_seconds", job = "meta_subscriptions_check" },
}

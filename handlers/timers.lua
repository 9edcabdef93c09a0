-- Periodic jobs: each timer enqueues its job (handlers/jobs/<job>.lua) once
-- per interval across all instances (see docs/host-api.md, "Jobs").
return {
  -- Expired Idempotency-Keys and their stored responses (lib/idempotency.lua).
  { name = "idempotency.cleanup", every = 3600, job = "idempotency_cleanup" },
  -- Comments the Meta webhooks missed (lib/comment_sync.lua).
  { name = "comments.sync", every = "sync.interval_seconds", job = "sync_comments" },
}

-- Periodic jobs: each timer enqueues its job (handlers/jobs/<job>.lua) once
-- per interval across all instances (see docs/host-api.md, "Jobs").
return {
  -- Expired Idempotency-Keys and their stored responses (lib/idempotency.lua).
  { name = "idempotency.cleanup", every = 3600, job = "idempotency_cleanup" },
}

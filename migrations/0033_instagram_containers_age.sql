-- The retention job deletes container slots that left Meta's window for
-- every account at once (lib/retention.lua), oldest first: an idle or
-- disconnected account never takes a new slot, which is when an account's
-- own old rows go.
CREATE INDEX instagram_containers_made_at ON instagram_containers (made_at);

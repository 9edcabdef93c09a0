-- Where the periodic comment sync stands with each post target it reads
-- (lib/comment_sync.lua, docs/comments.md "Sync").

CREATE TABLE comment_sync (
  post_target_id  text PRIMARY KEY REFERENCES post_targets (id),
  -- The platform's cursor where an interrupted pass goes on (usage too high,
  -- page cap, an error); null: the next pass starts at the first comment.
  cursor          text,
  -- When a run last took the target up (whatever came of it): the least
  -- recently checked go first, so every target gets its turn even while
  -- some accounts fail or Meta's usage keeps runs short.
  checked_at      timestamptz,
  synced_at       timestamptz,        -- when a pass last read every comment of the target
  error           text,               -- why the last attempt stopped, if it failed
  updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Sync picks live targets by publication time.
CREATE INDEX post_targets_published_recent ON post_targets (published_at) WHERE status = 'published';

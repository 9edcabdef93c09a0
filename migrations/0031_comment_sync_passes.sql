-- A sync pass over a target's comments may take several runs (a post with
-- more pages than sync.max_pages_per_target, Meta's usage, the run's time):
-- what it has seen so far is kept here, so that a pass that reached the last
-- page, every page whole, concludes which comments are gone from the
-- platform however many runs it took (lib/comment_sync.lua).
--
-- A pass has an id; a run goes on with it only while the target's cursor is
-- the one the pass itself saved last (pass_cursor), so two runs that took
-- the same target, or a run of an older sgw that keeps nothing of what it
-- saw, make the pass conclude nothing instead of concluding from part of it.
ALTER TABLE comment_sync
  ADD COLUMN pass_id text,                          -- the pass under way; null when none can conclude
  ADD COLUMN pass_started_at timestamptz,           -- when it read its first page
  ADD COLUMN pass_cursor text,                      -- the cursor it saved last
  ADD COLUMN pass_whole boolean NOT NULL DEFAULT false;  -- every page so far listed all it covers

CREATE TABLE comment_sync_seen (
  post_target_id       text NOT NULL REFERENCES comment_sync (post_target_id) ON DELETE CASCADE,
  pass_id              text NOT NULL,
  platform_comment_id  text NOT NULL,
  PRIMARY KEY (post_target_id, pass_id, platform_comment_id)
);

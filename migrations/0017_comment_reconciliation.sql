-- Comment state by reconciliation (docs/comments.md, "Order" and "Sync").
--
-- Versions become (seconds, rank): Meta dates webhook changes to the whole
-- second, so an `add` and its `edited` can carry the same time; the rank
-- orders observations of one second (sync 0 < add 1 < edited, hide, unhide 2
-- < remove 3). Each versioned field keeps the rank of what set it.
ALTER TABLE comments
  ADD COLUMN version_rank   smallint NOT NULL DEFAULT 0,
  ADD COLUMN text_rank      smallint,
  ADD COLUMN hidden_rank    smallint,
  ADD COLUMN like_rank      smallint,
  -- When sgw first stored the comment (its own clock): a sync pass that began
  -- before then, or too soon after, concludes nothing about it.
  ADD COLUMN first_seen_at  timestamptz NOT NULL DEFAULT now(),
  -- Whether the write that made this row version changed its text, hidden or
  -- deleted state, so that the writer announces exactly those changes
  -- (social.comment.updated) however writers interleave.
  ADD COLUMN state_changed  boolean NOT NULL DEFAULT false;

-- Existing rows: what set a field so far counts as rank 0 of its second.
UPDATE comments SET text_rank = CASE WHEN text_version IS NOT NULL THEN 0 END,
                    hidden_rank = CASE WHEN hidden_version IS NOT NULL THEN 0 END,
                    like_rank = CASE WHEN like_version IS NOT NULL THEN 0 END;

-- A complete sync pass looks for the live comments of one target.
CREATE INDEX comments_target_live ON comments (post_target_id) WHERE NOT is_deleted;

-- Comments at scale (README, "Comments at scale: partitions"): the comments table is
-- split into 16 hash partitions by company_id.
--
-- Why by company and not by time: every read of comments names its company
-- (listing, inbox, a comment by id, bulk actions), so each touches one
-- partition; a comment's created_at can still move (a row first seen through
-- an edit learns its creation time later) and its identity
-- (social_account_id, platform_comment_id) has no time in it, so a time key
-- would move rows between partitions and could not enforce that identity;
-- and comments are never deleted by age (retention keeps them), so there is
-- no old partition to drop. Each partition's indexes are a sixteenth of the
-- whole: vacuum, index builds and the trigram index's pending list work per
-- partition. Sixteen cannot be changed without rewriting the table: at
-- 100 million comments a partition holds about 6 million.
--
-- A unique key of a partitioned table must contain company_id: the primary
-- key becomes (id, company_id) and the comment's identity
-- (social_account_id, platform_comment_id, company_id), the same rows since
-- an account belongs to one company. The tables that refer to a comment
-- name its company too (comment_audit gains company_id).
--
-- Existing comments are copied inside this migration while the table is
-- locked: about a minute per million comments on a 2-core machine. With
-- millions of comments, run `sgw migrate` by hand before starting the new
-- version (the unit's start gives it 90 s).

CREATE TABLE comments_partitioned (
  LIKE comments INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS,
  -- Whether the write that made this row version inserted it (the upsert
  -- sets false when it updates), so the writer knows which comments it
  -- created. The system column xmax told that before, but a partitioned
  -- table cannot return it.
  last_write_inserted  boolean NOT NULL DEFAULT true
) PARTITION BY HASH (company_id);

-- Each partition also gets statistics of how a post or an account decides
-- the company and environment: without them PostgreSQL multiplies the
-- selectivities of post_id, company_id and environment as if independent,
-- expects a few rows of a post where there are hundreds, and sorts them all
-- to keep one page instead of walking the post's index in order. A query
-- that reads one partition is planned with that partition's statistics.
DO $$
DECLARE
  columns text;
  part text;
BEGIN
  FOR i IN 0..15 LOOP
    part := 'comments_p' || lpad(i::text, 2, '0');
    EXECUTE format('CREATE TABLE %I PARTITION OF comments_partitioned
                      FOR VALUES WITH (MODULUS 16, REMAINDER %s)', part, i);
    EXECUTE format('CREATE STATISTICS %I (dependencies) ON post_id, company_id, environment FROM %I',
                   part || '_post_owner', part);
    EXECUTE format('CREATE STATISTICS %I (dependencies) ON social_account_id, company_id, environment FROM %I',
                   part || '_account_owner', part);
  END LOOP;
  -- Every column but the generated one, which computes itself.
  SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position) INTO columns
    FROM information_schema.columns
   WHERE table_schema = current_schema() AND table_name = 'comments' AND is_generated = 'NEVER';
  EXECUTE format('INSERT INTO comments_partitioned (%s) SELECT %s FROM comments', columns, columns);
END $$;

ALTER TABLE comment_audit ADD COLUMN company_id text REFERENCES companies (id);
UPDATE comment_audit a SET company_id = c.company_id FROM comments c WHERE c.id = a.comment_id;
ALTER TABLE comment_audit ALTER COLUMN company_id SET NOT NULL;

ALTER TABLE comment_audit DROP CONSTRAINT comment_audit_comment_id_fkey;
ALTER TABLE comment_changes DROP CONSTRAINT comment_changes_comment_id_fkey;
DROP TABLE comments;
ALTER TABLE comments_partitioned RENAME TO comments;

ALTER TABLE comments
  ADD PRIMARY KEY (id, company_id),
  ADD UNIQUE (social_account_id, platform_comment_id, company_id),
  ADD FOREIGN KEY (company_id) REFERENCES companies (id),
  ADD FOREIGN KEY (post_target_id) REFERENCES post_targets (id),
  ADD FOREIGN KEY (post_id) REFERENCES posts (id),
  ADD FOREIGN KEY (social_account_id) REFERENCES social_accounts (id);
-- The company beside the post and the account: a query names both, and an
-- index that holds every equality it asks for, in the order it reads, is
-- the plan PostgreSQL keeps even when it misjudges how many rows match (with
-- (post_id, created_at, id) it could AND the post's and the company's
-- indexes and sort the whole post to keep one page).
CREATE INDEX comments_post ON comments (post_id, company_id, created_at, id);
CREATE INDEX comments_inbox ON comments (company_id, environment, created_at, id);
CREATE INDEX comments_account_created ON comments (social_account_id, company_id, created_at, id);
CREATE INDEX comments_inbox_hidden ON comments (company_id, environment, created_at, id) WHERE is_hidden;
CREATE INDEX comments_inbox_deleted ON comments (company_id, environment, created_at, id) WHERE is_deleted;
CREATE INDEX comments_target_live ON comments (post_target_id) WHERE NOT is_deleted;
CREATE INDEX comments_text_folded_trgm ON comments USING gin (text_folded gin_trgm_ops);

ALTER TABLE comment_audit ADD FOREIGN KEY (comment_id, company_id) REFERENCES comments (id, company_id);
ALTER TABLE comment_changes ADD FOREIGN KEY (comment_id, company_id) REFERENCES comments (id, company_id);
ANALYZE comments;

-- The comment inbox, change feed and moderation history (docs/comments.md,
-- "Inbox", "Change feed", "History").

-- What the write that made this row version changed, in order: 'edited',
-- 'hidden' or 'unhidden', 'deleted'. Computed against the locked row, like
-- state_changed, so concurrent writers never both claim one change.
ALTER TABLE comments ADD COLUMN state_changes text[] NOT NULL DEFAULT '{}';

-- Inbox: a company's comments of one environment, newest or oldest first,
-- keyset-paged on (created_at, id), narrowed by account or by a rare state.
CREATE INDEX comments_inbox ON comments (company_id, environment, created_at, id);
CREATE INDEX comments_account_created ON comments (social_account_id, created_at, id);
CREATE INDEX comments_inbox_hidden ON comments (company_id, environment, created_at, id) WHERE is_hidden;
CREATE INDEX comments_inbox_deleted ON comments (company_id, environment, created_at, id) WHERE is_deleted;
-- q: a case-insensitive substring, found through trigrams; folded by
-- Unicode rules (ICU) whatever the database's locale.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX comments_text_trgm ON comments USING gin (lower(text COLLATE "und-x-icu") gin_trgm_ops);

-- Every change of a comment, appended by the writer in its own transaction.
-- `sequence` is handed out later, in id order, to rows already committed
-- (lib/comment_changes.lua), so the feed reads in commit order.
CREATE TABLE comment_changes (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  company_id   text NOT NULL REFERENCES companies (id),
  environment  text NOT NULL CHECK (environment IN ('live', 'test')),
  comment_id   text NOT NULL REFERENCES comments (id),
  type         text NOT NULL CHECK (type IN ('created', 'edited', 'hidden', 'unhidden', 'deleted', 'replied')),
  actor_type   text NOT NULL CHECK (actor_type IN ('platform', 'client', 'user', 'rule')),
  actor_id     text CHECK ((actor_type = 'platform') = (actor_id IS NULL)),
  changed_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  comment      jsonb NOT NULL,               -- the Comment as this change left it
  sequence     bigint
);
CREATE UNIQUE INDEX comment_changes_feed ON comment_changes (company_id, environment, sequence)
  WHERE sequence IS NOT NULL;
CREATE INDEX comment_changes_unnumbered ON comment_changes (company_id, environment, id) WHERE sequence IS NULL;
CREATE INDEX comment_changes_age ON comment_changes (changed_at) WHERE sequence IS NOT NULL;

-- The last sequence handed out per company and environment: it only grows,
-- even when retention has deleted every change.
CREATE TABLE comment_change_counters (
  company_id   text NOT NULL REFERENCES companies (id),
  environment  text NOT NULL CHECK (environment IN ('live', 'test')),
  last         bigint NOT NULL,
  PRIMARY KEY (company_id, environment)
);

-- Who asked for what, per comment: one row per comment per moderation action,
-- written with the operation. `outcome`, when set, wins over the operation's
-- status (an operation acting on many comments records each one's own).
CREATE TABLE comment_audit (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  comment_id    text NOT NULL REFERENCES comments (id),
  action        text NOT NULL,
  actor_type    text NOT NULL CHECK (actor_type IN ('platform', 'client', 'user', 'rule')),
  actor_id      text,
  operation_id  text NOT NULL REFERENCES operations (id),
  outcome       text,
  at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX comment_audit_comment ON comment_audit (comment_id, id);
CREATE INDEX comment_audit_operation ON comment_audit (operation_id);

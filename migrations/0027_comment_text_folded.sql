-- The inbox's text search (q, docs/comments.md "Inbox"): the text folded by
-- Unicode rules (ICU, whatever the database's locale) is stored with the row,
-- folded once when the text is written, and the trigram index is on it. A
-- search then compares each row the index finds with the stored folding
-- instead of folding its text again: the same expression as before
-- (migrations/0022), so the same matches.
--
-- Adding a stored column rewrites the comments table and rebuilds its
-- indexes while holding its lock (comments are neither read nor written
-- meanwhile): 70 s for 1,200,000 comments on a busy 2-core machine. With
-- millions of comments, run `sgw migrate` by hand before starting the new
-- version: the unit runs it before starting and systemd gives a start 90 s
-- by default.
ALTER TABLE comments ADD COLUMN text_folded text COLLATE "und-x-icu"
  GENERATED ALWAYS AS (lower(text COLLATE "und-x-icu")) STORED;
CREATE INDEX comments_text_folded_trgm ON comments USING gin (text_folded gin_trgm_ops);
DROP INDEX comments_text_trgm;

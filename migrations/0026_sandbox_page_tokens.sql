-- A sandbox post's permalink opens a page of the gateway's own
-- (GET /sandbox/posts/{token}, lib/sandbox_pages.lua). Its token is the
-- page's only key: random, kept with the publication, never derived from an
-- id the API shows. Publications made before this have none and keep the
-- permalink they were given.
ALTER TABLE sandbox_publications ADD COLUMN page_token text;
-- Found by the token's digest, so that how long a lookup takes says nothing
-- about how close a guess came.
CREATE UNIQUE INDEX sandbox_publications_page_token
  ON sandbox_publications (sha256(page_token::bytea)) WHERE page_token IS NOT NULL;

-- What the sandbox simulator published: its stand-in for a platform's own
-- record, so that an interrupted attempt can be resolved against it exactly
-- as against Facebook or Instagram, and tests can count publications.
CREATE TABLE sandbox_publications (
  platform_post_id   text PRIMARY KEY,
  social_account_id  text NOT NULL REFERENCES social_accounts (id),
  post_target_id     text NOT NULL,
  message            text,
  created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sandbox_publications_target ON sandbox_publications (post_target_id);

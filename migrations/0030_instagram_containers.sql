-- The Instagram containers sgw made, per account, for Meta's limit of 400
-- containers per rolling 24 hours (lib/platforms/instagram_quota.lua): a
-- row is written before POST /{ig-user}/media is sent, under a lock on the
-- account, and taken back when Meta's answer says no container was made.
-- Rows older than the window are deleted as new ones are written, so an
-- account keeps at most about one window's worth. No foreign key: a row is
-- only a count, and adapters also run for accounts given whole in their
-- context (the adapter fixtures of the specs).
CREATE TABLE instagram_containers (
  id                 bigserial PRIMARY KEY,
  social_account_id  text NOT NULL,
  target_id          text,
  made_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX instagram_containers_account ON instagram_containers (social_account_id, made_at);

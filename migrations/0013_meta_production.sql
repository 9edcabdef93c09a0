-- What Meta's production platform needs sgw to know about a connected account
-- (CONTRACT section 11, README "Connecting real Meta apps"): its token's health,
-- its webhook subscription, the Page an Instagram account acts through and the
-- Facebook user who connected it (deauthorize and data-deletion callbacks).

ALTER TABLE social_accounts DROP CONSTRAINT social_accounts_status_check;
ALTER TABLE social_accounts ADD CONSTRAINT social_accounts_status_check
  CHECK (status IN ('active', 'reconnect_required', 'disconnected'));

ALTER TABLE social_accounts
  -- {"code","message","platformCode"} while reconnect_required; null otherwise.
  ADD COLUMN status_reason           jsonb,
  ADD COLUMN status_since            timestamptz,
  -- From debug_token (null: unknown or never).
  ADD COLUMN token_expires_at        timestamptz,
  ADD COLUMN data_access_expires_at  timestamptz,
  ADD COLUMN token_checked_at        timestamptz,
  -- When social.account.data_access_expiring was sent for the current date.
  ADD COLUMN data_access_warned_at   timestamptz,
  -- The Page whose subscribed_apps carries this account's webhooks: the
  -- account itself for Facebook, the linked Page for Instagram.
  ADD COLUMN page_id                 text,
  ADD COLUMN webhooks_subscribed_at  timestamptz,
  ADD COLUMN webhooks_fields         text,
  ADD COLUMN webhooks_checked_at     timestamptz,
  ADD COLUMN webhooks_error          text,
  -- The Facebook user (app-scoped id) whose consent gave the token.
  ADD COLUMN connected_by_fb_user    text;

CREATE INDEX social_accounts_fb_user ON social_accounts (connected_by_fb_user)
  WHERE connected_by_fb_user IS NOT NULL;

-- Data deletion requests Meta sent (POST /webhooks/meta/data-deletion): the
-- public status page shows one by its confirmation code.
CREATE TABLE meta_deletion_requests (
  confirmation_code  text PRIMARY KEY,
  fb_user_id         text NOT NULL,
  status             text NOT NULL CHECK (status IN ('received', 'completed')),
  accounts_affected  integer NOT NULL DEFAULT 0,
  created_at         timestamptz NOT NULL DEFAULT now(),
  completed_at       timestamptz
);
CREATE INDEX meta_deletion_requests_user ON meta_deletion_requests (fb_user_id);

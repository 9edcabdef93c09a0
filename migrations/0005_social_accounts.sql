-- Connected social accounts (Facebook Pages, Instagram business accounts, and
-- sandbox test pages). Platform tokens are encrypted at rest (AES-256-GCM
-- with crypto.encryption_key); test pages have none.
CREATE TABLE social_accounts (
  id                   text PRIMARY KEY,
  company_id           text NOT NULL REFERENCES companies (id),
  environment          text NOT NULL CHECK (environment IN ('live', 'test')),
  platform             text NOT NULL CHECK (platform IN ('facebook', 'instagram')),
  platform_account_id  text NOT NULL,
  name                 text NOT NULL,
  username             text,
  access_token_enc     text,
  status               text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disconnected')),
  connected_at         timestamptz NOT NULL DEFAULT now(),
  disconnected_at      timestamptz,
  UNIQUE (company_id, environment, platform, platform_account_id)
);
CREATE INDEX social_accounts_company ON social_accounts (company_id, environment, status);

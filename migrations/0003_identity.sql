-- Identity and tenancy: companies, their API clients (one environment each),
-- API keys, OAuth client secrets and access tokens. Secrets are stored only
-- as SHA-256 hashes (they carry 190+ random bits, so a fast hash is the right
-- one); the prefix of a key is kept for display.

CREATE TABLE companies (
  id          text PRIMARY KEY,
  name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_clients (
  id                     text PRIMARY KEY,
  company_id             text NOT NULL REFERENCES companies (id),
  environment            text NOT NULL CHECK (environment IN ('live', 'test')),
  name                   text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  scopes                 text[] NOT NULL,
  rate_limit_per_minute  integer CHECK (rate_limit_per_minute > 0),
  webhook_url            text,
  webhook_secret_enc     text,            -- AES-256-GCM, base64: needed in clear to sign
  secret_hash            text NOT NULL,   -- OAuth client secret
  revoked_at             timestamptz,
  created_at             timestamptz NOT NULL DEFAULT now(),
  last_used_at           timestamptz
);
CREATE INDEX api_clients_company ON api_clients (company_id, environment);

CREATE TABLE api_keys (
  id            bigserial PRIMARY KEY,
  client_id     text NOT NULL REFERENCES api_clients (id),
  company_id    text NOT NULL REFERENCES companies (id),
  environment   text NOT NULL CHECK (environment IN ('live', 'test')),
  key_hash      text NOT NULL UNIQUE,
  key_prefix    text NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  expires_at    timestamptz,              -- set at rotation: end of the grace period
  revoked_at    timestamptz,
  last_used_at  timestamptz
);
CREATE INDEX api_keys_client ON api_keys (client_id);

CREATE TABLE access_tokens (
  token_hash   text PRIMARY KEY,
  client_id    text NOT NULL REFERENCES api_clients (id),
  company_id   text NOT NULL REFERENCES companies (id),
  environment  text NOT NULL CHECK (environment IN ('live', 'test')),
  scopes       text[] NOT NULL,
  expires_at   timestamptz NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX access_tokens_client ON access_tokens (client_id);
CREATE INDEX access_tokens_expiry ON access_tokens (expires_at);

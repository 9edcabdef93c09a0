-- Posts, their per-account targets, the operations clients follow, scripted
-- sandbox failures, and the event outbox. See docs/publishing.md.

CREATE TABLE posts (
  id                  text PRIMARY KEY,
  company_id          text NOT NULL REFERENCES companies (id),
  environment         text NOT NULL CHECK (environment IN ('live', 'test')),
  client_id           text NOT NULL REFERENCES api_clients (id),
  status              text NOT NULL CHECK (status IN ('scheduled', 'queued', 'publishing', 'published',
                        'partially_published', 'failed', 'cancelled')),
  content             jsonb NOT NULL,
  media               jsonb NOT NULL DEFAULT '[]',
  publishing          jsonb NOT NULL,
  image               jsonb,            -- {source, url | upload_id, mime_type}
  external_reference  text,
  operation_id        text NOT NULL,    -- the operation following the current run
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX posts_company ON posts (company_id, environment, created_at, id);

CREATE TABLE post_targets (
  id                  text PRIMARY KEY,
  post_id             text NOT NULL REFERENCES posts (id),
  company_id          text NOT NULL REFERENCES companies (id),
  environment         text NOT NULL CHECK (environment IN ('live', 'test')),
  social_account_id   text NOT NULL REFERENCES social_accounts (id),
  platform            text NOT NULL CHECK (platform IN ('facebook', 'instagram')),
  position            integer NOT NULL,
  status              text NOT NULL CHECK (status IN ('scheduled', 'queued', 'publishing', 'retry_scheduled',
                        'published', 'failed', 'cancelled')),
  attempts            integer NOT NULL DEFAULT 0,          -- every attempt, all runs
  run_attempts        integer NOT NULL DEFAULT 0,          -- attempts since the post (or its retry) was queued
  next_attempt_at     timestamptz,
  attempt_started_at  timestamptz,
  platform_post_id    text,
  permalink_url       text,
  published_at        timestamptz,
  error               jsonb,
  adapter_state       jsonb NOT NULL DEFAULT '{}',
  updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX post_targets_post ON post_targets (post_id, position);
CREATE INDEX post_targets_published ON post_targets (social_account_id, published_at) WHERE status = 'published';

CREATE TABLE operations (
  id            text PRIMARY KEY,
  company_id    text NOT NULL REFERENCES companies (id),
  environment   text NOT NULL CHECK (environment IN ('live', 'test')),
  client_id     text NOT NULL REFERENCES api_clients (id),
  type          text NOT NULL,
  status        text NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
  resource_type text NOT NULL,
  resource_id   text NOT NULL,
  result        jsonb,
  error         jsonb,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  completed_at  timestamptz
);
CREATE INDEX operations_resource ON operations (resource_type, resource_id);

CREATE TABLE sandbox_failures (
  social_account_id  text PRIMARY KEY REFERENCES social_accounts (id),
  error_class        text NOT NULL,
  remaining          integer NOT NULL CHECK (remaining >= 0),
  created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE events (
  id           text PRIMARY KEY,
  company_id   text NOT NULL REFERENCES companies (id),
  environment  text NOT NULL CHECK (environment IN ('live', 'test')),
  client_id    text NOT NULL REFERENCES api_clients (id),
  type         text NOT NULL,
  data         jsonb NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_client ON events (client_id, created_at);

-- Delivery of events to clients' webhooks (lib/webhooks.lua, CONTRACT 7).

-- Set when the endpoint answered 410 Gone: nothing more is sent until an
-- operator sets a URL again (`sgw client set-webhook`).
ALTER TABLE api_clients ADD COLUMN webhook_disabled_at timestamptz;

-- The delivery body, encoded once when the event is written, so that every
-- attempt sends the same bytes (jsonb keeps neither key order nor spacing).
ALTER TABLE events ADD COLUMN body text;

-- One row per delivery attempt, for the workspace and for anyone asking
-- "did you send it?".
CREATE TABLE webhook_deliveries (
  id             bigserial PRIMARY KEY,
  event_id       text NOT NULL REFERENCES events (id),
  client_id      text NOT NULL REFERENCES api_clients (id),
  company_id     text NOT NULL REFERENCES companies (id),
  environment    text NOT NULL CHECK (environment IN ('live', 'test')),
  attempt        integer NOT NULL,
  url            text NOT NULL,
  -- delivered: a 2xx; gone: 410, the endpoint is now off; failed: anything
  -- else, tried again at next_retry_at; gave_up: failed, and the event is
  -- older than webhooks.retry.max_age_hours.
  outcome        text NOT NULL CHECK (outcome IN ('delivered', 'failed', 'gave_up', 'gone')),
  status_code    integer,                 -- the HTTP status, when there was an answer
  error          text,                    -- why there was none (time-out, refused address, ...)
  duration_ms    integer NOT NULL,
  next_retry_at  timestamptz,
  created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id, attempt);
CREATE INDEX webhook_deliveries_client ON webhook_deliveries (client_id, created_at);

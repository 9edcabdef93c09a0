-- Idempotency-Key (CONTRACT section 5), kept by lib/idempotency.lua: one row
-- per (API client, key). A row is claimed 'in_flight' in a statement of its
-- own, then turned 'done' with the response in the same transaction as the
-- resource the request created, so a crash can never leave one without the
-- other. No foreign key to api_clients: anonymous fixture routes use scopes
-- of their own ("anon:<address>"), and rows simply expire.

CREATE TABLE idempotency_keys (
    client_id        text        NOT NULL,
    key              text        NOT NULL,
    request_hash     text        NOT NULL,   -- SHA-256 of method, path and canonical body
    state            text        NOT NULL CHECK (state IN ('in_flight', 'done')),
    response_status  integer,
    response_body    text,
    response_headers jsonb,                  -- only those worth replaying (Content-Type, Location)
    locked_by        text,                   -- request id holding the in-flight claim
    locked_until     timestamptz,            -- after it, a claim left by a crashed instance is taken over
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (client_id, key),
    CHECK (state = 'in_flight' OR response_status IS NOT NULL)
);

-- What the clean-up job scans.
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);

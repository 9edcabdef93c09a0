-- Signed requests Meta sent to the deauthorize and data-deletion callbacks,
-- known by a hash of the request as sent: the same request again (Meta's
-- retry, or anyone replaying one they saw) gets the first one's answer and
-- changes nothing, even after the person has connected again.
CREATE TABLE meta_signed_requests (
  request_sha256     text PRIMARY KEY,
  kind               text NOT NULL CHECK (kind IN ('deauthorize', 'data_deletion')),
  confirmation_code  text REFERENCES meta_deletion_requests (confirmation_code),
  received_at        timestamptz NOT NULL DEFAULT now()
);

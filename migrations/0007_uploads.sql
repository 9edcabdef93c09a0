-- Uploaded images (CONTRACT section 6, "Upload"), written by
-- handlers/api/uploads_create.lua. Type, size and dimensions come from the
-- bytes (lib/images.lua), never from what the client declared. Platforms fetch
-- the bytes through signed /media URLs (lib/media.lua); posts refer to an
-- upload by id within the same company and environment.
CREATE TABLE uploads (
  id           text PRIMARY KEY,
  company_id   text NOT NULL REFERENCES companies (id),
  environment  text NOT NULL CHECK (environment IN ('live', 'test')),
  client_id    text NOT NULL REFERENCES api_clients (id),
  mime_type    text NOT NULL CHECK (mime_type IN ('image/jpeg', 'image/png', 'image/gif', 'image/webp')),
  size_bytes   integer NOT NULL CHECK (size_bytes > 0),
  width        integer NOT NULL CHECK (width > 0),
  height       integer NOT NULL CHECK (height > 0),
  sha256       text NOT NULL,           -- lower-case hex of the bytes
  data         bytea NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX uploads_company ON uploads (company_id, environment, created_at);

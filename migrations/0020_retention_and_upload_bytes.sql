-- Retention (lib/retention.lua) and upload storage.
--
-- An upload's bytes (up to 8 MiB) move to a table of their own, so that
-- listing, quota sums and lookups of uploads read small rows only; the
-- signed /media URLs read the bytes by id. Existing uploads keep their ids
-- and bytes.
CREATE TABLE upload_bytes (
  upload_id  text PRIMARY KEY REFERENCES uploads (id) ON DELETE CASCADE,
  data       bytea NOT NULL
);
INSERT INTO upload_bytes (upload_id, data) SELECT id, data FROM uploads;
ALTER TABLE uploads DROP COLUMN data;

-- The quota sums a company's uploads; retention finds old ones and whether a
-- post refers to them.
CREATE INDEX uploads_company_size ON uploads (company_id) INCLUDE (size_bytes);
CREATE INDEX uploads_created ON uploads (created_at);
CREATE INDEX posts_upload ON posts ((image ->> 'upload_id')) WHERE image ->> 'source' = 'upload';

-- Retention deletes old events with their delivery attempts (found by
-- webhook_deliveries_event), and processed Meta deliveries, oldest first.
CREATE INDEX events_created ON events (created_at);
CREATE INDEX meta_webhook_deliveries_processed ON meta_webhook_deliveries (received_at) WHERE processed_at IS NOT NULL;

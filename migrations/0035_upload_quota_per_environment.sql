-- The upload quota counts each environment of a company apart
-- (lib/media.lua, reserve_quota): its sum reads this index alone.
CREATE INDEX uploads_company_environment_size ON uploads (company_id, environment) INCLUDE (size_bytes);
DROP INDEX uploads_company_size;

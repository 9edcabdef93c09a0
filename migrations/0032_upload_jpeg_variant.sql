-- A JPEG upload that is a multi-picture (MPO) or stereo (JPS) JPEG, which
-- Instagram refuses though it is image/jpeg (lib/images.lua); null for a
-- plain JPEG and the other types. Uploads stored before are taken as plain.
ALTER TABLE uploads ADD COLUMN jpeg_variant text CHECK (jpeg_variant IN ('mpo', 'jps'));

-- A template generation's size (#16): measured on the database server by the generation's
-- size Job once it is sealed and posted to previewd with the generation's own report token,
-- of which only the SHA-256 digest is kept here (the token itself is sealed for the cluster).
ALTER TABLE templates ADD COLUMN report_digest BLOB;
ALTER TABLE templates ADD COLUMN size_bytes INTEGER;
ALTER TABLE templates ADD COLUMN size_at INTEGER;

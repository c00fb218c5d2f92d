-- Applies the seed files once per preview and generation. The files listed in the
-- include file (\i per file, name order) run in one transaction with the record that
-- they ran, so a failed seed leaves nothing behind and a rerun of the sync is a no-op.
-- A reseed bumps the generation. Run as:
--   psql -X -v generation=N -v files=/tmp/seed-files.sql -f seed.sql
\set ON_ERROR_STOP on
CREATE TABLE IF NOT EXISTS previewd_seed (
    generation integer PRIMARY KEY,
    seeded_at  timestamptz NOT NULL DEFAULT now()
);
BEGIN;
-- One seeder at a time (hashtext('previewd_seed')).
SELECT pg_advisory_xact_lock(hashtext('previewd_seed'));
SELECT NOT EXISTS (SELECT 1 FROM previewd_seed WHERE generation = :generation) AS seed_needed \gset
\if :seed_needed
\i :files
INSERT INTO previewd_seed (generation) VALUES (:generation);
\echo seeded generation :generation
\else
\echo generation :generation was already seeded: nothing to do
\endif
COMMIT;

-- What the reconciler needs to be level-triggered: what it last applied, when a teardown
-- began, and the seed generation a `/preview reseed` bumps.
ALTER TABLE previews ADD COLUMN applied_hash TEXT;          -- sha256 of the Application last applied
ALTER TABLE previews ADD COLUMN teardown_started_at INTEGER;
ALTER TABLE previews ADD COLUMN seed_generation INTEGER NOT NULL DEFAULT 1;
CREATE INDEX previews_by_cluster ON previews (cluster) WHERE cluster IS NOT NULL;

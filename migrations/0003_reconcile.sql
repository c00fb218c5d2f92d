-- What the reconciler needs to be level-triggered: what it last applied, when a teardown
-- began, and the seed generation a `/preview reseed` bumps.
ALTER TABLE previews ADD COLUMN applied_hash TEXT;          -- sha256 of the Application last applied
ALTER TABLE previews ADD COLUMN teardown_started_at INTEGER;
ALTER TABLE previews ADD COLUMN seed_generation INTEGER NOT NULL DEFAULT 1;
CREATE INDEX previews_by_cluster ON previews (cluster) WHERE cluster IS NOT NULL;

-- The newest close of each PR (its pull_request.updated_at). A preview's row is deleted at
-- the end of its teardown, so without this a late or redelivered `opened` would bring a
-- closed PR's preview back; only an event newer than the close (a reopen) may.
CREATE TABLE closed_prs (
    repo          TEXT    NOT NULL,
    number        INTEGER NOT NULL,
    pr_updated_at INTEGER NOT NULL,
    PRIMARY KEY (repo, number)
) WITHOUT ROWID;

-- The sweeper's bookkeeping. `warned_expires_at` is the expiry a warning was posted for, so
-- a preview is warned once per expiry: extending it (a new expiry) earns a new warning.
ALTER TABLE previews ADD COLUMN warned_expires_at INTEGER;

-- Placement looks only at previews waiting for a cluster; with 100,000 placed previews this
-- keeps a pass from scanning them all.
CREATE INDEX previews_unplaced ON previews (created_at, id) WHERE cluster IS NULL AND desired = 'deployed';

-- One sweeper at a time across processes on the same state: whoever holds the unexpired
-- lease sweeps; the others skip their pass.
CREATE TABLE leases (
    name       TEXT    PRIMARY KEY,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;

-- One-off comments previewd owes a PR (an expiry warning, an eviction), posted by the
-- reporter once; `posted_at` marks them done. Keyed by value so they outlive the preview.
CREATE TABLE notices (
    id              INTEGER PRIMARY KEY,
    repo            TEXT    NOT NULL,
    number          INTEGER NOT NULL,
    installation_id INTEGER,
    kind            TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    posted_at       INTEGER
);
CREATE INDEX notices_unposted ON notices (id) WHERE posted_at IS NULL;

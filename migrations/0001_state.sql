-- previewd's durable state. Times are Unix seconds (UTC).
--
-- A preview and everything that belongs to it (ledger, sealed secrets, commands) go
-- together: child rows reference `previews` with ON DELETE CASCADE, so teardown is one
-- DELETE. `deliveries` and `history` are keyed by value, not by row id, so they outlive
-- the preview they talk about.

CREATE TABLE previews (
    id              INTEGER PRIMARY KEY,
    repo            TEXT    NOT NULL,                 -- owner/name, lower-case
    number          INTEGER NOT NULL CHECK (number > 0),
    repo_id         INTEGER NOT NULL,
    installation_id INTEGER,                          -- GitHub App installation, when known
    title           TEXT    NOT NULL DEFAULT '',
    author          TEXT    NOT NULL,
    head_sha        TEXT    NOT NULL,
    head_ref        TEXT    NOT NULL,                 -- branch, for display only (names never derive from it)
    base_ref        TEXT    NOT NULL,
    fork            INTEGER NOT NULL CHECK (fork IN (0, 1)),
    draft           INTEGER NOT NULL CHECK (draft IN (0, 1)),
    -- what previewd wants: deployed, waiting for an approval or for the PR to leave draft, or gone
    desired         TEXT    NOT NULL CHECK (desired IN ('deployed', 'awaiting_approval', 'draft', 'absent')),
    end_reason      TEXT,                             -- why desired became absent: merged, closed, destroyed, expired
    approved_sha    TEXT,                             -- fork PRs: the one head SHA an authorised user approved
    -- what the reconciler last saw
    observed        TEXT    NOT NULL DEFAULT 'pending',
    last_error      TEXT,
    cluster         TEXT,
    keep            INTEGER NOT NULL DEFAULT 0 CHECK (keep IN (0, 1)),
    pr_updated_at   INTEGER NOT NULL,                 -- pull_request.updated_at of the newest event applied
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    UNIQUE (repo, number)
);
CREATE INDEX previews_by_expiry ON previews (expires_at);
CREATE INDEX previews_by_desired ON previews (desired);

-- Everything a preview provisioned, with the state previewd last confirmed.
CREATE TABLE ledger (
    id           INTEGER PRIMARY KEY,
    preview_id   INTEGER NOT NULL REFERENCES previews (id) ON DELETE CASCADE,
    kind         TEXT    NOT NULL,                    -- Application, Namespace, Database, DNSEndpoint, ...
    namespace    TEXT,
    name         TEXT    NOT NULL,
    state        TEXT    NOT NULL,                    -- applied, confirmed, deleting, gone
    detail       TEXT,
    created_at   INTEGER NOT NULL,
    confirmed_at INTEGER,
    UNIQUE (preview_id, kind, namespace, name)
);

-- Sealed values only: plaintext never reaches this table.
CREATE TABLE sealed_secrets (
    id               INTEGER PRIMARY KEY,
    preview_id       INTEGER NOT NULL REFERENCES previews (id) ON DELETE CASCADE,
    namespace        TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    scope            TEXT    NOT NULL CHECK (scope IN ('strict', 'namespace-wide', 'cluster-wide')),
    cert_fingerprint TEXT    NOT NULL,
    encrypted_data   TEXT    NOT NULL,                -- JSON object: key -> base64 ciphertext
    created_at       INTEGER NOT NULL,
    UNIQUE (preview_id, namespace, name)
);

-- `/preview ...` commands from PR comments, queued for the reconciler. A command can
-- arrive for a PR previewd does not track (yet): then preview_id is NULL.
CREATE TABLE commands (
    id          INTEGER PRIMARY KEY,
    preview_id  INTEGER REFERENCES previews (id) ON DELETE CASCADE,
    repo        TEXT    NOT NULL,
    number      INTEGER NOT NULL,
    comment_id  INTEGER NOT NULL UNIQUE,
    actor       TEXT    NOT NULL,
    association TEXT    NOT NULL,                     -- author_association: OWNER, MEMBER, ...
    line        TEXT    NOT NULL,                     -- the command line, bounded; never the whole comment
    status      TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'refused', 'failed')),
    reply       TEXT,
    created_at  INTEGER NOT NULL,
    done_at     INTEGER
);
CREATE INDEX commands_pending ON commands (status) WHERE status = 'pending';

-- GitHub App installations and the repositories they grant, from installation* events.
CREATE TABLE installations (
    id         INTEGER PRIMARY KEY,                   -- GitHub's installation id
    account    TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE installation_repositories (
    installation_id INTEGER NOT NULL REFERENCES installations (id) ON DELETE CASCADE,
    repo            TEXT    NOT NULL,
    PRIMARY KEY (installation_id, repo)
);

-- Every accepted delivery and what came of it, for deduplication. Pruned after the
-- retention period (GitHub lets operators redeliver for 3 days, GHES for 7).
CREATE TABLE deliveries (
    hook_id     TEXT    NOT NULL,                     -- X-GitHub-Hook-ID ('' when absent)
    guid        TEXT    NOT NULL,                     -- X-GitHub-Delivery
    event       TEXT    NOT NULL,
    action      TEXT,
    outcome     TEXT    NOT NULL CHECK (outcome IN ('accepted', 'ignored', 'refused', 'failed')),
    detail      TEXT,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (hook_id, guid)
) WITHOUT ROWID;
CREATE INDEX deliveries_by_age ON deliveries (received_at);

-- Append-only: what happened to a preview, who did it and why. Outlives the preview.
CREATE TABLE history (
    id       INTEGER PRIMARY KEY,
    repo     TEXT    NOT NULL,
    number   INTEGER NOT NULL,
    what     TEXT    NOT NULL,                        -- opened, pushed, closed, awaiting_approval, refused, ...
    actor    TEXT    NOT NULL,                        -- GitHub login, 'previewd', or 'operator:<name>'
    reason   TEXT    NOT NULL DEFAULT '',
    head_sha TEXT,
    delivery TEXT,                                    -- the delivery GUID that caused it, if any
    at       INTEGER NOT NULL
);
CREATE INDEX history_by_preview ON history (repo, number, at);

CREATE TRIGGER history_is_append_only_update BEFORE UPDATE ON history
BEGIN SELECT RAISE(ABORT, 'history is append-only'); END;
CREATE TRIGGER history_is_append_only_delete BEFORE DELETE ON history
BEGIN SELECT RAISE(ABORT, 'history is append-only'); END;

-- Which PRs get a preview, and when its image may run (#15).
--
-- `desired` gains 'opted_out': the PR is tracked (its sticky comment says how to get a
-- preview) but wants none yet: a `trigger` of label or comment, `paths` it does not touch,
-- or an author in `ignore_authors`. SQLite cannot change a CHECK in place, so the table is
-- rebuilt (https://www.sqlite.org/lang_altertable.html#otheralter). sqlx runs every SQLite
-- migration in a transaction (sqlx-sqlite 0.8.6 migrate.rs `apply` ignores
-- `-- no-transaction`), where `PRAGMA foreign_keys = OFF` does nothing; so dropping the old
-- table cascades to what references it, and those rows are kept aside and put back.
CREATE TEMP TABLE kept_ledger AS SELECT * FROM ledger;
CREATE TEMP TABLE kept_sealed_secrets AS SELECT * FROM sealed_secrets;
CREATE TEMP TABLE kept_commands AS SELECT * FROM commands;
CREATE TABLE previews_rebuilt (
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
    -- what previewd wants: deployed, waiting for an approval or for the PR to leave draft,
    -- no preview until the PR opts in, or gone
    desired         TEXT    NOT NULL CHECK (desired IN ('deployed', 'awaiting_approval', 'draft', 'opted_out', 'absent')),
    end_reason      TEXT,                             -- why desired became absent: merged, closed, destroyed, expired, unlabeled
    approved_sha    TEXT,                             -- fork PRs: the one head SHA an authorised user approved
    observed        TEXT    NOT NULL DEFAULT 'pending',
    last_error      TEXT,
    cluster         TEXT,
    keep            INTEGER NOT NULL DEFAULT 0 CHECK (keep IN (0, 1)),
    pr_updated_at   INTEGER NOT NULL,                 -- pull_request.updated_at of the newest event applied
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    applied_hash    TEXT,
    teardown_started_at INTEGER,
    seed_generation INTEGER NOT NULL DEFAULT 1,
    redeploy_generation INTEGER NOT NULL DEFAULT 0,
    warned_expires_at INTEGER,
    head_changed_at INTEGER NOT NULL DEFAULT 0,
    names           TEXT,
    -- the PR carries its repository's `trigger_label`
    labeled         INTEGER NOT NULL DEFAULT 0 CHECK (labeled IN (0, 1)),
    -- the writer whose `/preview deploy` opted the PR in past trigger, paths and authors
    deploy_by       TEXT,
    -- `paths`: the head whose files were last listed, and the first matching file ever
    -- found (once one matched, the PR keeps its preview)
    paths_sha       TEXT,
    paths_file      TEXT,
    -- `wait_for`: the head whose checks were last looked up (NULL: look them up), and the
    -- head a writer's `/preview deploy` let past a failed check (a push resets it)
    checks_sha      TEXT,
    wait_override_sha TEXT,
    UNIQUE (repo, number)
);
INSERT INTO previews_rebuilt (id, repo, number, repo_id, installation_id, title, author, head_sha,
    head_ref, base_ref, fork, draft, desired, end_reason, approved_sha, observed, last_error,
    cluster, keep, pr_updated_at, created_at, updated_at, expires_at, applied_hash,
    teardown_started_at, seed_generation, redeploy_generation, warned_expires_at,
    head_changed_at, names)
SELECT id, repo, number, repo_id, installation_id, title, author, head_sha,
    head_ref, base_ref, fork, draft, desired, end_reason, approved_sha, observed, last_error,
    cluster, keep, pr_updated_at, created_at, updated_at, expires_at, applied_hash,
    teardown_started_at, seed_generation, redeploy_generation, warned_expires_at,
    head_changed_at, names
FROM previews;
DROP TABLE previews;
ALTER TABLE previews_rebuilt RENAME TO previews;
INSERT INTO ledger SELECT * FROM kept_ledger;
INSERT INTO sealed_secrets SELECT * FROM kept_sealed_secrets;
INSERT INTO commands SELECT * FROM kept_commands;
DROP TABLE kept_ledger;
DROP TABLE kept_sealed_secrets;
DROP TABLE kept_commands;
CREATE INDEX previews_by_expiry ON previews (expires_at);
CREATE INDEX previews_by_desired ON previews (desired);
CREATE INDEX previews_by_cluster ON previews (cluster) WHERE cluster IS NOT NULL;
CREATE INDEX previews_unplaced ON previews (created_at, id) WHERE cluster IS NULL AND desired = 'deployed';
CREATE INDEX previews_by_author ON previews (author, repo, number);
CREATE INDEX previews_by_cluster_page ON previews (cluster, repo, number);
CREATE INDEX previews_by_head ON previews (repo, head_sha);
CREATE TRIGGER previews_ended_on_purpose
AFTER UPDATE OF desired ON previews
WHEN NEW.desired = 'absent' AND OLD.desired != 'absent'
     AND NEW.end_reason IN ('destroyed', 'expired', 'evicted')
BEGIN
    INSERT INTO closed_prs (repo, number, pr_updated_at, ended_at, ended_sha)
    VALUES (NEW.repo, NEW.number, 0, NEW.pr_updated_at, NEW.head_sha)
    ON CONFLICT (repo, number) DO UPDATE SET
        ended_at = MAX(COALESCE(ended_at, 0), excluded.ended_at),
        ended_sha = excluded.ended_sha;
END;

-- The newest report of each check `wait_for` names, per repository and commit: only for a
-- commit that is a live preview's head (anything else is answered `200 ignored`), removed
-- with the last preview at that head, so the table stays as small as the live previews.
CREATE TABLE checks (
    repo       TEXT    NOT NULL,
    sha        TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    source     TEXT    NOT NULL CHECK (source IN ('check_run', 'status', 'workflow')),
    state      TEXT    NOT NULL CHECK (state IN ('pending', 'succeeded', 'failed')),
    conclusion TEXT    NOT NULL,
    url        TEXT,
    at         INTEGER NOT NULL,                      -- GitHub's time of the report
    PRIMARY KEY (repo, sha, name)
) WITHOUT ROWID;

-- What previewd last told GitHub about each PR: its sticky status comment (and the hash of
-- the body last written), the deployment of the head SHA it shows and that deployment's
-- last status. Keyed by value like `history`, so the final "destroyed" report can still be
-- made, or retried, after the preview's row is gone.
CREATE TABLE github_threads (
    repo             TEXT    NOT NULL,
    number           INTEGER NOT NULL,
    installation_id  INTEGER,
    head_sha         TEXT,
    comment_id       INTEGER,
    body_hash        TEXT,
    deployment_id    INTEGER,
    deployment_sha   TEXT,
    deployment_state TEXT,
    end_reason       TEXT,                             -- why the preview ended, for the final report
    -- set when the preview is destroyed; cleared once the destroyed report is on GitHub
    final_pending    INTEGER NOT NULL DEFAULT 0 CHECK (final_pending IN (0, 1)),
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (repo, number)
) WITHOUT ROWID;
CREATE INDEX github_threads_final ON github_threads (final_pending) WHERE final_pending = 1;

-- Answering a command on GitHub happens after it ran: the eyes reaction and the reply, then
-- rocket or confused. `answered` marks the end, so a restart never answers twice.
ALTER TABLE commands ADD COLUMN answered INTEGER NOT NULL DEFAULT 0;
ALTER TABLE commands ADD COLUMN reply_comment_id INTEGER;
ALTER TABLE commands ADD COLUMN installation_id INTEGER;
CREATE INDEX commands_unanswered ON commands (answered) WHERE answered = 0;

-- `/preview redeploy`: a new generation re-applies the helper Application (and asks Argo CD
-- for a hard refresh) even when nothing else changed.
ALTER TABLE previews ADD COLUMN redeploy_generation INTEGER NOT NULL DEFAULT 0;

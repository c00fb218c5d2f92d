-- Retention and the indexes of the read paths.
--
-- What belongs to a PR that no longer has a preview (its history, finished commands,
-- posted notices, its GitHub thread, its close) is deleted by the sweeper once nothing has
-- happened to the PR for the retention window, in small batches; the rest stays bounded.

-- History stays append-only for everything but the sweeper's retention: a delete is
-- refused unless the deleting transaction holds a row here (inserted and removed inside
-- that same transaction, so no other connection ever sees it).
CREATE TABLE history_retention (
    running INTEGER NOT NULL
);
DROP TRIGGER history_is_append_only_delete;
CREATE TRIGGER history_is_append_only_delete BEFORE DELETE ON history
WHEN NOT EXISTS (SELECT 1 FROM history_retention)
BEGIN SELECT RAISE(ABORT, 'history is append-only (only retention deletes it)'); END;

-- The dashboard's "recently destroyed" reads the newest few of these, not all history.
CREATE INDEX history_destroyed ON history (at, id) WHERE what = 'destroyed';
-- Retention walks history oldest first.
CREATE INDEX history_by_age ON history (at);

-- `GET /api/previews?author=` and `?cluster=` in (repo, number) order, a page at a time.
CREATE INDEX previews_by_author ON previews (author, repo, number);
CREATE INDEX previews_by_cluster_page ON previews (cluster, repo, number);

-- Retention of what outlives a preview, oldest first.
CREATE INDEX commands_by_age ON commands (created_at);
CREATE INDEX notices_by_age ON notices (created_at);
CREATE INDEX github_threads_by_age ON github_threads (updated_at);


-- Issue #39: the login in front of every preview.
-- Every request to a preview is checked by its host: found through the recorded names.
CREATE INDEX previews_by_host ON previews (json_extract(names, '$.host'));

-- Share links: a writer's time-limited pass to one preview, for reviewers without a GitHub
-- account. The link itself is sealed with the login key and never stored; it names this
-- row, which unshare marks revoked and the preview's end deletes (by cascade).
CREATE TABLE shares (
    id          TEXT    PRIMARY KEY,           -- 128 random bits, hex
    preview_id  INTEGER NOT NULL REFERENCES previews (id) ON DELETE CASCADE,
    created_by  TEXT    NOT NULL,              -- the writer's login
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
CREATE INDEX shares_by_preview ON shares (preview_id);

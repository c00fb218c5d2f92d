-- `/preview approve` covers the head a maintainer could have seen: both times are GitHub's
-- (`pull_request.updated_at` of the event that moved the head, `comment.created_at`), so
-- a slow or reordered delivery cannot make a later push look earlier than the comment.
ALTER TABLE previews ADD COLUMN head_changed_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE commands ADD COLUMN commented_at INTEGER;

-- This state's identity, on every Application it writes: orphan detection only ever looks
-- at its own, never at another previewd's sharing the same Argo CD.
CREATE TABLE instance (
    id TEXT NOT NULL
);

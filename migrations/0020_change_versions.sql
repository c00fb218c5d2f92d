-- Issue #42: a pass follows what changed, not how many previews exist. Every write that
-- gives the reconciler work stamps its preview with the next change version; the reconciler
-- reads "changed since my cursor" through the index. One counter row, bumped in the writing
-- transaction: on PostgreSQL its row lock holds concurrent writers in commit order, so a
-- reader that sees version N committed has seen every version below it (a sequence would
-- hand out numbers whose commits can land out of order, and a cursor would skip one).
CREATE TABLE change_counter (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);
INSERT INTO change_counter (id, version) VALUES (1, 0);
-- 0 for every row from before: the reconciler's first pass after a start looks at every
-- preview anyway.
ALTER TABLE previews ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
CREATE INDEX previews_by_version ON previews (version, id);

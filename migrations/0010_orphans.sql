-- Applications the sweeper found orphaned (this instance's labels, no preview owns them) and
-- that `sweep.remove_orphans` says must go. Intent only: the reconciler, the one writer to
-- the sink, looks again, deletes each (uid precondition) and then its row.
CREATE TABLE orphans (
    name TEXT PRIMARY KEY,
    found_at INTEGER NOT NULL
);

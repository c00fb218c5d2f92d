-- Placement reads each cluster's live previews (placed, not meant to be absent) for every
-- preview it places (issue #17). Counted through previews_by_cluster_live that read an
-- index entry per live preview: 0.6 ms at 5,200 previews, a quarter of a new PR's placement
-- at 1,000. These counts are kept by triggers, in the transaction that changes a preview,
-- whichever connection makes it; reading them is one row per cluster.
CREATE TABLE cluster_live (
    cluster TEXT    PRIMARY KEY NOT NULL,
    live    INTEGER NOT NULL CHECK (live >= 0)
) WITHOUT ROWID;

INSERT INTO cluster_live (cluster, live)
SELECT cluster, COUNT(*) FROM previews
 WHERE cluster IS NOT NULL AND desired != 'absent' GROUP BY cluster;

CREATE TRIGGER cluster_live_insert AFTER INSERT ON previews
WHEN NEW.cluster IS NOT NULL AND NEW.desired != 'absent'
BEGIN
    INSERT INTO cluster_live (cluster, live) VALUES (NEW.cluster, 1)
    ON CONFLICT (cluster) DO UPDATE SET live = live + 1;
END;

CREATE TRIGGER cluster_live_delete AFTER DELETE ON previews
WHEN OLD.cluster IS NOT NULL AND OLD.desired != 'absent'
BEGIN
    UPDATE cluster_live SET live = live - 1 WHERE cluster = OLD.cluster;
END;

-- Fires only when the preview's cluster or liveness moves (an UPDATE naming the columns
-- but leaving them as they were does nothing).
CREATE TRIGGER cluster_live_update AFTER UPDATE OF cluster, desired ON previews
WHEN OLD.cluster IS NOT NEW.cluster
  OR (OLD.desired = 'absent') IS NOT (NEW.desired = 'absent')
BEGIN
    UPDATE cluster_live SET live = live - 1
     WHERE cluster = OLD.cluster AND OLD.desired != 'absent';
    INSERT INTO cluster_live (cluster, live)
    SELECT NEW.cluster, 1 WHERE NEW.cluster IS NOT NULL AND NEW.desired != 'absent'
    ON CONFLICT (cluster) DO UPDATE SET live = live + 1;
END;

-- Its one reader was placement's count.
DROP INDEX previews_by_cluster_live;

-- A preview's names, recorded when it is created (JSON of `naming::Names`) and never
-- recomputed while it lives. NULL only for previews from before this migration: they are
-- given the names they were created with (`Names::legacy`) at their next reconcile.
ALTER TABLE previews ADD COLUMN names TEXT;

-- When a preview was ended on purpose (destroyed, expired, evicted), in previewd's clock:
-- any PR event not newer than that end (a replayed `opened` with a fresh delivery GUID, a
-- resync of a PR whose last update is older) leaves it ended, as a close already does.
ALTER TABLE closed_prs ADD COLUMN ended_at INTEGER;

CREATE TRIGGER previews_ended_on_purpose
AFTER UPDATE OF desired ON previews
WHEN NEW.desired = 'absent' AND OLD.desired != 'absent'
     AND NEW.end_reason IN ('destroyed', 'expired', 'evicted')
BEGIN
    INSERT INTO closed_prs (repo, number, pr_updated_at, ended_at)
    VALUES (NEW.repo, NEW.number, 0, NEW.updated_at)
    ON CONFLICT (repo, number) DO UPDATE SET
        ended_at = MAX(COALESCE(ended_at, 0), excluded.ended_at);
END;

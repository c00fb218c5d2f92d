-- A preview's names, recorded when it is created (JSON of `naming::Names`) and never
-- recomputed while it lives. NULL only for previews from before this migration: they are
-- given the names they were created with (`Names::legacy`) at their next reconcile.
ALTER TABLE previews ADD COLUMN names TEXT;

-- A preview ended on purpose (destroyed, expired, evicted): the `pull_request.updated_at` of
-- the newest event it had applied (GitHub's clock, like every event it is compared with),
-- and its head then. Any event not newer than that end (a captured `opened` re-sent with a
-- fresh delivery GUID) leaves it ended, as a close already does; resync does not bring back
-- an open PR still at the head that was ended (GitHub moves a PR's `updated_at` on every
-- comment, so its time alone cannot tell). A close clears the head: a reopen comes back.
ALTER TABLE closed_prs ADD COLUMN ended_at INTEGER;
ALTER TABLE closed_prs ADD COLUMN ended_sha TEXT;

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

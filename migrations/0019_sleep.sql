-- Issue #41: previews that cost only while used.
-- The last request the login let through (written at most once a minute per preview).
ALTER TABLE previews ADD COLUMN last_used_at INTEGER;
-- Asleep since (previewd's intent: the app rendered at zero replicas); NULL while awake.
ALTER TABLE previews ADD COLUMN sleeping_since INTEGER;
-- The last wake asked for (a request, /preview wake); cleared once the preview is ready.
ALTER TABLE previews ADD COLUMN woke_at INTEGER;
-- Sleeps that ended, in all, and what they saved in pod-seconds (the pods the namespace's
-- quota counted awake, times the sleep).
ALTER TABLE previews ADD COLUMN slept_seconds INTEGER NOT NULL DEFAULT 0;
ALTER TABLE previews ADD COLUMN saved_pod_seconds INTEGER NOT NULL DEFAULT 0;
-- What the namespace's ResourceQuota last counted while awake and ready: pods, CPU in
-- thousandths of a core, memory in bytes (NULL until counted; a directory sink never counts).
ALTER TABLE previews ADD COLUMN used_pods INTEGER;
ALTER TABLE previews ADD COLUMN used_cpu_millis INTEGER;
ALTER TABLE previews ADD COLUMN used_memory_bytes INTEGER;
-- The sweeper finds a repository's idle previews by when they were last active (a request,
-- a push, a wake, the start), among the awake deployed only: the cost follows what is idle
-- in the repositories that sleep, not how many previews exist.
CREATE INDEX previews_by_activity ON previews (
    repo, MAX(created_at, head_changed_at, COALESCE(last_used_at, 0), COALESCE(woke_at, 0))
) WHERE desired = 'deployed' AND sleeping_since IS NULL;

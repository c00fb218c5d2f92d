-- GitHub feedback runs beside the reconciler, bounded.
--
-- `standing`: whether the commenter had standing when the command ran (the PR's author, a
-- writer by association or by GitHub's word); NULL for commands that ran before this column.
-- Only they are answered with a comment; anyone else gets one reaction at most.
-- `answer`: how a command was answered: 'replied', 'reacted', 'silent' (over its actor's
-- hourly bound: nothing sent) or 'given_up' (GitHub kept refusing for good);
-- `answered_at` (previewd's clock) is what the hourly bound counts.
ALTER TABLE commands ADD COLUMN standing INTEGER CHECK (standing IN (0, 1));
ALTER TABLE commands ADD COLUMN answer TEXT;
ALTER TABLE commands ADD COLUMN answered_at INTEGER;
-- Permanent refusals (404, 410, 422, a 403 that is no rate limit) so far, per item: after a
-- few, the item is final and never tried again.
ALTER TABLE commands ADD COLUMN answer_failures INTEGER NOT NULL DEFAULT 0;
CREATE INDEX commands_answers_by_actor ON commands (lower(actor), answered_at)
    WHERE answer IN ('replied', 'reacted');

ALTER TABLE github_threads ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
-- The permanent error the thread's reporting ended on; NULL while it is still reported.
ALTER TABLE github_threads ADD COLUMN given_up TEXT;

ALTER TABLE notices ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;

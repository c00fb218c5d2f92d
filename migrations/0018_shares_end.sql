-- Issue #39: a preview's end revokes its share links, whatever ends it (a destroy, the PR
-- closed or unlabeled, expiry, eviction). The rows would go with the preview's row by
-- cascade, but that row outlives the end while the teardown runs, and a `/preview deploy`
-- after a destroy brings the same row back: a link made before the destroy must not open
-- the preview that comes back.
CREATE TRIGGER shares_end_with_their_preview AFTER UPDATE OF desired ON previews
WHEN NEW.desired = 'absent' AND OLD.desired != 'absent'
BEGIN
    UPDATE shares SET revoked_at = NEW.updated_at
     WHERE preview_id = NEW.id AND revoked_at IS NULL;
END;

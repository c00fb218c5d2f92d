-- Text compares byte by byte, as SQLite's BINARY does: a server created with a language's
-- collation (en_US.UTF-8 is common) would otherwise list repositories, names and stamps in
-- another order than the embedded store, and in another order on each server. Every text
-- column takes the "C" collation; a new one must say so too (tests/shared_state.rs checks).
-- The triggers that name a column in their WHEN or UPDATE OF hold it; they are made again.
DROP TRIGGER previews_ended_on_purpose ON previews;
DROP TRIGGER shares_end_with_their_preview ON previews;
DROP TRIGGER cluster_live_update ON previews;

DO $$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT table_name, column_name FROM information_schema.columns
        WHERE table_schema = current_schema() AND data_type = 'text'
          AND table_name <> '_sqlx_migrations'
        ORDER BY table_name, ordinal_position
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I TYPE text COLLATE "C"',
                       c.table_name, c.column_name);
    END LOOP;
END
$$;

CREATE TRIGGER previews_ended_on_purpose AFTER UPDATE OF desired ON previews
    FOR EACH ROW
    WHEN (NEW.desired = 'absent' AND OLD.desired != 'absent'
          AND NEW.end_reason IN ('destroyed', 'expired', 'evicted'))
    EXECUTE FUNCTION previews_ended_on_purpose();
CREATE TRIGGER shares_end_with_their_preview AFTER UPDATE OF desired ON previews
    FOR EACH ROW
    WHEN (NEW.desired = 'absent' AND OLD.desired != 'absent')
    EXECUTE FUNCTION shares_end_with_their_preview();
CREATE TRIGGER cluster_live_update AFTER UPDATE OF cluster, desired ON previews
    FOR EACH ROW
    WHEN (OLD.cluster IS DISTINCT FROM NEW.cluster
          OR (OLD.desired = 'absent') IS DISTINCT FROM (NEW.desired = 'absent'))
    EXECUTE FUNCTION cluster_live_count();

-- Drops role R, the last step of a teardown (drop.sql, template-drop.sql, after
-- revoke-elsewhere.sql), as the admin connected to `postgres`, with -v role=R. Whatever
-- another preview's code does, the teardown ends with R unable to log in and out of the way:
-- - An uncommitted GRANT to R holds a lock on it until its transaction ends (pg_shdepend.c
--   shdepLockAndCheckObject), which DROP ROLE would wait for: the sessions holding one end.
-- - A grant made again since revoke-elsewhere.sql looked (a race the granting code may win)
--   leaves R in use: it is then renamed pvgone_<oid> (NOLOGIN, no password), and
--   the name is free for the preview to come back. Every teardown drops whatever
--   pvgone_ roles nothing depends on any more (their granting database dropped since).
\set ON_ERROR_STOP on
SET lock_timeout = '10s';
SELECT set_config('previewd.role', :'role', false) AS role;
SELECT 'pg_authid' AS holders_of, coalesce((SELECT oid FROM pg_roles WHERE rolname = :'role'), 0) AS holders_oid \gset
\ir end-holders.sql
DO $$
DECLARE
  gone name;
BEGIN
  EXECUTE format('DROP ROLE IF EXISTS %I', current_setting('previewd.role'));
EXCEPTION WHEN dependent_objects_still_exist OR lock_not_available THEN
  -- RENAME and NOLOGIN take no lock on the role: a holder cannot stop them.
  SELECT 'pvgone_' || oid INTO gone FROM pg_roles WHERE rolname = current_setting('previewd.role');
  EXECUTE format('ALTER ROLE %I RENAME TO %I', current_setting('previewd.role'), gone);
  EXECUTE format('ALTER ROLE %I NOLOGIN PASSWORD NULL', gone);
  RAISE NOTICE 'role % is still granted or held (granted again since it was revoked): renamed %, dropped by a later teardown', current_setting('previewd.role'), gone;
END $$;
-- Only set-aside roles nothing depends on and nobody holds, each tried once and briefly: a
-- held one must not slow every teardown on the server, and two teardowns may sweep at once.
DO $$
DECLARE
  gone name;
BEGIN
  PERFORM set_config('lock_timeout', '100ms', true);
  FOR gone IN SELECT o.rolname FROM pg_roles o
               WHERE o.rolname ~ '^pvgone_[0-9]+$' AND pg_has_role(current_user, o.oid, 'MEMBER')
                 AND NOT EXISTS (SELECT 1 FROM pg_shdepend s WHERE s.refclassid = 'pg_authid'::regclass AND s.refobjid = o.oid)
                 AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'object'
                                    AND l.classid = 'pg_authid'::regclass AND l.objid = o.oid) LOOP
    BEGIN
      EXECUTE format('DROP ROLE IF EXISTS %I', gone);
    EXCEPTION WHEN dependent_objects_still_exist OR lock_not_available OR undefined_object OR internal_error THEN
      NULL;  -- granted or held again, or another teardown's sweep got there first
    END;
  END LOOP;
END $$;

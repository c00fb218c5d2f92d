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
SELECT pg_terminate_backend(l.pid) AS ended FROM pg_locks l JOIN pg_stat_activity a USING (pid)
  JOIN pg_roles r ON r.oid = a.usesysid
 WHERE l.locktype = 'object' AND l.classid = 'pg_authid'::regclass
   AND l.objid = (SELECT oid FROM pg_roles WHERE rolname = :'role')
   AND l.pid <> pg_backend_pid() AND NOT r.rolsuper AND pg_has_role(current_user, r.oid, 'MEMBER');
DO $$
DECLARE
  gone name;
BEGIN
  EXECUTE format('DROP ROLE IF EXISTS %I', current_setting('previewd.role'));
EXCEPTION WHEN dependent_objects_still_exist THEN
  SELECT 'pvgone_' || oid INTO gone FROM pg_roles WHERE rolname = current_setting('previewd.role');
  EXECUTE format('ALTER ROLE %I RENAME TO %I', current_setting('previewd.role'), gone);
  EXECUTE format('ALTER ROLE %I NOLOGIN PASSWORD NULL', gone);
  RAISE NOTICE 'role % is still granted something (granted again since it was revoked): renamed %, dropped by a later teardown', current_setting('previewd.role'), gone;
END $$;
DO $$
DECLARE
  gone name;
BEGIN
  FOR gone IN SELECT rolname FROM pg_roles WHERE rolname ~ '^pvgone_[0-9]+$' AND pg_has_role(current_user, oid, 'MEMBER') LOOP
    BEGIN
      EXECUTE format('DROP ROLE %I', gone);
    EXCEPTION WHEN dependent_objects_still_exist OR lock_not_available THEN
      NULL;  -- still granted somewhere: a later teardown
    END;
  END LOOP;
END $$;

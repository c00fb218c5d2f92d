-- Ends the sessions that hold a lock on one shared object a teardown is about to drop (a
-- database, or a role), and first takes their database from them, so they cannot come back
-- and take it again at once: a preview's code can hold one from its own database, for as
-- long as it likes, with no privilege (ALTER ROLE itself IN DATABASE <another's> SET ...
-- locks that database; an uncommitted GRANT to another's role locks that role,
-- pg_shdepend.c shdepLockAndCheckObject), and DROP would wait for it. Nothing an app does
-- in good faith locks another preview's database or role; the holder's app gets its own
-- database back at its next sync (access.sql). The admin's own sessions and superusers'
-- are left alone, and so are roles the admin is no member of (it could not end them).
-- Included with -v holders_of=pg_database|pg_authid -v holders_oid=OID (0: none), as the
-- admin connected to `postgres`.
SELECT coalesce(string_agg(DISTINCT format('REVOKE CONNECT, TEMPORARY ON DATABASE %I FROM %I', d.datname, r.rolname), '; '), '') AS holders_close
  FROM pg_locks l JOIN pg_stat_activity a USING (pid) JOIN pg_roles r ON r.oid = a.usesysid
  JOIN pg_database d ON d.datname = a.datname
 WHERE l.locktype = 'object' AND l.classid = :'holders_of'::regclass AND l.objid = :holders_oid
   AND l.pid <> pg_backend_pid() AND r.rolname <> current_user AND NOT r.rolsuper
   AND d.datdba = (SELECT oid FROM pg_roles WHERE rolname = current_user) \gset
:holders_close;
SELECT count(pg_terminate_backend(l.pid)) AS ended
  FROM pg_locks l JOIN pg_stat_activity a USING (pid) JOIN pg_roles r ON r.oid = a.usesysid
 WHERE l.locktype = 'object' AND l.classid = :'holders_of'::regclass AND l.objid = :holders_oid
   AND l.pid <> pg_backend_pid() AND r.rolname <> current_user AND NOT r.rolsuper
   AND pg_has_role(current_user, r.oid, 'MEMBER');

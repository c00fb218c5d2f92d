-- What a shared server must be before anything is provisioned on it, checked by create.sql
-- and template-create.sql (\ir) as the admin, with a clear message for each:
-- - psql 15 or newer (\getenv);
-- - PostgreSQL 15 or newer: before it a role administered itself when it was the session
--   user (PostgreSQL 15 release notes, "Remove the default ADMIN OPTION privilege a login
--   role has on its own role membership"), so a preview's code could take its role from the
--   admin or add another preview's role to it, and hold teardowns up; 13 and 14 are out of
--   support;
-- - no prepared transactions: one outlives every session and DROP DATABASE ... WITH
--   (FORCE), and only its preparer or a superuser may end it, so a preview's would hold its
--   own teardown, or another's (a GRANT to its role), for ever.
-- It also sets max_connections (the role's CONNECTION LIMIT, -v max_connections=N from
-- database.max_connections: an app could otherwise take every slot but the superusers',
-- and the role cannot raise it, having no CREATEROLE) to -1 when not given, and checks it.
SELECT set_config('previewd.psql_version', :'VERSION_NUM', false) AS psql_version;
DO $$ BEGIN
  IF current_setting('previewd.psql_version')::int < 150000 THEN
    RAISE EXCEPTION 'previewd needs psql 15 or newer (\getenv), this is %', current_setting('previewd.psql_version');
  END IF;
  IF current_setting('server_version_num')::int < 150000 THEN
    RAISE EXCEPTION 'previewd needs PostgreSQL 15 or newer on a server previews share (before 15 a role administers itself), this is %', current_setting('server_version');
  END IF;
  IF current_setting('max_prepared_transactions')::int > 0 THEN
    RAISE EXCEPTION 'max_prepared_transactions is %: a preview could keep a transaction that no teardown can end; set it to 0 on a server previews share', current_setting('max_prepared_transactions');
  END IF;
END $$;
\if :{?max_connections}
\else
\set max_connections -1
\endif
SELECT CASE WHEN :'max_connections' ~ '^(-1|[1-9][0-9]{0,4})$' THEN 'max_connections ok' ELSE (1 / 0)::text END AS check;

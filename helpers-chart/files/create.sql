-- Creates the preview's role and database on a shared PostgreSQL server. Idempotent: a
-- second run only re-applies the password. CREATE DATABASE cannot run in a transaction or
-- a DO block, hence the \gexec guards. Run as: psql -X -v role=R -v db=D -f create.sql
-- with the admin connection in PG* variables and the role's password in PREVIEW_PASSWORD
-- (read with \getenv, so it never appears on a command line).
\set ON_ERROR_STOP on
-- Version floors, with a clear message: psql 15 (\getenv below) and PostgreSQL 13 (the
-- drop's DROP DATABASE ... WITH (FORCE)).
SELECT set_config('previewd.psql_version', :'VERSION_NUM', false) AS psql_version;
DO $$ BEGIN
  IF current_setting('previewd.psql_version')::int < 150000 THEN
    RAISE EXCEPTION 'previewd needs psql 15 or newer (\getenv), this is %', current_setting('previewd.psql_version');
  END IF;
  IF current_setting('server_version_num')::int < 130000 THEN
    RAISE EXCEPTION 'previewd needs PostgreSQL 13 or newer (DROP DATABASE ... WITH (FORCE)), this is %', current_setting('server_version');
  END IF;
END $$;
\getenv pw PREVIEW_PASSWORD
-- An unset variable stays a literal and fails to parse; a short one is refused.
SELECT CASE WHEN length(:'pw') >= 16 THEN 'password ok' ELSE (1 / 0)::text END AS check;
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'role', :'pw')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', :'role', :'pw') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'role')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
-- Other previews' roles must not connect to this database.
SELECT format('REVOKE ALL ON DATABASE %I FROM PUBLIC', :'db') \gexec
SELECT format('GRANT ALL ON DATABASE %I TO %I', :'db', :'role') \gexec

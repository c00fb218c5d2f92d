-- Creates one generation of a repository's template database on the shared server, for its
-- migrations and seed to fill, and the role that owns what they make. Idempotent; a
-- generation already sealed (template-seal.sql) is left as it is. Each generation has a role
-- of its own (usually named as its database), dropped with it (template-drop.sql). Run as:
--   psql -X -v role=R -v db=D [-v managed_role=1] -f template-create.sql
-- with the admin connection in PG* variables and the role's SCRAM verifier in
-- PREVIEW_VERIFIER (as create.sql); with managed_role (cnpg mode, CloudNativePG's superuser)
-- the role is CloudNativePG's, made from a DatabaseRole, and only checked for. The database
-- may exist already (cnpg mode: a Database owned by the superuser), and is then kept.
--
-- The database belongs to the admin, never to the role: each preview's clone hands the
-- role's objects to the preview's role with REASSIGN OWNED, which also moves every
-- *database* the role owns, the template included (pg_shdepend.c shdepReassignOwned).
\set ON_ERROR_STOP on
-- The server's floors, and the role's session bound (-v max_connections=N): server.sql.
\ir server.sql
SELECT coalesce((SELECT NOT datallowconn FROM pg_database WHERE datname = :'db'), false) AS sealed \gset
\if :sealed
\echo template :db is sealed: nothing to do
\quit
\endif
\if :{?managed_role}
-- CloudNativePG's DatabaseRole makes the role (cnpg mode): it must exist, and only that.
SELECT set_config('previewd.role', :'role', false) AS role,
       set_config('previewd.exists', EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role')::text, false) AS exists;
DO $$ BEGIN
  IF NOT current_setting('previewd.exists')::boolean THEN
    RAISE EXCEPTION 'role % does not exist: its DatabaseRole makes it', current_setting('previewd.role');
  END IF;
END $$;
\else
\getenv verifier PREVIEW_VERIFIER
SELECT CASE WHEN :'verifier' ~ '^SCRAM-SHA-256\$[0-9]+:[A-Za-z0-9+/]+=*\$[A-Za-z0-9+/]+=*:[A-Za-z0-9+/]+=*$'
            THEN 'verifier ok' ELSE (1 / 0)::text END AS check;
SELECT format('CREATE ROLE %I LOGIN CONNECTION LIMIT %s PASSWORD %L', :'role', :max_connections, :'verifier')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
-- A role of that name made before (by hand, or by an older build) gets no more than this:
-- each attribute it holds is taken away, and only those (a non-superuser admin may not
-- name SUPERUSER at all, even to remove it: user.c AlterRole), a superuser refused.
SELECT set_config('previewd.role', :'role', false) AS role,
       set_config('previewd.superuser', (SELECT rolsuper FROM pg_roles WHERE rolname = :'role')::text, false) AS superuser;
DO $$ BEGIN
  IF current_setting('previewd.superuser')::boolean THEN
    RAISE EXCEPTION 'role % is a superuser: previewd will not build a template as it', current_setting('previewd.role');
  END IF;
END $$;
SELECT format('ALTER ROLE %I%s%s%s%s LOGIN CONNECTION LIMIT %s PASSWORD %L', rolname,
              CASE WHEN rolcreatedb THEN ' NOCREATEDB' END, CASE WHEN rolcreaterole THEN ' NOCREATEROLE' END,
              CASE WHEN rolreplication THEN ' NOREPLICATION' END, CASE WHEN rolbypassrls THEN ' NOBYPASSRLS' END,
              :max_connections, :'verifier')
  FROM pg_roles WHERE rolname = :'role' \gexec
\endif
-- The admin acts for the role (reassigning its objects into each clone, ending its
-- sessions at the seal, revoking what others granted it at the drop): see access.sql.
SELECT format('GRANT %I TO %I', :'role', current_user)
 WHERE NOT pg_has_role(current_user, :'role', 'MEMBER') \gexec
-- Closed (CONNECTION LIMIT 0: superusers are exempt) until its privileges are set.
SELECT format('CREATE DATABASE %I TEMPLATE template0 CONNECTION LIMIT 0', :'db')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
-- Only the role (and the admin) may connect, and only until the generation is sealed; it
-- may create schemas and extensions, as an app's migrations do in a database of its own.
SELECT format('REVOKE ALL ON DATABASE %I FROM PUBLIC', :'db') \gexec
SELECT format('GRANT CONNECT, TEMPORARY, CREATE ON DATABASE %I TO %I', :'db', :'role') \gexec
-- Open to these two now: the admin, superuser or not, may connect for what follows.
SELECT format('ALTER DATABASE %I WITH CONNECTION LIMIT -1', :'db') \gexec
-- Since PostgreSQL 15 `public` belongs to the database's owner (the admin here) and only it
-- may create there; the role's migrations need to. A half-built generation holds what the
-- role's code made: the statement is made here and sent as a plain command under a
-- search_path of the catalog only (as create.sql does in a clone).
SELECT format('GRANT USAGE, CREATE ON SCHEMA public TO %I', :'role') AS grant_public \gset
\setenv PGOPTIONS '-c search_path=pg_catalog,pg_temp'
\c :"db"
:grant_public;
\setenv PGOPTIONS
\c postgres

-- Creates the preview's role and database on a shared PostgreSQL server. Idempotent: a
-- second run only re-applies the password. CREATE DATABASE cannot run in a transaction or
-- a DO block, hence the \gexec guards. Run as: psql -X -v role=R -v db=D -f create.sql
-- with the admin connection in PG* variables and the role's SCRAM-SHA-256 verifier (never
-- the password: previewd computes the verifier) in PREVIEW_VERIFIER, read with \getenv so
-- that it never appears on a command line.
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

-- Isolation. PostgreSQL grants CONNECT (and TEMPORARY) on every database to PUBLIC by
-- default (docs: ddl-priv.html, "Default privileges"), so a new role could connect to
-- `postgres`, `template1` and any database nobody closed. Closing the two that every
-- server has is a cluster-wide change, idempotent, and needs their owner or a superuser;
-- owners and superusers keep their access (other roles that need them: GRANT CONNECT).
REVOKE CONNECT, TEMPORARY ON DATABASE postgres FROM PUBLIC;
REVOKE CONNECT, TEMPORARY ON DATABASE template1 FROM PUBLIC;
-- A REVOKE without the right only warns, and other databases may be open too: refuse to
-- provision until no database but this preview's own is open to every role.
SELECT set_config('previewd.db', :'db', false) AS db,
       set_config('previewd.open', coalesce(string_agg(quote_ident(datname), ', ' ORDER BY datname), ''), false) AS open
  FROM pg_database
 WHERE datallowconn AND datname <> :'db' AND has_database_privilege('public', oid, 'CONNECT');
DO $$ BEGIN
  IF current_setting('previewd.open') <> '' THEN
    RAISE EXCEPTION 'every role may connect to database(s) %, so preview % could: run REVOKE CONNECT ON DATABASE <name> FROM PUBLIC for each (as its owner) and GRANT CONNECT to the roles that need it', current_setting('previewd.open'), current_setting('previewd.db');
  END IF;
END $$;

\getenv verifier PREVIEW_VERIFIER
\if :{?verifier}
-- A verifier is stored as it is (PostgreSQL src/backend/libpq/crypt.c, encrypt_password:
-- get_password_type recognises the SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>
-- form); anything else would be taken for a password and hashed, so check the form first.
SELECT CASE WHEN :'verifier' ~ '^SCRAM-SHA-256\$[0-9]+:[A-Za-z0-9+/]+=*\$[A-Za-z0-9+/]+=*:[A-Za-z0-9+/]+=*$'
            THEN 'verifier ok' ELSE (1 / 0)::text END AS check;
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'role', :'verifier')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', :'role', :'verifier') \gexec
\else
-- A Secret sealed by an older previewd holds only the password, which must not be sent as
-- SQL text: its role, made then, keeps the password it has.
SELECT set_config('previewd.role', :'role', false) AS role,
       set_config('previewd.exists', EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role')::text, false) AS exists;
DO $$ BEGIN
  IF NOT current_setting('previewd.exists')::boolean THEN
    RAISE EXCEPTION 'no PREVIEW_VERIFIER for the new role %: its Secret was sealed by an older previewd; recreate the preview', current_setting('previewd.role');
  END IF;
END $$;
\endif
-- A new database opens for CONNECT to PUBLIC: created with CONNECTION LIMIT 0 (superusers
-- are exempt), it stays closed to every role until its privileges are set, and a run that
-- dies halfway leaves it closed; the limit is lifted last.
\if :{?template}
-- A clone of the repository's template database (`-v template=T -v template_role=O`, made
-- by template-create.sql and template-seal.sql): the whole dataset in seconds instead of a
-- seed. FILE_COPY (PostgreSQL 15+) copies the files and writes almost no WAL, where the
-- default WAL_LOG logs every block of the template (dbcommands.c, CreateDatabaseUsingWalLog)
-- on every clone; it costs two checkpoints instead. Only a sealed generation is cloned,
-- and the preview's database is left as it is when the template is not one.
SELECT set_config('previewd.template', :'template', false) AS template,
       set_config('previewd.sealed', coalesce((SELECT datistemplate AND NOT datallowconn FROM pg_database
                                               WHERE datname = :'template'), false)::text, false) AS sealed,
       set_config('previewd.template_role_owns', coalesce((SELECT string_agg(datname, ', ') FROM pg_database
                                                           WHERE datdba = (SELECT oid FROM pg_roles WHERE rolname = :'template_role')), ''), false) AS owns;
DO $$ BEGIN
  IF NOT current_setting('previewd.sealed')::boolean THEN
    RAISE EXCEPTION 'template % does not exist or is not sealed: nothing was cloned or dropped', current_setting('previewd.template');
  END IF;
  -- REASSIGN OWNED also moves every database the role owns (pg_shdepend.c
  -- shdepReassignOwned): a role owning one would hand it to this preview.
  IF current_setting('previewd.template_role_owns') <> '' THEN
    RAISE EXCEPTION 'the template role owns database(s) %: REASSIGN OWNED would give them to the preview', current_setting('previewd.template_role_owns');
  END IF;
END $$;
-- `reclone` (a reseed) drops the preview's database first, closing the sessions the app
-- holds; unmarked first, as the preview's role may have made it a template (which no DROP
-- takes).
\if :{?reclone}
SELECT format('ALTER DATABASE %I WITH IS_TEMPLATE false', :'db')
 WHERE EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', :'db') \gexec
\endif
SELECT format('CREATE DATABASE %I OWNER %I TEMPLATE %I CONNECTION LIMIT 0%s', :'db', :'role', :'template',
              CASE WHEN current_setting('server_version_num')::int >= 150000 THEN ' STRATEGY FILE_COPY' END)
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
\else
-- From template0: whatever an operator (or anyone able to write there) put in template1
-- would otherwise be copied into every preview (docs: manage-ag-templatedbs.html).
SELECT format('CREATE DATABASE %I OWNER %I TEMPLATE template0 CONNECTION LIMIT 0', :'db', :'role')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
\endif
-- Other previews' roles must not connect to this database.
SELECT format('REVOKE ALL ON DATABASE %I FROM PUBLIC', :'db') \gexec
SELECT format('GRANT ALL ON DATABASE %I TO %I', :'db', :'role') \gexec
\if :{?template}
-- CREATE DATABASE ... OWNER moves only the database: every object inside still belongs to
-- the template's object role, and REASSIGN OWNED works in the current database only, so it
-- runs connected to the clone. That database is the preview's (its code may have planted a
-- `public.format` or set a search_path on it): the statements are made here, in
-- `postgres`, and sent there as plain utility commands under a search_path of the catalog
-- only, so nothing the preview defined runs as the admin.
SELECT format('REASSIGN OWNED BY %I TO %I', :'template_role', :'role') AS reassign,
       format('REVOKE ALL ON SCHEMA public FROM %I', :'template_role') AS revoke_public \gset
\setenv PGOPTIONS '-c search_path=pg_catalog,pg_temp'
\c :"db"
:reassign;
:revoke_public;
\setenv PGOPTIONS
\c postgres
\endif
SELECT format('ALTER DATABASE %I WITH CONNECTION LIMIT -1', :'db') \gexec

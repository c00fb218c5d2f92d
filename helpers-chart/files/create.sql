-- Creates the preview's role and database on a shared PostgreSQL server. Idempotent: a
-- second run only re-applies the password. CREATE DATABASE cannot run in a transaction or
-- a DO block, hence the \gexec guards. Run as: psql -X -v role=R -v db=D -f create.sql
-- with the admin connection in PG* variables and the role's SCRAM-SHA-256 verifier (never
-- the password: previewd computes the verifier) in PREVIEW_VERIFIER, read with \getenv so
-- that it never appears on a command line. A preview cloned from the repository's template
-- adds -v template=T -v template_role=O -v clone=N (template-clone.sql). The admin owns
-- the database and the role owns what its code makes inside: access.sql says why.
\set ON_ERROR_STOP on
-- The server's floors (psql and PostgreSQL 15, no prepared transactions): server.sql.
\ir server.sql

-- Isolation. PostgreSQL grants CONNECT (and TEMPORARY) on every database to PUBLIC by
-- default (docs: ddl-priv.html, "Default privileges"), so a new role could connect to
-- `postgres`, `template1` and any database nobody closed. Closing the two that every
-- server has is a cluster-wide change, idempotent, and needs their owner or a superuser;
-- owners and superusers keep their access (other roles that need them: GRANT CONNECT).
-- Only while still granted, and retried: two create Jobs at once would otherwise both rewrite
-- the same pg_database row, and the second fails "tuple concurrently updated" (an internal
-- error, XX000) once the first commits; looking again, it finds the work done.
DO $$ BEGIN
  FOR attempt IN 1..10 LOOP
    BEGIN
      IF has_database_privilege('public', 'postgres', 'CONNECT') OR has_database_privilege('public', 'postgres', 'TEMPORARY') THEN
        REVOKE CONNECT, TEMPORARY ON DATABASE postgres FROM PUBLIC;
      END IF;
      IF has_database_privilege('public', 'template1', 'CONNECT') OR has_database_privilege('public', 'template1', 'TEMPORARY') THEN
        REVOKE CONNECT, TEMPORARY ON DATABASE template1 FROM PUBLIC;
      END IF;
      RETURN;
    EXCEPTION WHEN internal_error THEN
      PERFORM pg_sleep(0.05 * attempt);
    END;
  END LOOP;
  RAISE EXCEPTION 'could not close databases postgres and template1 to PUBLIC: another session kept rewriting them';
END $$;
-- A REVOKE without the right only warns, and other databases may be open too: refuse to
-- provision until no database but this preview's own is open to every role. One with
-- CONNECTION LIMIT 0 admits no role (a create Job that stopped before access.sql, a
-- database the size guard closed).
SELECT set_config('previewd.db', :'db', false) AS db,
       set_config('previewd.open', coalesce(string_agg(quote_ident(datname), ', ' ORDER BY datname), ''), false) AS open
  FROM pg_database
 WHERE datallowconn AND datconnlimit <> 0 AND datname <> :'db' AND has_database_privilege('public', oid, 'CONNECT');
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
SELECT format('CREATE ROLE %I LOGIN CONNECTION LIMIT %s PASSWORD %L', :'role', :max_connections, :'verifier')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER ROLE %I LOGIN CONNECTION LIMIT %s PASSWORD %L', :'role', :max_connections, :'verifier') \gexec
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
-- are exempt), it stays closed to every role until its privileges are set (access.sql), and
-- a run that dies halfway leaves it closed.
\if :{?template}
-- A clone of a sealed generation of the repository's template database
-- (`-v template=T -v template_role=O -v clone=N`): template-clone.sql, beside this file,
-- which sets the privileges itself.
\ir template-clone.sql
\else
-- From template0: whatever an operator (or anyone able to write there) put in template1
-- would otherwise be copied into every preview (docs: manage-ag-templatedbs.html). Owned by
-- the admin, never by the role.
SELECT format('CREATE DATABASE %I TEMPLATE template0 CONNECTION LIMIT 0', :'db')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
\ir access.sql
\endif

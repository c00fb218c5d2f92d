-- Clones a preview's database from a sealed generation of the repository's template
-- (template-create.sql, template-seal.sql): the whole dataset in seconds instead of a seed.
-- Included by create.sql (`\ir`) on a shared server, run on its own by the cnpg mode's clone
-- Job. Run as:
--   psql -X -v role=R -v db=D -v template=T -v template_role=O -v clone=N -f template-clone.sql
-- with a superuser (or the server's admin) connection in PG* variables; the role R exists.
-- The clone belongs to the admin, its objects to the role R (access.sql, included below,
-- says why), so the marker below is the admin's: the preview's code cannot forge it.
--
-- The clone generation N (previewd bumps it for `/preview reseed`) is recorded on the
-- database with COMMENT ON DATABASE once the clone is complete, and read back from
-- `postgres` (shobj_description: no connection to the preview's database). Everything below
-- runs only when the database is missing or does not record N: the create Job runs on every
-- sync, when the generation the preview was cloned from may long be gone, and a rerun at the
-- same N touches neither the template nor the data. A database that records another N (a
-- reseed), or none (a clone that died halfway), is dropped WITH (FORCE) and cloned again.
\set ON_ERROR_STOP on
\if :{?clone}
\else
DO $$ BEGIN
  RAISE EXCEPTION 'a clone needs -v clone=N (the clone generation previewd records)';
END $$;
\endif
SELECT set_config('previewd.db', :'db', false) AS db,
       set_config('previewd.clone', :'clone', false) AS clone,
       set_config('previewd.clone_mark', 'previewd clone ' || :'clone', false) AS clone_mark;
DO $$ BEGIN
  IF current_setting('previewd.clone') !~ '^[1-9][0-9]{0,9}$' THEN
    RAISE EXCEPTION 'clone generation % is not a positive integer', current_setting('previewd.clone');
  END IF;
END $$;
SELECT NOT EXISTS (SELECT 1 FROM pg_database
                    WHERE datname = :'db'
                      AND shobj_description(oid, 'pg_database') = current_setting('previewd.clone_mark'))
       AS clone_needed \gset
\if :clone_needed
-- Only a sealed generation is cloned (a clone never meets a session in it), and nothing is
-- dropped unless it is one.
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
\echo cloning :db from :template (clone generation :clone)
-- A reseed (or a clone that died halfway) replaces the database, closing the sessions the
-- app holds; unmarked first, as the preview's role may have made it a template (which no
-- DROP takes, even WITH (FORCE): dbcommands.c dropdb).
SELECT format('ALTER DATABASE %I WITH IS_TEMPLATE false', :'db')
 WHERE EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', :'db') \gexec
-- A spare clone the generation's pool keeper made ahead of time (template-spares.sql), when
-- there is one: renamed to the preview's database, it is the copy CREATE DATABASE would make
-- now, without copying a file. Two previews claiming at once never get the same spare: the
-- second rename waits for the first one's lock, then finds the name gone (dbcommands.c
-- get_db_info looks again after locking) and tries the next spare. Any spare that cannot be
-- taken is left for the keeper; with none left, the copy below is made as before.
SELECT set_config('previewd.spares', 'pvs_' || substr(encode(sha256(convert_to(:'template', 'UTF8')), 'hex'), 1, 16) || '_', false) AS spares,
       set_config('previewd.role', :'role', false) AS role;
DO $$
DECLARE
  spare name;
BEGIN
  -- A spare someone holds a lock on (a preview's code can, on any database: ALTER ROLE
  -- itself IN DATABASE <spare> SET ...) is passed over, not waited for.
  PERFORM set_config('lock_timeout', '2s', true);
  FOR spare IN SELECT datname FROM pg_database
                WHERE starts_with(datname, current_setting('previewd.spares')) ORDER BY datname LOOP
    BEGIN
      EXECUTE format('ALTER DATABASE %I RENAME TO %I', spare, current_setting('previewd.db'));
      -- Opened as a new database is below (closed to every role, CONNECTION LIMIT 0), all
      -- in this one transaction: never open to every role, not for a moment.
      EXECUTE format('REVOKE ALL ON DATABASE %I FROM PUBLIC', current_setting('previewd.db'));
      EXECUTE format('ALTER DATABASE %I WITH CONNECTION LIMIT 0 ALLOW_CONNECTIONS true', current_setting('previewd.db'));
      RAISE NOTICE 'claimed spare clone %', spare;
      RETURN;
    EXCEPTION WHEN OTHERS THEN
      RAISE NOTICE 'spare clone % not taken: %', spare, SQLERRM;
    END;
  END LOOP;
END $$;
-- FILE_COPY (PostgreSQL 15+) copies the files and writes almost no WAL, where the default
-- WAL_LOG logs every block of the template (dbcommands.c, CreateDatabaseUsingWalLog) on every
-- clone; it costs two checkpoints instead. CONNECTION LIMIT 0 (superusers are exempt) keeps it
-- closed until its privileges are set (a spare is made closed); a run that dies halfway
-- leaves it closed.
SELECT format('CREATE DATABASE %I TEMPLATE %I CONNECTION LIMIT 0%s', :'db', :'template',
              CASE WHEN current_setting('server_version_num')::int >= 150000 THEN ' STRATEGY FILE_COPY' END)
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
\endif
-- Other previews' roles must not connect to it, nor the template's role (access.sql); the
-- limit is lifted there, so the admin, superuser or not, may connect for what follows.
\ir access.sql
\if :clone_needed
-- A copy holds the template's objects, and they belong to the generation's role. REASSIGN OWNED works in the current database only, so it runs
-- connected to the clone; it ignores default ACLs ("they should be handled by DROP OWNED",
-- pg_shdepend.c shdepReassignOwned), so DROP OWNED follows: it revokes what the role was
-- granted in the clone (USAGE, CREATE on public) and drops its default privileges, which an
-- ALTER DEFAULT PRIVILEGES in the template's migrations made. After both, nothing in the
-- clone depends on the generation's role, and the generation (database and role) can be
-- dropped while the clone lives. That database is the preview's (its code may have planted
-- a `public.format` or set a search_path on it): the statements are made here, in
-- `postgres`, and sent there as plain utility commands under a search_path of the catalog
-- only, so nothing the preview defined runs as the admin.
SELECT format('REASSIGN OWNED BY %I TO %I', :'template_role', :'role') AS reassign,
       format('DROP OWNED BY %I', :'template_role') AS drop_owned \gset
\setenv PGOPTIONS '-c search_path=pg_catalog,pg_temp'
\c :"db"
:reassign;
:drop_owned;
\setenv PGOPTIONS
\c postgres
-- Complete: recorded last (a new session: from psql's variables), so a run that dies before
-- this point clones again next time.
SELECT format('COMMENT ON DATABASE %I IS %L', :'db', 'previewd clone ' || :'clone') \gexec
\else
\echo :db already records clone generation :clone: the template is not touched
\endif

-- Sets a preview database's ownership and privileges to exactly what previewd grants, on
-- every run (create.sql and template-clone.sql include it; cnpg mode's superuser Jobs run
-- it). Run as: psql -X -v role=R -v db=D, connected as the admin to `postgres`; role R and
-- database D exist.
--
-- The tenancy model. The preview's migrations, seed and app are the PR author's code: its
-- role is hostile, and it shares the server with every other preview. So the role owns
-- nothing previewd or another preview reads back or depends on:
-- - The admin owns the database. Only an owner may GRANT on it (an attacker opening it to
--   PUBLIC stopped every other preview's create.sql), ALTER DATABASE it (IS_TEMPLATE true
--   makes any DROP DATABASE fail, dbcommands.c dropdb) or COMMENT ON it (the clone marker
--   /preview reseed reads): aclchk.c and dbcommands.c check ownership, not privileges.
-- - The role gets CONNECT, TEMPORARY and CREATE on it (CREATE: its migrations make schemas
--   and trusted extensions, extension.c execute_extension_script), and USAGE and CREATE on
--   `public` (PostgreSQL 15+ gives `public` to the database's owner, pg_database_owner). It
--   owns every object its code makes, all inside its own database, which goes first.
-- - The admin is a member of the role (GRANT role TO admin): a non-superuser admin
--   (managed PostgreSQL: CREATEDB + CREATEROLE) needs the role's privileges to take its
--   database over from an older previewd's layout, to end its sessions (DROP DATABASE ...
--   WITH (FORCE), pg_terminate_backend) and to revoke what other previews granted it
--   (DROP OWNED, drop.sql). The grant gives the role nothing of the admin's.
\set ON_ERROR_STOP on
SELECT set_config('previewd.role', :'role', false) AS role;
SELECT format('GRANT %I TO %I', :'role', current_user)
 WHERE NOT pg_has_role(current_user, :'role', 'MEMBER') \gexec
-- A database an older previewd made belongs to the role: taken over (the role's code may
-- have marked it a template, which only the owner could).
SELECT format('ALTER DATABASE %I OWNER TO %I', :'db', current_user)
  FROM pg_database WHERE datname = :'db' AND datdba <> (SELECT oid FROM pg_roles WHERE rolname = current_user) \gexec
SELECT format('ALTER DATABASE %I WITH IS_TEMPLATE false', :'db')
  FROM pg_database WHERE datname = :'db' AND datistemplate \gexec
-- Exactly these grants: whatever an earlier owner granted (to PUBLIC, to another preview's
-- role, with what they granted on) is revoked. An ownership change keeps the ACL, the new
-- owner standing in as grantor (acl.c aclnewowner), hence by grantee.
SELECT format('REVOKE ALL ON DATABASE %I FROM PUBLIC', :'db') \gexec
SELECT DISTINCT format('REVOKE ALL ON DATABASE %I FROM %I CASCADE', :'db', r.rolname)
  FROM pg_database d, aclexplode(d.datacl) a JOIN pg_roles r ON r.oid = a.grantee
 WHERE d.datname = :'db' AND r.rolname NOT IN (:'role', current_user) \gexec
-- Past its bound (guard.sql closed it, or a clone brought more), the role gets nothing back
-- and the Job fails, saying why.
\if :{?max_bytes}
SELECT set_config('previewd.db', :'db', false) AS db,
       set_config('previewd.max_bytes', :'max_bytes', false) AS max_bytes,
       set_config('previewd.bytes', pg_database_size(:'db')::text, false) AS bytes;
SELECT current_setting('previewd.bytes')::bigint > current_setting('previewd.max_bytes')::bigint AS over \gset
\if :over
SELECT format('REVOKE ALL ON DATABASE %I FROM %I', :'db', :'role') \gexec
DO $$ BEGIN
  RAISE EXCEPTION 'database % holds % bytes, over database.max_size (% bytes): it stays closed; /preview reseed (template databases) or /preview destroy',
    current_setting('previewd.db'), current_setting('previewd.bytes'), current_setting('previewd.max_bytes');
END $$;
\endif
\endif
SELECT format('GRANT CONNECT, TEMPORARY, CREATE ON DATABASE %I TO %I', :'db', :'role') \gexec
-- Closed to every other role now: the limit a new database was made with is lifted, so the
-- admin (no superuser, not exempt from it: postinit.c CheckMyDatabase) may connect.
SELECT format('ALTER DATABASE %I WITH CONNECTION LIMIT -1', :'db') \gexec
-- The database holds the role's code's objects (a `public.format`, say): the statement is
-- made here and sent as a plain command under a search_path of the catalog only, so nothing
-- the preview defined runs as the admin.
SELECT format('GRANT USAGE, CREATE ON SCHEMA public TO %I', :'role') AS grant_public \gset
\setenv PGOPTIONS '-c search_path=pg_catalog,pg_temp'
\c :"db"
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'public') AS has_public \gset
\if :has_public
:grant_public;
\endif
\setenv PGOPTIONS
\c postgres

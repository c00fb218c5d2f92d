-- Drops the preview's database (closing its open sessions) and then its role. Idempotent. Run as: psql -X -v role=R -v db=D -f drop.sql, as the admin: a
-- superuser, or a member of R (access.sql), which ending R's sessions needs.
\set ON_ERROR_STOP on
-- The role loses its login first: if it cannot be dropped, no working credential is left
-- behind. Its database is unmarked first: a template takes no DROP, even WITH (FORCE)
-- (dbcommands.c dropdb); a database an older previewd gave the role may have been made one.
SELECT format('ALTER ROLE %I NOLOGIN PASSWORD NULL', :'role')
 WHERE EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('GRANT %I TO %I', :'role', current_user)
 WHERE EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role')
   AND NOT pg_has_role(current_user, :'role', 'MEMBER') \gexec
SELECT format('ALTER DATABASE %I WITH IS_TEMPLATE false', :'db')
 WHERE EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db' AND datistemplate) \gexec
-- No wait is unbounded (a Job that fails is retried), and whoever holds the database is
-- ended first (end-holders.sql).
SET lock_timeout = '10s';
SELECT 'pg_database' AS holders_of, coalesce((SELECT oid FROM pg_database WHERE datname = :'db'), 0) AS holders_oid \gset
\ir end-holders.sql
SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', :'db') \gexec
-- What other previews' code granted the role, in their databases.
\ir revoke-elsewhere.sql
\ir drop-role.sql

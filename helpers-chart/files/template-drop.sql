-- Drops one generation of a template database (no preview needs it any more) and its role:
-- each generation has a role of its own, and a clone keeps nothing of it (template-clone.sql
-- reassigns its objects and drops what it was granted, default privileges included), so the
-- role can go with its database while clones live. A template cannot be dropped, even
-- WITH (FORCE): it is unmarked first (dbcommands.c dropdb). Idempotent. Run as:
--   psql -X -v role=R -v db=D -f template-drop.sql
-- as the admin: a superuser, or a member of R (template-create.sql makes it one).
\set ON_ERROR_STOP on
-- The role loses its login first: if it cannot be dropped, no working credential is left.
SELECT format('ALTER ROLE %I NOLOGIN PASSWORD NULL', :'role')
 WHERE EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('GRANT %I TO %I', :'role', current_user)
 WHERE EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role')
   AND NOT pg_has_role(current_user, :'role', 'MEMBER') \gexec
SELECT format('ALTER DATABASE %I WITH IS_TEMPLATE false', :'db')
 WHERE EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
-- The template before its spares: DROP DATABASE waits for every copy still being made from
-- it (dbcommands.c createdb locks its template, get_db_info(dbtemplate, ShareLock), until it
-- commits), so once it is gone no spare can appear, and the list below is complete.
-- Whoever else holds the template is ended first (end-holders.sql); a copy the keeper (the
-- admin) is making is waited for, a minute at most (a Job that fails is retried).
SET lock_timeout = '60s';
SELECT 'pg_database' AS holders_of, coalesce((SELECT oid FROM pg_database WHERE datname = :'db'), 0) AS holders_oid \gset
\ir end-holders.sql
SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', :'db') \gexec
-- Its spare clones (template-spares.sql): their objects belong to the role.
SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', datname) FROM pg_database
 WHERE starts_with(datname, 'pvs_' || substr(encode(sha256(convert_to(:'db', 'UTF8')), 'hex'), 1, 16) || '_') \gexec
-- What other previews' code granted the role, in their databases.
\ir revoke-elsewhere.sql
\ir drop-role.sql

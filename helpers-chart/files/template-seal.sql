-- Seals a generation of a template database once its migrations and seed succeeded: no
-- one may connect any more (ALLOW_CONNECTIONS false holds for superusers too: postinit.c),
-- so a clone never meets "source database ... is being accessed by other users", which
-- CREATE DATABASE raises after five seconds (procarray.c CountOtherDBBackends); and it is
-- marked IS_TEMPLATE. Idempotent. Run as: psql -X -v role=R -v db=D -f template-seal.sql
\set ON_ERROR_STOP on
SELECT format('REVOKE ALL ON DATABASE %I FROM %I', :'db', :'role') \gexec
-- Sessions opened before stay open (neither REVOKE nor ALTER ends them): end them.
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = :'db' AND pid <> pg_backend_pid();
SELECT datallowconn AS open FROM pg_database WHERE datname = :'db' \gset
\if :open
-- What the generation's code granted other roles goes before the seal: every clone, spare
-- and the template itself would carry it (CREATE DATABASE copies the catalogs and their
-- pg_shdepend rows, dbcommands.c copyTemplateDependencies), and no one may connect to a
-- sealed database to revoke it, so those roles could never be dropped (revoke-elsewhere.sql).
-- A grant to a role the admin cannot act for fails the seal, naming it. The role's code
-- can no longer connect to grant again. Each DROP OWNED runs as the generation's role too,
-- which owns what its code made: a non-superuser's REVOKE removes only its chosen grantor's
-- entries (revoke-elsewhere.sql says more).
SELECT coalesce(string_agg(format('GRANT %1$I TO %2$I; SET ROLE %2$I; DROP OWNED BY %1$I; RESET ROLE; REVOKE %1$I FROM %2$I; DROP OWNED BY %1$I;',
                                  r.rolname, :'role'), ' ' ORDER BY r.rolname), '') AS revoke_others,
       count(*) > 0 AS others_granted
  FROM pg_roles r
 WHERE r.rolname NOT IN (:'role', current_user) AND r.oid <> 10 AND NOT r.rolsuper
   AND r.oid IN (SELECT s.refobjid FROM pg_shdepend s
                  WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = :'db')
                    AND s.refclassid = 'pg_authid'::regclass) \gset
\if :others_granted
\echo the generation granted other roles: :revoke_others
\setenv PGOPTIONS '-c search_path=pg_catalog,pg_temp'
\c :"db"
BEGIN;
:revoke_others
COMMIT;
\setenv PGOPTIONS
\c postgres
\endif
\endif
SELECT format('ALTER DATABASE %I WITH ALLOW_CONNECTIONS false', :'db') \gexec
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = :'db' AND pid <> pg_backend_pid();
SELECT format('ALTER DATABASE %I WITH IS_TEMPLATE true', :'db') \gexec

-- Revokes whatever other databases grant role R, so that DROP ROLE R succeeds: any role may
-- GRANT on what it owns to any other role it can name (pg_roles is readable by all), so a
-- preview's code can grant another preview's role a privilege on its own table, and
-- PostgreSQL refuses to drop a role still granted something ("cannot be dropped because some
-- objects depend on it", pg_shdepend.c checkSharedDependencies). DROP OWNED works in the
-- current database only: this connects to each database recording a dependency on R
-- (pg_shdepend, shared by all of them) and runs it there, then includes itself again until
-- none is left. Included by drop.sql and template-drop.sql, connected to `postgres` as the
-- admin, a member of R (access.sql), with -v role=R.
--
-- Those databases hold other previews' code: each statement is made here and sent there as
-- a plain command under a search_path of the catalog only. DROP OWNED revokes R's
-- privileges there and drops what R owns there, which can only be its grants: no other role
-- can make R own something (ALTER ... OWNER needs membership in R).
\if :{?revoke_rounds}
\else
\set revoke_rounds 0
\endif
SELECT :revoke_rounds + 1 AS revoke_rounds, :revoke_rounds >= 100 AS revoke_stuck \gset
\if :revoke_stuck
DO $$ BEGIN
  RAISE EXCEPTION 'a database still grants the role after 100 rounds of DROP OWNED: it is being granted again as fast as it is revoked';
END $$;
\endif
SELECT count(*) > 0 AS revoke_needed, min(d.datname) AS revoke_in,
       format('DROP OWNED BY %I', :'role') AS revoke_statement
  FROM pg_database d
 WHERE d.datallowconn
   AND d.oid IN (SELECT s.dbid FROM pg_shdepend s JOIN pg_roles r ON r.oid = s.refobjid
                  WHERE s.refclassid = 'pg_authid'::regclass AND r.rolname = :'role') \gset
\if :revoke_needed
\echo revoking what database :revoke_in grants :role
\setenv PGOPTIONS '-c search_path=pg_catalog,pg_temp'
\c :"revoke_in"
:revoke_statement;
\setenv PGOPTIONS
\c postgres
\ir revoke-elsewhere.sql
\endif

-- Revokes whatever other databases grant role R, so that DROP ROLE R succeeds: any role may
-- GRANT on what it owns to any other role it can name (pg_roles is readable by all), so a
-- preview's code can grant another preview's role a privilege on its own table, and
-- PostgreSQL refuses to drop a role still granted something ("cannot be dropped because some
-- objects depend on it", pg_shdepend.c checkSharedDependencies). DROP OWNED works in the
-- current database only: this connects to each database recording a dependency on R
-- (pg_shdepend, shared by all of them) and runs it there, then includes itself again until
-- none is left (drop-role.sql copes with one granted again meanwhile). Included by drop.sql
-- and template-drop.sql, connected to `postgres` as the admin, a member of R (access.sql),
-- with -v role=R.
--
-- Those databases hold other previews' code, so:
-- - Its roles lose CONNECT on it (when the admin owns it) and its sessions end first (but
--   the admin's and superusers'): an open transaction that rewrote a granting table's
--   catalog row would hold DROP OWNED, then fail it ("tuple concurrently updated"), and a
--   session let back in at once could take it again. CONNECT is given back right after.
--   Waits are bounded (lock_timeout); a round that fails is tried again, 20 rounds at most,
--   and drop-role.sql copes with what is left.
-- - DROP OWNED runs as each owner of what grants R, then as the admin. Run by a
--   non-superuser, a REVOKE removes only the entries made by the grantor it picks: itself,
--   or a role it is a member of, if that holds the grant options (acl.c
--   select_best_grantor), so an owner that gave the admin (or an older preview's role) every
--   grant option would keep its own entry for R. As the owner, every entry it made goes. The
--   owner gets R's privileges for that, which DROP OWNED asks of whoever runs it, in the
--   same transaction and taken back before it commits: no one else ever sees them.
-- - Each statement is made here and sent there as a plain command under a search_path of
--   the catalog only. DROP OWNED also drops what R owns there, which can only be nothing:
--   no other role can make R own something (ALTER ... OWNER needs membership in R).
\if :{?revoke_rounds}
\else
\set revoke_rounds 0
\endif
SELECT :revoke_rounds + 1 AS revoke_rounds, :revoke_rounds >= 20 AS revoke_stuck \gset
SELECT count(*) > 0 AS revoke_needed, min(d.datname) AS revoke_in,
       format('DROP OWNED BY %I', :'role') AS revoke_statement
  FROM pg_database d
 WHERE d.datallowconn
   AND d.oid IN (SELECT s.dbid FROM pg_shdepend s JOIN pg_roles r ON r.oid = s.refobjid
                  WHERE s.refclassid = 'pg_authid'::regclass AND r.rolname = :'role') \gset
\if :revoke_stuck
\echo a database still grants :role after 20 rounds: it is granted again as fast as it is revoked
\elif :revoke_needed
\echo revoking what database :revoke_in grants :role
SELECT coalesce(string_agg(format('REVOKE %s ON DATABASE %I FROM %I', a.privilege_type, d.datname, r.rolname), '; '), '') AS revoke_close,
       coalesce(string_agg(format('GRANT %s ON DATABASE %I TO %I', a.privilege_type, d.datname, r.rolname), '; '), '') AS revoke_reopen
  FROM pg_database d, aclexplode(d.datacl) a JOIN pg_roles r ON r.oid = a.grantee
 WHERE d.datname = :'revoke_in' AND r.rolname <> current_user
   AND d.datdba = (SELECT oid FROM pg_roles WHERE rolname = current_user) \gset
:revoke_close;
SELECT count(pg_terminate_backend(a.pid)) AS ended FROM pg_stat_activity a JOIN pg_roles r ON r.oid = a.usesysid
 WHERE a.datname = :'revoke_in' AND a.pid <> pg_backend_pid() AND r.rolname <> current_user AND NOT r.rolsuper
   AND pg_has_role(current_user, r.oid, 'MEMBER');
\setenv PGOPTIONS '-c search_path=pg_catalog,pg_temp -c lock_timeout=10s'
\c :"revoke_in"
SELECT coalesce(string_agg(
         CASE WHEN pg_has_role(current_user, o.oid, 'MEMBER') THEN '' ELSE format('GRANT %I TO %I; ', o.rolname, current_user) END
         || format('GRANT %1$I TO %2$I; SET ROLE %2$I; %3$s; RESET ROLE; REVOKE %1$I FROM %2$I;', :'role', o.rolname, :'revoke_statement'),
         ' '), '') AS revoke_as_owners
  FROM pg_roles o
 WHERE o.rolname NOT IN (current_user, :'role') AND NOT o.rolsuper
   AND o.oid IN (SELECT owner.refobjid FROM pg_shdepend owner JOIN pg_shdepend granted
                        ON (granted.dbid, granted.classid, granted.objid) = (owner.dbid, owner.classid, owner.objid)
                  WHERE owner.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                    AND owner.deptype = 'o' AND granted.deptype <> 'o'
                    AND granted.refobjid = (SELECT oid FROM pg_roles WHERE rolname = :'role')) \gset
\set ON_ERROR_STOP off
BEGIN;
:revoke_as_owners
:revoke_statement;
COMMIT;
\set ON_ERROR_STOP on
\setenv PGOPTIONS
\c postgres
:revoke_reopen;
\ir revoke-elsewhere.sql
\endif

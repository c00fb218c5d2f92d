-- Seals a generation of a template database once its migrations and seed succeeded: no
-- one may connect any more (ALLOW_CONNECTIONS false holds for superusers too: postinit.c),
-- so a clone never meets "source database ... is being accessed by other users", which
-- CREATE DATABASE raises after five seconds (procarray.c CountOtherDBBackends); and it is
-- marked IS_TEMPLATE. Idempotent. Run as: psql -X -v role=R -v db=D -f template-seal.sql
\set ON_ERROR_STOP on
SELECT format('REVOKE ALL ON DATABASE %I FROM %I', :'db', :'role') \gexec
SELECT format('ALTER DATABASE %I WITH ALLOW_CONNECTIONS false', :'db') \gexec
-- Sessions opened before the ALTER stay open (it does not end them): end them.
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = :'db' AND pid <> pg_backend_pid();
SELECT format('ALTER DATABASE %I WITH IS_TEMPLATE true', :'db') \gexec

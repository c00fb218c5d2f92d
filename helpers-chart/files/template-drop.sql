-- Drops one generation of a template database (no preview needs it any more), and with
-- the last generation (`-v drop_role=1`) the role that owned its objects. A template cannot
-- be dropped, even WITH (FORCE): it is unmarked first (dbcommands.c dropdb). Idempotent.
-- Run as: psql -X -v role=R -v db=D [-v drop_role=1] -f template-drop.sql
\set ON_ERROR_STOP on
SELECT format('ALTER DATABASE %I WITH IS_TEMPLATE false', :'db')
 WHERE EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', :'db') \gexec
\if :{?drop_role}
SELECT format('DROP ROLE IF EXISTS %I', :'role') \gexec
\endif

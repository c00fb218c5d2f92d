-- Drops the preview's database (closing its open sessions; PostgreSQL 13+) and then its
-- role. Idempotent. Run as: psql -X -v role=R -v db=D -f drop.sql
\set ON_ERROR_STOP on
SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', :'db') \gexec
SELECT format('DROP ROLE IF EXISTS %I', :'role') \gexec

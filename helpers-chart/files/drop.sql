-- Drops the preview's database (closing its open sessions; PostgreSQL 13+) and then its
-- role. Idempotent. Run as: psql -X -v role=R -v db=D -f drop.sql
\set ON_ERROR_STOP on
-- The role loses its login first: if it cannot be dropped (another preview granted it
-- something), no working credential is left behind. Its database is unmarked first: a
-- template (its owner may have made it one) takes no DROP, even WITH (FORCE).
SELECT format('ALTER ROLE %I NOLOGIN PASSWORD NULL', :'role')
 WHERE EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER DATABASE %I WITH IS_TEMPLATE false', :'db')
 WHERE EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', :'db') \gexec
SELECT format('DROP ROLE IF EXISTS %I', :'role') \gexec

-- The size guard: run every few minutes by the preview's guard CronJob (templates/
-- database-guard.yaml), as the admin (cnpg: the superuser) connected to `postgres`:
--   psql -X -v role=R -v db=D -v max_bytes=N -f guard.sql
-- A preview's code can write until the shared server's disk is full, and every preview on it
-- stops. PostgreSQL has no per-database quota, so the bound is kept from outside: past N
-- bytes the role loses CONNECT on it (it is no owner and cannot grant itself anything) and
-- its sessions end, so its writes stop (closed by privilege, not by CONNECTION LIMIT 0, so
-- that a non-superuser admin can still connect, to revoke what it granted others at their
-- teardown: revoke-elsewhere.sql); the Job then fails
-- saying so, which makes the CronJob, and with it the helper Application, Degraded in Argo
-- CD, and the preview failed in previewd. The create Job keeps it closed (access.sql) until
-- /preview reseed (a clone: a new copy) or teardown. pg_database_size needs only CONNECT,
-- which the owner holds (dbsize.c calculate_database_size).
\set ON_ERROR_STOP on
SELECT set_config('previewd.db', :'db', false) AS db,
       set_config('previewd.max_bytes', :'max_bytes', false) AS max_bytes,
       set_config('previewd.bytes', coalesce((SELECT pg_database_size(oid) FROM pg_database WHERE datname = :'db'), 0)::text, false) AS bytes;
SELECT current_setting('previewd.bytes')::bigint > current_setting('previewd.max_bytes')::bigint AS over \gset
\if :over
SELECT format('REVOKE ALL ON DATABASE %I FROM %I', :'db', :'role') \gexec
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = :'db' AND usename = :'role';
DO $$ BEGIN
  RAISE EXCEPTION 'database % holds % bytes, over database.max_size (% bytes): it takes no more connections; /preview reseed (template databases) or /preview destroy',
    current_setting('previewd.db'), current_setting('previewd.bytes'), current_setting('previewd.max_bytes');
END $$;
\endif
\echo database :db is within its bound

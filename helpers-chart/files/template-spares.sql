-- Tops a sealed generation's pool of spare clones up to N (#16): whole copies made ahead of
-- time, so that a preview's database is a rename away (template-clone.sql claims one)
-- instead of a copy of every file. Run by the generation's pool keeper (template-spares.sh)
-- every few seconds, as:
--   psql -X -v template=T -v spares=N -f template-spares.sql
-- with the admin (or superuser) connection in PG* variables. Makes nothing until T is sealed
-- (template-seal.sql). A spare is named pvs_<16 hex of sha256(T)>_<12 random hex>, found by
-- that prefix alone (a CREATE DATABASE either completes or leaves nothing), takes no
-- connection at all (ALLOW_CONNECTIONS false, as the sealed template: no preview role can
-- reach it, and create.sql's check for databases open to every role passes it by) and
-- belongs to the admin until claimed; its objects still belong to T's role, which is why
-- template-drop.sql drops the spares first.
--
-- With -v room=B (database.server_size), a spare is made only while the server's default
-- tablespace, where every database lives, holds no more than B bytes with it: spares are
-- the one thing previewd makes ahead of need, and must never be what fills the disk.
-- pg_tablespace_size of the current database's default tablespace needs no privilege
-- (dbsize.c calculate_tablespace_size), so a non-superuser admin may measure it.
\set ON_ERROR_STOP on
\if :{?room}
\else
\set room -1
\endif
SELECT 'pvs_' || substr(encode(sha256(convert_to(:'template', 'UTF8')), 'hex'), 1, 16) || '_' AS prefix \gset
SELECT greatest(0, :spares - (SELECT count(*) FROM pg_database WHERE starts_with(datname, :'prefix'))) AS missing,
       coalesce((SELECT datistemplate AND NOT datallowconn FROM pg_database WHERE datname = :'template'), false) AS sealed \gset
\if :sealed
SELECT CASE WHEN :room < 0 THEN :missing
            ELSE least(:missing, greatest(0, (:room - pg_tablespace_size('pg_default'))
                                             / greatest(1, pg_database_size(:'template'))))
       END AS fits \gset
SELECT :fits < :missing AS short \gset
\if :short
\echo the server has room for :fits of :missing missing spare(s) of :template (database.server_size): making :fits
\endif
SELECT format('CREATE DATABASE %I TEMPLATE %I ALLOW_CONNECTIONS false%s',
              :'prefix' || substr(replace(gen_random_uuid()::text, '-', ''), 1, 12), :'template',
              CASE WHEN current_setting('server_version_num')::int >= 150000 THEN ' STRATEGY FILE_COPY' END)
  FROM generate_series(1, :fits) \gexec
\endif

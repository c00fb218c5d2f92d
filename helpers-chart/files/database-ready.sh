# Waits (up to WAIT_SECONDS) until the preview's role can log in to its database, which
# CloudNativePG creates asynchronously, then closes the database to PUBLIC (CloudNativePG's
# Database leaves CONNECT and TEMPORARY to PUBLIC; the owner may revoke them). Idempotent.
# Connection from PG* variables (the preview's own credentials).
set -eu
deadline=$(( $(date +%s) + ${WAIT_SECONDS:-600} ))
until psql -X -q -c 'SELECT 1' > /dev/null 2>&1; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "previewd: the database did not accept the preview's role within ${WAIT_SECONDS:-600} s:" >&2
    exec psql -X -c 'SELECT 1'
  fi
  sleep 3
done
exec psql -X -v ON_ERROR_STOP=1 -c "DO \$\$ BEGIN
  IF current_setting('server_version_num')::int < 130000 THEN
    RAISE EXCEPTION 'previewd needs PostgreSQL 13 or newer (DROP DATABASE ... WITH (FORCE)), this is %', current_setting('server_version');
  END IF;
  EXECUTE format('REVOKE ALL ON DATABASE %I FROM PUBLIC', current_database());
END \$\$;"

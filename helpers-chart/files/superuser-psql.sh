# Runs psql "$@" as the CloudNativePG Cluster's superuser (PG* variables from its Secret) once
# the role $ROLE (and, when set, the database $DATABASE) exists: CloudNativePG makes both
# asynchronously from the DatabaseRole and Database (retrying every 30 s), and Argo CD has no
# health check to wait on. Waits WAIT_SECONDS at most, then fails saying why.
set -eu
deadline=$(( $(date +%s) + ${WAIT_SECONDS:-600} ))
# psql substitutes variables in a script, never in -c: the query comes on stdin.
exists() {
  printf '%s\n' "SELECT count(*) FROM $1 WHERE $2 = :'name';" |
    psql -X -tA -v name="$3" -f - 2>/dev/null
}
until [ "$(exists pg_roles rolname "$ROLE")" = 1 ]; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "previewd: role $ROLE did not appear within ${WAIT_SECONDS:-600} s (is its DatabaseRole reconciled?)" >&2
    exit 1
  fi
  sleep 3
done
if [ -n "${DATABASE:-}" ]; then
  until [ "$(exists pg_database datname "$DATABASE")" = 1 ]; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "previewd: database $DATABASE did not appear within ${WAIT_SECONDS:-600} s (is its Database reconciled?)" >&2
      exit 1
    fi
    sleep 3
  done
fi
exec psql -X "$@"

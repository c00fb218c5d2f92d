# Runs psql "$@" as the CloudNativePG Cluster's superuser (PG* variables from its Secret) once
# the role $ROLE exists: CloudNativePG makes it asynchronously from the DatabaseRole
# (retrying every 30 s), and Argo CD has no health check to wait on. Waits WAIT_SECONDS at
# most, then fails saying why.
set -eu
deadline=$(( $(date +%s) + ${WAIT_SECONDS:-600} ))
# psql substitutes variables in a script, never in -c: the query comes on stdin.
role_exists() {
  printf '%s\n' "SELECT count(*) FROM pg_roles WHERE rolname = :'role';" |
    psql -X -tA -v role="$ROLE" -f - 2>/dev/null
}
until [ "$(role_exists)" = 1 ]; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "previewd: role $ROLE did not appear within ${WAIT_SECONDS:-600} s (is its DatabaseRole reconciled?)" >&2
    exit 1
  fi
  sleep 3
done
exec psql -X "$@"

# Reports a sealed generation of a template database to previewd (#16): its size, measured
# from the postgres database (the generation itself takes no connection any more), posted
# with the generation's own token, which stays off every command line (the body is a file).
# Never fails the build: a size is only shown, so a report that cannot be made is said in
# the Job's log and the generation is used all the same.
# Env: DB, URL, TOKEN (from the report Secret; optional), PG* (the admin's, or the
# CloudNativePG superuser's). Needs psql and wget (busybox's, as in postgres:*-alpine).
set -u
if [ -z "${TOKEN:-}" ]; then
  echo "previewd: the report Secret has no TOKEN; size not reported" >&2
  exit 0
fi
# psql substitutes variables in a script, never in -c: the query comes on stdin.
bytes=$(printf '%s\n' "SELECT pg_database_size(:'db');" | psql -X -tA -v db="$DB" -f -) || bytes=
case $bytes in
  '' | *[!0-9]*)
    echo "previewd: could not measure database $DB; size not reported" >&2
    exit 0
    ;;
esac
umask 077
body=${TMPDIR:-/tmp}/size-report.json
printf '{"token":"%s","bytes":%s}' "$TOKEN" "$bytes" > "$body"
for pause in 2 4 8 16 -; do
  # timeout: a server that never answers must not hold the Job to its deadline, which
  # would fail the build (busybox wget has no timeout of its own on every build).
  if timeout 20 wget -q -O /dev/null --header 'Content-Type: application/json' \
    --post-file "$body" "$URL"; then
    rm -f "$body"
    echo "previewd: reported database $DB: $bytes bytes"
    exit 0
  fi
  [ "$pause" = - ] || sleep "$pause"
done
rm -f "$body"
echo "previewd: could not report to $URL; size not reported" >&2
exit 0

# The pool keeper of a template generation (#16): keeps SPARES spare clones of database
# TEMPLATE ready (template-spares.sql), checking every INTERVAL seconds, for as long as the
# generation's Application lives (a Deployment: deleting the Application stops it, and the
# PostDelete drop removes the spares). A failed top-up is said and tried again next time.
# Env: TEMPLATE, SPARES, INTERVAL (default 5), SQL_DIR (default /sql), PG* (the admin's,
# or the CloudNativePG superuser's).
set -u
echo "previewd: keeping ${SPARES} spare clone(s) of ${TEMPLATE} once it is sealed"
while :; do
  psql -X -q -v template="$TEMPLATE" -v spares="$SPARES" -f "${SQL_DIR:-/sql}/template-spares.sql" ||
    echo "previewd: topping up the spares of ${TEMPLATE} failed; trying again" >&2
  sleep "${INTERVAL:-5}"
done

# The pool keeper of a template generation (#16): keeps SPARES spare clones of database
# TEMPLATE ready (template-spares.sql), checking every INTERVAL seconds, for as long as the
# generation's Application lives (a Deployment: deleting the Application stops it, and the
# PostDelete drop removes the spares). A failed top-up is said and tried again, later each
# time.
# Env: TEMPLATE, SPARES, ROOM (optional: database.server_size in bytes), INTERVAL (default
# 5), SQL_DIR (default /sql), PG* (the admin's, or the CloudNativePG superuser's).
set -u
echo "previewd: keeping ${SPARES} spare clone(s) of ${TEMPLATE} once it is sealed"
failures=0
while :; do
  if psql -X -q -v template="$TEMPLATE" -v spares="$SPARES" ${ROOM:+-v room="$ROOM"} \
    -f "${SQL_DIR:-/sql}/template-spares.sql"; then
    failures=0
    sleep "${INTERVAL:-5}"
  else
    # Backing off (10 s, doubling to 5 min): a copy that failed for want of disk must not
    # fill the shared server's disk again every few seconds.
    failures=$((failures + 1))
    pause=$((5 << (failures < 6 ? failures : 6)))
    echo "previewd: topping up the spares of ${TEMPLATE} failed; trying again in ${pause} s" >&2
    sleep "$pause"
  fi
done

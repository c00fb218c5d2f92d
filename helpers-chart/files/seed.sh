#!/bin/sh
# Applies the seed files in $SEED_DIR (name order) through the runner SQL, which records
# the generation so that a rerun is a no-op. Connection from PG* variables.
set -eu
seed_dir=${SEED_DIR:-/seed}
runner=${SEED_RUNNER:-/runner/seed.sql}
list=${TMPDIR:-/tmp}/seed-files.sql
: > "$list"
for f in "$seed_dir"/*.sql; do
  [ -e "$f" ] && printf '\\i %s\n' "$f" >> "$list"
done
exec psql -X -v generation="${PREVIEWD_SEED_GENERATION:?}" -v files="$list" -f "$runner"

#!/bin/sh
# A preview's own RabbitMQ vhost and user on the shared broker, through the management
# HTTP API only (the image is curlimages/curl: busybox sh and curl, no jq).
#   rabbitmq.sh create   the Sync hook: vhost, bounds, user, permissions (idempotent)
#   rabbitmq.sh delete   the PostDelete hook: user first, then vhost (gone already is fine)
# Environment: RABBITMQ_MANAGEMENT_URL, RABBITMQ_ADMIN_USER, RABBITMQ_ADMIN_PASSWORD,
# VHOST, PREVIEW_USER, PREVIEW; for create also PASSWORD_HASH, MAX_CONNECTIONS,
# MAX_QUEUES, MAX_QUEUE_BYTES, and (optional, for Jobs rendered before them) MAX_QUEUE_MESSAGES
# and MAX_CHANNELS.
#
# Ownership: previewd's vhosts have a description beginning "previewd preview " and its
# users carry exactly the one tag "previewd" (a tag the management plugin gives no
# access for). Anything else of the same name belongs to someone else: create refuses it
# (exit 1), delete leaves it alone, says so on stderr and exits 0, so that a preview's
# teardown is never stuck on what it does not own.
set -eu

die() {
  printf 'rabbitmq.sh: %s\n' "$*" >&2
  exit 1
}

action=${1:-}
case $action in
  create | delete) ;;
  *) die "usage: rabbitmq.sh create|delete" ;;
esac

url=${RABBITMQ_MANAGEMENT_URL:?RABBITMQ_MANAGEMENT_URL is not set}
url=${url%/}
: "${RABBITMQ_ADMIN_USER:?RABBITMQ_ADMIN_USER is not set}"
: "${RABBITMQ_ADMIN_PASSWORD:?RABBITMQ_ADMIN_PASSWORD is not set}"
vhost=${VHOST:?VHOST is not set}
user=${PREVIEW_USER:?PREVIEW_USER is not set}
preview=${PREVIEW:?PREVIEW is not set}

# The names go into URL paths and JSON unescaped: only what needs no escaping is let in.
for name in "$vhost" "$user"; do
  case $name in
    '' | -* | *[!a-z0-9-]*) die "refusing name '$name': only a-z, 0-9 and '-' (not first)" ;;
  esac
  [ ${#name} -le 63 ] || die "refusing name '$name': longer than 63 characters"
done
# owner/repo#number as GitHub spells them; it goes into the vhost's description.
case $preview in
  '' | *[!A-Za-z0-9._/#-]*) die "refusing PREVIEW '$preview': not owner/repo#number" ;;
esac
marker="previewd preview $preview"

# Basic auth goes to curl in a config on its stdin, written by the shell's builtin printf,
# so that the admin password is in no process's argv. Inside the config's quotes, \ and "
# are escaped (sed reads the password from a pipe, not from its arguments).
case $RABBITMQ_ADMIN_USER$RABBITMQ_ADMIN_PASSWORD in
  *'
'*) die "the admin user or password holds a newline" ;;
esac
case $RABBITMQ_ADMIN_USER in
  *:*) die "the admin user name holds ':', which basic auth cannot carry" ;;
esac
credentials=$(printf '%s:%s' "$RABBITMQ_ADMIN_USER" "$RABBITMQ_ADMIN_PASSWORD" | sed 's/[\\"]/\\&/g')

# Request bodies (the user's holds the password hash) go through a file, for the same reason.
umask 077
work=$(mktemp -d "${TMPDIR:-/tmp}/rabbitmq.XXXXXX")
trap 'rm -rf "$work"' EXIT

# api METHOD PATH [BODY]: sets $status to the HTTP status and $answer to the body. Bounded:
# 5 s to connect, 30 s per attempt, and retries (connection refused included) while the
# broker's Service comes up; every request here is idempotent, so a retry is harmless.
api() {
  method=$1 path=$2
  if [ $# -ge 3 ]; then
    printf '%s' "$3" >"$work/body"
    set -- --data-binary "@$work/body"
  else
    set --
  fi
  # --disable (first, as curl wants it): no ~/.curlrc of the image's in the way.
  status=$(printf 'user = "%s"\n' "$credentials" | curl --disable --config - \
    --silent --show-error --connect-timeout 5 --max-time 30 \
    --retry 5 --retry-delay 2 --retry-connrefused \
    --request "$method" --header 'content-type: application/json' "$@" \
    --output "$work/answer" --write-out '%{http_code}' \
    "$url/api$path") || die "$method $path: no answer from $url"
  answer=$(cat "$work/answer")
}

# expect WHAT CODE...: dies unless $status is one of the codes.
expect() {
  what=$1
  shift
  for code in "$@"; do
    [ "$status" = "$code" ] && return 0
  done
  die "$what: HTTP $status: $answer"
}

# Sets $owner to the vhost's: none (404), previewd (its marker) or other. (In this shell,
# not a $(...) subshell, whose failure a test or case would not stop at.)
vhost_owner() {
  api GET "/vhosts/$vhost"
  expect "reading vhost $vhost" 200 404
  owner=other
  case $status:$answer in
    404:*) owner=none ;;
    *'"description":"previewd preview '*) owner=previewd ;;
  esac
}

# The user's owner, likewise: previewd's users have exactly the tag "previewd", so a user
# with any other tag (administrator, say) is never taken for one and never overwritten.
user_owner() {
  api GET "/users/$user"
  expect "reading user $user" 200 404
  owner=other
  case $status:$answer in
    404:*) owner=none ;;
    *'"tags":["previewd"]'* | *'"tags":"previewd"'*) owner=previewd ;;
  esac
}

number() {
  case $2 in
    '' | *[!0-9]*) die "$1 must be a non-negative integer, not '$2'" ;;
  esac
}

create() {
  hash=${PASSWORD_HASH:?PASSWORD_HASH is not set}
  case $hash in
    *[!A-Za-z0-9+/=]*) die "PASSWORD_HASH is not base64" ;;
  esac
  number MAX_CONNECTIONS "${MAX_CONNECTIONS:-}"
  number MAX_QUEUES "${MAX_QUEUES:-}"
  number MAX_QUEUE_BYTES "${MAX_QUEUE_BYTES:-}"
  number MAX_QUEUE_MESSAGES "${MAX_QUEUE_MESSAGES:=1000}"
  number MAX_CHANNELS "${MAX_CHANNELS:=100}"

  # Both checked before anything is written: a refusal leaves the broker as it was.
  vhost_owner
  [ "$owner" != other ] ||
    die "vhost $vhost exists and is not previewd's (its description is not \"previewd preview ...\"): refusing to take it over"
  user_owner
  [ "$owner" != other ] ||
    die "user $user exists and is not previewd's (its tags are not exactly \"previewd\"): refusing to take it over"

  api PUT "/vhosts/$vhost" "{\"description\":\"$marker\"}"
  expect "creating vhost $vhost" 201 204
  for limit in "max-connections $MAX_CONNECTIONS" "max-queues $MAX_QUEUES"; do
    set -- $limit
    api PUT "/vhost-limits/$vhost/$1" "{\"value\":$2}"
    expect "setting vhost limit $1" 201 204
  done

  # An operator policy, not a policy: the preview's own user cannot change it, and where a
  # queue (or an app's policy) asks for more, the smaller limit wins. `max-length-bytes`
  # only: RabbitMQ takes none of the keys it does not register for operator policies
  # (`overflow` is refused, "not recognised policy settings"), so a full queue drops from
  # its head, which bounds it all the same. max-length-bytes counts bodies only; headers (up
  # to a frame each) are bounded by max-length, the count.
  api PUT "/operator-policies/$vhost/previewd-bounds" \
    "{\"pattern\":\".*\",\"apply-to\":\"queues\",\"priority\":0,\"definition\":{\"max-length-bytes\":$MAX_QUEUE_BYTES,\"max-length\":$MAX_QUEUE_MESSAGES}}"
  expect "setting the operator policy on $vhost" 201 204

  api PUT "/users/$user" \
    "{\"password_hash\":\"$hash\",\"hashing_algorithm\":\"rabbit_password_hashing_sha256\",\"tags\":\"previewd\"}"
  expect "creating user $user" 201 204
  # The user's own connection limit too, so that it cannot take the vhost's whole share
  # were it ever given another vhost. 404: a broker without user limits (before 3.8.10).
  api PUT "/user-limits/$user/max-connections" "{\"value\":$MAX_CONNECTIONS}"
  expect "setting user limit max-connections" 201 204 404
  # Channels cost the broker memory too (2047 a connection by default).
  api PUT "/user-limits/$user/max-channels" "{\"value\":$MAX_CHANNELS}"
  expect "setting user limit max-channels" 201 204 404
  api PUT "/permissions/$vhost/$user" '{"configure":".*","write":".*","read":".*"}'
  expect "granting $user on $vhost" 201 204
  printf 'rabbitmq.sh: vhost %s and user %s ready for %s\n' "$vhost" "$user" "$preview"
}

delete() {
  # The user first: RabbitMQ closes its connections and it cannot log in again, so nothing
  # of the app's recreates queues while the vhost goes.
  user_owner
  case $owner in
    none) printf 'rabbitmq.sh: user %s is already gone\n' "$user" ;;
    other) printf 'rabbitmq.sh: user %s is not previewd'\''s: left alone\n' "$user" >&2 ;;
    previewd)
      api DELETE "/users/$user"
      expect "deleting user $user" 204 404
      ;;
  esac
  # Then the vhost, which closes the connections left and removes its queues.
  vhost_owner
  case $owner in
    none) printf 'rabbitmq.sh: vhost %s is already gone\n' "$vhost" ;;
    other) printf 'rabbitmq.sh: vhost %s is not previewd'\''s: left alone\n' "$vhost" >&2 ;;
    previewd)
      api DELETE "/vhosts/$vhost"
      expect "deleting vhost $vhost" 204 404
      ;;
  esac
  printf 'rabbitmq.sh: %s removed from the broker\n' "$preview"
}

"$action"

#!/usr/bin/env bash
# End to end with the kubernetes sink against ../shared/tools/kube_emulator.py (a small
# real-HTTP Kubernetes API server with a pretend Argo CD): a PR opened becomes a ready helper
# Application and, behind its health gate, the app's own Application at the head SHA; closed,
# both are deleted (the app first) through the cascade finalizer and the preview forgotten.
# Usage: tests/e2e/kube_emulator.sh PREVIEWD_BINARY PYTHON EMULATOR
set -euo pipefail
# A path made absolute (keeping a venv's symlink), or a command looked up on PATH.
absolute() { case "$1" in */*) echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")" ;; *) command -v "$1" ;; esac; }
previewd=$(absolute "$1"); python=$(absolute "$2"); emulator=$(absolute "$3")
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
cleanup() { kill "${serve_pid:-}" "${emu_pid:-}" 2>/dev/null || true; }
trap cleanup EXIT
cd "$work"

"$python" "$emulator" --port 0 --kubeconfig kubeconfig > emu.port 2> emu.log &
emu_pid=$!
for _ in $(seq 100); do [ -s emu.port ] && break; sleep 0.1; done
emu_port=$(head -1 emu.port)

printf '[[repos]]\nname = "codertocat/hello-world"\napp_chart = "deploy/chart"\n' > previewd.toml
listen_port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
KUBECONFIG=$work/kubeconfig PREVIEWD_SINK_KIND=kubernetes PREVIEWD_GITHUB_WEBHOOK_SECRET=e2e-secret \
  PREVIEWD_LISTEN=127.0.0.1:$listen_port "$previewd" serve > serve.log 2>&1 &
serve_pid=$!
for _ in $(seq 300); do curl -fs "127.0.0.1:$listen_port/healthz" > /dev/null && break; sleep 0.1; done

deliver() {
  local body=$root/tests/fixtures/github/$1.json
  local sig
  sig=$(openssl dgst -sha256 -hmac e2e-secret < "$body" | sed 's/^.* //')
  curl -fsS -o /dev/null -w '%{http_code}' "127.0.0.1:$listen_port/webhooks/github" \
    -H 'Content-Type: application/json' -H 'X-GitHub-Event: pull_request' \
    -H "X-GitHub-Delivery: $(cat /proc/sys/kernel/random/uuid)" -H "X-Hub-Signature-256: sha256=$sig" \
    --data-binary @"$body"
}

# Polls the state until SQL query $1 answers $2 (within the reconciler's resync period).
wait_for() {
  for _ in $(seq 1200); do
    got=$("$python" -c 'import sqlite3, sys; r = sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone(); print(r[0] if r else "")' previewd.db "$1" 2>/dev/null || true)
    [ "$got" = "$2" ] && return 0
    sleep 0.1
  done
  echo "timed out waiting for [$1] = $2 (last: $got)" >&2
  tail -20 serve.log >&2
  return 1
}

[ "$(deliver pull_request.opened)" = 202 ]
wait_for "SELECT observed FROM previews" ready
"$python" - "$emu_port" <<'PY'
import json, sys, urllib.request
objects = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/_emu/objects"))
apps = {o["metadata"]["name"].rsplit("-", 1)[1]: o for o in objects if o["kind"] == "Application"}
assert sorted(apps) == ["app", "helpers"], list(apps)
for app in apps.values():
    assert app["metadata"]["finalizers"] == ["resources-finalizer.argocd.argoproj.io"], app["metadata"]
    print("e2e: Application", app["metadata"]["name"], "is", app["status"]["sync"]["status"], app["status"]["health"]["status"])
assert apps["helpers"]["spec"]["source"]["path"] == "helpers-chart", apps["helpers"]["spec"]
assert apps["app"]["spec"]["source"]["targetRevision"] == "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
assert apps["app"]["status"]["sync"]["revision"] == "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
# The gate: the app was created only after the helpers were ready.
assert apps["app"]["metadata"]["creationTimestamp"] >= apps["helpers"]["metadata"]["creationTimestamp"]
PY
[ "$(deliver pull_request.closed.unmerged)" = 202 ]
wait_for "SELECT COUNT(*) FROM previews" 0
wait_for "SELECT COUNT(*) FROM history WHERE what = 'destroyed'" 1
wait_for "SELECT COUNT(*) FROM history WHERE what = 'applied' AND reason LIKE 'app Application%helpers are ready'" 1
wait_for "SELECT COUNT(*) FROM history WHERE what = 'destroyed' AND reason LIKE '%Namespace codertocat-hello-world-4d960c-pr-2 gone%'" 1
echo "e2e: closed PR torn down through the finalizer; history kept"

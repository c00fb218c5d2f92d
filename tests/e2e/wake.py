#!/usr/bin/env python3
"""previewd's share of a wake (issue #41, target: p50 <= 1 s from the first request to
asking for the replicas).

Against the faithful Argo CD (kube_emulator.py --argocd faithful, its delays at zero, run
with TCP_NODELAY as latency.py runs it), the real binary (kubernetes sink, database shared,
the fixture repository with its app chart, `access = "public"`, `sleep_after = "2s"`,
`[sweep] interval = "1s"`) opens one preview and lets it become ready. Then, N times:

  the sweeper puts it to sleep (idle 2 s), previewd applies the sleep and the preview's
  state becomes `sleeping` (Argo CD synced it: the app at zero replicas);
  t0       this script sends the check ingress-nginx would send for a request to the
           preview's host (GET /auth/check?host=... with X-Original-URL): previewd records
           the wake and answers 401 (ingress-nginx then shows the sign-in route's waking page)
  answer   the check's answer arrives
  asked    the watch event in which previewd's write of the app Application at its awake
           rendering (the hash without `-asleep`: the chart's replicas) reaches the API
           server, timestamped on receipt by this script's watcher
  ready    previewd's state is `ready` again (Argo CD synced the wake and the app is healthy)

  previewd's share = asked - t0;  Argo CD's = ready - asked (polled every 25 ms)

Usage: wake.py PREVIEWD PYTHON EMULATOR [N]   (from the checkout; N defaults to 20)
Exits non-zero only when a wake does not happen; the target is reported, never enforced.
"""
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faithful as F  # noqa: E402
import latency as L  # noqa: E402  (the emulator run with TCP_NODELAY)

APPLIED_HASH = "previewd.dev/applied-hash"  # src/render.rs
ASLEEP = "-asleep"  # src/render/sleep.rs
TARGET_S = 1.0
PATH = "/api/previews/codertocat/hello-world/2"


def applied_hash(app):
    return ((app.get("metadata") or {}).get("annotations") or {}).get(APPLIED_HASH)


def awake_since(watch, t0):
    """When the first app Application event after t0 carried an awake rendering."""
    with watch.lock:
        return next((t for t, _type, name, hash_ in watch.events
                     if t >= t0 and name.endswith("-app") and hash_ and not hash_.endswith(ASLEEP)), None)


def state(pd):
    status, body = pd.get(PATH)
    return (json.loads(body).get("preview") or {}) if status == 200 else {}


def check(pd, host):
    """The check ingress-nginx sends for a request to `host`; its status."""
    request = urllib.request.Request(
        "http://127.0.0.1:%d/auth/check?host=%s" % (pd.port, host),
        headers={"X-Original-URL": "https://%s/" % host, "X-Original-Method": "GET"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as e:
        return e.code


def p90(values):
    values = sorted(values)
    return values[max(0, math.ceil(0.9 * len(values)) - 1)]


def main():
    binary, python, emulator = (os.path.abspath(a) if os.sep in a else shutil.which(a) for a in sys.argv[1:4])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    os.environ[L.AS_EMULATOR] = emulator
    work = tempfile.mkdtemp(prefix="previewd-wake-")
    emu = F.Emulator(python, os.path.abspath(L.__file__), work, seconds="0", extra=["--argocd-delay", "0"])
    pd = F.Previewd(binary, work)
    writes = L.Watcher(emu.base, keep=applied_hash)
    rows, ok = [], False
    try:
        toml = 'public_url = "http://127.0.0.1:%d"\n' % pd.port + F.config("shared", ["bin/migrate"]) \
            + 'access = "public"\nsleep_after = "2s"\n[sweep]\ninterval = "1s"\n'
        F.prepare(emu, pd, work, "shared", toml)
        pd.deliver("pull_request", F.fixture("pull_request.opened"))
        F.wait("the preview to be ready", lambda: state(pd).get("state") == "ready", 180)
        host = urllib.parse.urlparse(state(pd)["url"]).hostname
        print("seconds: share = asked - t0 (previewd), answer = the check's answer, argocd = ready - asked")
        print("%6s %10s %10s %10s" % ("wake", "share", "answer", "argocd"))
        for i in range(n):
            F.wait("the preview to sleep", lambda: state(pd).get("state") == "sleeping", 60)
            t0 = time.time()
            status = check(pd, host)
            answered = time.time()
            assert status == 401, "a sleeping preview's check: %s" % status
            asked = F.wait("previewd to ask for the replicas", lambda: awake_since(writes, t0), 30)
            ready = None
            deadline = time.time() + 60
            while time.time() < deadline:
                if state(pd).get("state") == "ready":
                    ready = time.time()
                    break
                time.sleep(0.025)
            assert ready, "the wake did not get ready: %s" % state(pd)
            row = {"share": asked - t0, "answer": answered - t0, "argocd": ready - asked}
            rows.append(row)
            print("%6d %10.3f %10.3f %10.3f" % (i + 1, row["share"], row["answer"], row["argocd"]), flush=True)
        print()
        for c in ("share", "answer", "argocd"):
            vals = [r[c] for r in rows]
            print("%-7s p50 %7.3f  p90 %7.3f  max %7.3f" % (c, statistics.median(vals), p90(vals), max(vals)))
        p50 = statistics.median(r["share"] for r in rows)
        print("previewd's share of a wake p50 %.0f ms (target <= %.0f ms: %s) over %d wakes"
              % (p50 * 1000, TARGET_S * 1000, "met" if p50 <= TARGET_S else "NOT met", len(rows)))
        ok = True
    except Exception:
        import traceback
        traceback.print_exc()
        F.log_tails(work)
    finally:
        writes.stop = True
        pd.stop()
        emu.close()
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print("work directory kept: %s" % work)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The time previewd adds to a preview (issue #17, target 4: p50 <= 100 ms).

Against the faithful Argo CD (kube_emulator.py --argocd faithful) with every delay it lets
be set at zero (--argocd-delay 0, --job-seconds 0, --ready-seconds 0), the real binary
(kubernetes sink, database.mode = "shared", the GitHub stand-in taking its reports) gets
N pull_request.opened deliveries, one PR at a time (each closed, and gone, before the next).
For each PR:

  t0         the 202 for `opened` arrives
  reported   GitHub (the stand-in) receives the deployment status `success` of the PR's
             deployment (environment preview/pr-N): what the developer sees (the "View
             deployment" button); the sticky comment says Ready in the same report
  api_ready  the first poll (every 25 ms) of GET /api/previews/{owner}/{repo}/{N} whose
             preview.state is `ready` (previewd's own state; the report follows it). The poll
             lags by up to 25 ms, so to_state may be that much long and to_report negative;
             their sum is exact
  Argo CD    for each of the PR's two Applications (helpers, then app, which previewd applies
             only once the helpers are ready): from the watch event in which previewd's write
             creates it to the first watch event in which it satisfies previewd's own readiness
             rule (src/sink/argocd.rs `verdict` == Ready: Synced at the spec's source and revision,
             Healthy, the operation previewd asked for Succeeded, nothing running), minus any
             stretch in which Argo CD sat idle waiting for previewd to ask for a sync. The sum
             over both Applications is subtracted. Watch events are timestamped on receipt by
             this script's watcher, a few ms after the emulator writes them.

  total = reported - t0;  previewd-added = total - Argo CD

and the previewd-added time split into where it goes: webhook -> helpers applied, helpers
ready -> app applied, app ready -> state `ready`, state `ready` -> reported.

The one Argo CD timer that cannot be set to zero: argocd_twin.py's controller loop period
(Twin.interval, 0.3 s, no flag; it runs at once when nudged by an API write, but a step that
waits for the next tick waits up to that long). It is inside the Argo CD time, so it is
subtracted with it.

The emulator answers each request in two writes (headers, then body) with Nagle's algorithm
on, so on a kept-alive connection every answer after the first waits for the client's delayed
ACK: ~44 ms a request, which a kube-apiserver (Go: TCP_NODELAY, one write) does not cost, and
which would be counted as previewd's (3-4 requests a pass). So the emulator is run with
TCP_NODELAY set on its connections (this script, re-run as the emulator, sets it and calls
kube_emulator.py's main unchanged); --nagle runs it as it is.

Usage: latency.py PREVIEWD PYTHON EMULATOR [N] [--nagle]   (from the checkout; N defaults to 20)
Exits non-zero only when a preview does not become ready or does not go away; the target is
reported, never enforced.
"""
import http.client
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faithful as F  # noqa: E402  (the emulator, previewd, GitHub stand-in and config helpers)

APPLIED_HASH = "previewd.dev/applied-hash"  # src/render.rs
RENDERING_INFO = "previewd.dev/rendering"  # src/sink/argocd.rs
FIRST_PR = 100
TARGET_MS = 100


def normalized(v):
    """src/sink/argocd.rs `normalized`: empty values dropped, recursively."""
    if isinstance(v, dict):
        out = {k: normalized(x) for k, x in v.items()}
        return {k: x for k, x in out.items() if x not in (None, False, "", [], {})}
    if isinstance(v, list):
        return [normalized(x) for x in v]
    return v


def same_source(a, b):
    return a is not None and normalized(a) == normalized(b)


def verdict(app):
    """src/sink/argocd.rs `verdict`, the parts that decide Ready: 'ready', 'progressing',
    'needs-sync' (Argo CD idle, waiting for previewd to ask) or 'failed'."""
    spec, st = app.get("spec") or {}, app.get("status") or {}
    source = spec.get("source")
    if source is None:
        return "progressing"
    compared = same_source(((st.get("sync") or {}).get("comparedTo") or {}).get("source"), source)
    for c in st.get("conditions") or []:
        if c.get("type") == "InvalidSpecError" or (c.get("type") == "ComparisonError" and compared):
            return "failed"
    op = st.get("operationState") or {}
    phase = op.get("phase") or ""
    rendering = ((app.get("metadata") or {}).get("annotations") or {}).get(APPLIED_HASH)
    info = ((op.get("operation") or {}).get("info")) or []
    ours = rendering is not None and any(i.get("name") == RENDERING_INFO and i.get("value") == rendering
                                         for i in info) \
        and same_source((op.get("syncResult") or {}).get("source"), source)
    retrying = phase == "Running" and int(op.get("retryCount") or 0) > 0 and op.get("finishedAt")
    if ours and (phase in ("Failed", "Error") or retrying):
        return "failed"
    rev = source.get("targetRevision") or ""
    pinned = rev if len(rev) == 40 and all(c in "0123456789abcdefABCDEF" for c in rev) else None
    idle = not app.get("operation") and phase not in ("Running", "Terminating")
    if not idle:
        return "progressing"
    if not ours:
        return "needs-sync"
    synced = ((st.get("sync") or {}).get("status") == "Synced" and compared
              and (pinned is None or (st.get("sync") or {}).get("revision") == pinned) and phase == "Succeeded")
    health = (st.get("health") or {}).get("status")
    if health == "Healthy" and synced:
        return "ready"
    if health == "Degraded" and synced:
        return "failed"
    return "progressing"


class Watcher:
    """Every Application watch event, timestamped on receipt: (time, type, name, what `keep`
    takes of the object: its verdict unless told otherwise)."""

    def __init__(self, base, keep=None):
        self.keep = keep or verdict
        self.url = urllib.parse.urlparse(base)
        self.events, self.rv, self.stop = [], "0", False
        self.lock = threading.Lock()
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while not self.stop:
            conn = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=300)
            try:
                conn.request("GET", "%s?watch=true&timeoutSeconds=280&resourceVersion=%s" % (F.APPS, self.rv))
                resp = conn.getresponse()
                while not self.stop:
                    line = resp.readline()
                    if not line:
                        break
                    t = time.time()
                    ev = json.loads(line)
                    obj = ev["object"]
                    self.rv = obj["metadata"].get("resourceVersion", self.rv)
                    with self.lock:
                        self.events.append((t, ev["type"], obj["metadata"]["name"], self.keep(obj)))
            except (OSError, ValueError, http.client.HTTPException):
                time.sleep(0.1)
            except Exception:  # a bug here must show, not stop the watch silently
                import traceback
                traceback.print_exc()
                time.sleep(0.1)
            finally:
                conn.close()

    def of(self, number, role):
        """The events of PR `number`'s `role` Application (helpers, app): names end so, while
        the repository part shortens as the number grows (src/naming.rs)."""
        with self.lock:
            return [e for e in self.events if e[2].endswith("-pr-%d-%s" % (number, role))]


def argocd_span(events):
    """(created, ready, argocd seconds, idle-waiting-for-previewd seconds) of one Application
    from its watch events; None while it is not ready yet."""
    created = next((e[0] for e in events if e[1] == "ADDED"), None)
    if created is None:
        return None
    waiting, idle_since = 0.0, None
    for t, _type, _name, v in events:
        if t < created:
            continue
        if v == "ready":
            if idle_since is not None:
                waiting += t - idle_since
            return created, t, (t - created) - waiting, waiting
        if v == "needs-sync" and idle_since is None:
            idle_since = t
        elif v != "needs-sync" and idle_since is not None:
            waiting += t - idle_since
            idle_since = None
    return None


def preview_of(pd, path):
    """The API's view of one PR's preview ({} when it has none)."""
    status, body = pd.get(path)
    return (json.loads(body).get("preview") or {}) if status == 200 else {}


def one(pd, gh, watch, number):
    """Opens PR `number`, waits until GitHub hears it is ready; returns its timings (s)."""
    path = "/api/previews/codertocat/hello-world/%d" % number
    opened = F.fixture("pull_request.opened")
    opened["number"] = opened["pull_request"]["number"] = number
    reply = pd.deliver("pull_request", opened)
    t0 = time.time()
    assert reply.get("outcome") == "accepted", reply

    def success():
        writes = list(gh.writes)
        ours = {w[4] for w in writes if w[1] == "POST" and w[2].endswith("/deployments")
                and isinstance(w[3], dict) and w[3].get("environment") == "preview/pr-%d" % number}
        return next((w[0] for w in writes if w[1] == "POST" and isinstance(w[3], dict)
                     and w[3].get("state") == "success"
                     and any(w[2].endswith("/deployments/%d/statuses" % i) for i in ours)), None)

    api_ready, deadline = None, time.time() + 180
    while time.time() < deadline:
        if api_ready is None:
            shown = preview_of(pd, path).get("state")
            if shown == "ready":
                api_ready = time.time()
            elif shown in ("failed", "error"):
                raise AssertionError("PR %d: %s" % (number, preview_of(pd, path)))
        reported = success()
        if reported and api_ready:
            break
        time.sleep(0.025)
    else:
        raise AssertionError("PR %d: not reported ready within 180 s (api ready: %s)" % (number, api_ready))
    helpers = argocd_span(watch.of(number, "helpers"))
    app = argocd_span(watch.of(number, "app"))
    assert helpers and app, "PR %d: Argo CD never showed both Applications ready: %s" % (
        number, [e[1:] for e in watch.events[-8:]])
    argocd = helpers[2] + app[2]
    return {"pr": number, "total": reported - t0, "argocd": argocd, "added": reported - t0 - argocd,
            "to_helpers": helpers[0] - t0, "gate": app[0] - helpers[1], "to_state": api_ready - app[1],
            "to_report": reported - api_ready, "helpers": helpers[2], "app": app[2],
            "idle": helpers[3] + app[3]}


def close(pd, watch, number):
    closed = F.fixture("pull_request.closed.unmerged")
    closed["number"] = closed["pull_request"]["number"] = number
    closed["pull_request"]["updated_at"] = closed["pull_request"]["closed_at"] = "2019-05-15T19:00:00Z"
    pd.deliver("pull_request", closed)
    path = "/api/previews/codertocat/hello-world/%d" % number
    F.wait("PR %d's preview to be forgotten" % number, lambda: not preview_of(pd, path), 300)
    F.wait("PR %d's Applications to be gone" % number,
           lambda: [e[1] for e in watch.of(number, "helpers") + watch.of(number, "app")].count("DELETED") == 2, 60)


def p90(values):
    """Nearest rank."""
    values = sorted(values)
    return values[max(0, math.ceil(0.9 * len(values)) - 1)]


AS_EMULATOR = "PREVIEWD_LATENCY_EMULATOR"  # PREVIEWD_*: previewd's own environment drops it


def emulator_nodelay(path):
    """Runs kube_emulator.py at `path` as it is, but with TCP_NODELAY on every connection."""
    import importlib.util
    import socket
    spec = importlib.util.spec_from_file_location("kube_emulator", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    setup = module.Handler.setup

    def nodelay(handler):
        setup(handler)
        handler.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    module.Handler.setup = nodelay
    sys.argv[0] = path
    sys.exit(module.main())


def main():
    args = [a for a in sys.argv[1:] if a != "--nagle"]
    binary, python, emulator = (os.path.abspath(a) if os.sep in a else shutil.which(a) for a in args[:3])
    n = int(args[3]) if len(args) > 3 else 20
    if "--nagle" not in sys.argv:
        os.environ[AS_EMULATOR] = emulator
        emulator = os.path.abspath(__file__)
    work = tempfile.mkdtemp(prefix="previewd-latency-")
    emu = F.Emulator(python, emulator, work, seconds="0", extra=["--argocd-delay", "0"])
    gh = F.GitHub()
    pd = F.Previewd(binary, work)
    watch = Watcher(emu.base)
    rows, ok = [], False
    try:
        F.prepare(emu, pd, work, "shared", 'public_url = "http://127.0.0.1:%d"\n' % pd.port
                  + '[github]\ntoken = "e2e"\napi_url = "%s"\n' % gh.url
                  + F.config("shared", ["bin/migrate"]))
        cols = ("pr", "total", "argocd", "added", "to_helpers", "gate", "to_state", "to_report", "helpers",
                "app", "idle")
        print("emulator: %s; seconds; added = total - argocd = to_helpers + gate + to_state + to_report;"
              " argocd = helpers + app (less idle: Argo CD waiting for previewd to ask for a sync)"
              % ("as it is (Nagle)" if "--nagle" in sys.argv else "TCP_NODELAY"))
        print(" ".join("%10s" % c for c in cols))
        for i in range(n):
            row = one(pd, gh, watch, FIRST_PR + i)
            jobs = [j["name"] for j in emu.jobs() if j["result"] == "succeeded" and "-pr-%d-" % row["pr"] in j["name"]]
            for job in ("-db-create", "-migrate", "-seed"):
                assert any(j.endswith(job) for j in jobs), "PR %d: no %s Job succeeded: %s" % (row["pr"], job, jobs)
            rows.append(row)
            print(" ".join("%10d" % row[c] if c == "pr" else "%10.3f" % row[c] for c in cols), flush=True)
            close(pd, watch, FIRST_PR + i)
        print()
        for c in cols[1:]:
            vals = [r[c] for r in rows]
            print("%-10s p50 %7.3f  p90 %7.3f  max %7.3f" % (c, statistics.median(vals), p90(vals), max(vals)))
        p50 = statistics.median(r["added"] for r in rows) * 1000
        print("previewd-added p50 %.0f ms (target <= %d ms: %s) over %d PRs"
              % (p50, TARGET_MS, "met" if p50 <= TARGET_MS else "NOT met", len(rows)))
        ok = True
    except Exception:
        import traceback
        traceback.print_exc()
        F.log_tails(work)
    finally:
        watch.stop = True
        pd.stop()
        emu.close()
        gh.close()
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print("work directory kept: %s" % work)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    if os.environ.get(AS_EMULATOR) and "--kubeconfig" in sys.argv:
        emulator_nodelay(os.environ[AS_EMULATOR])
    main()

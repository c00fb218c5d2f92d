#!/usr/bin/env python3
"""Scale under the kubernetes sink (issue #17, target 2), the configuration `cargo bench
--bench scale` (directory sink) does not cover: 10 clusters, Applications through the
Kubernetes API of kube_emulator.py, and GitHub reporting on against a stand-in.

The real binary (release build) on a state of N live previews (default 5,000) over 100
repositories and 10 clusters (each with the test sealing certificate, so every preview's
database Secret is sealed for its cluster), database mode `shared`, cert-manager TLS:

  fill      N `pull_request.opened` deliveries; then until every preview is `ready` and
            GitHub (the stand-in) has stopped receiving reports
  restart   previewd stopped and started: the cold start is from the process's start to its
            first full reconcile pass over all N done (`previewd_reconcile_seconds` count);
            then the next full pass with nothing to do, timed from the metrics, and the
            requests it made of the API server (counted by the emulator)
  latency   --latency more PRs, one at a time: from the 202 to the emulator's watch event
            creating the PR's helpers Application; and the mean time of previewd's looks at
            previews meanwhile (`previewd_reconcile_seconds`); previewd's CPU per new PR
            (/proc/PID/stat, user and system)
  pushes    --latency pushes (`synchronize`, a new head) on live previews, one at a time:
            from the 202 to the watch event of its helpers Application carrying the new
            head, and previewd's CPU per push
  reads     GET /api/previews and the dashboard's first page, 20 times each
  sweep     previewd_sweep_seconds (a sweep pass with nothing due) over the run
  GitHub    the stand-in's requests in the steady state after the restart (after the first
            pass), by kind
  memory    the server's peak RSS (VmHWM)

The emulator is kube_emulator.py in its default (crude) Argo CD mode, run by this script
with three changes (it re-runs itself as the emulator, as latency.py does):
  - TCP_NODELAY on its connections (see latency.py: without it each kept-alive answer waits
    for the client's delayed ACK, which a kube-apiserver does not cost);
  - its crude Argo CD finishes the sync operation previewd asks for as Argo CD does: it
    moves `operation` into `status.operationState` (with the sync result's source) and
    clears it (argo-cd controller/appcontroller.go processRequestedAppOperation and
    controller/sync.go, which record operationState.operation and syncResult.source), so a
    preview becomes `ready` by previewd's own rule; the crude mode leaves `operation` set
    forever, and every preview would wait on Argo CD (polled) for the whole run;
  - lists answered as the API server answers them: paged by `limit`/`continue`, and only
    metadata for a PartialObjectMetadataList (the emulator answers every list whole and in
    full: 120 MB for 5,000 of these Applications, which no client of a real API server sees).
The faithful Argo CD renders every chart with Helm, which at 5,000 previews takes hours.

Usage: scale.py PREVIEWD PYTHON EMULATOR [--previews N] [--latency M]
Environment: SCALE_LOG=FILTER (previewd's log filter; the work directory is kept),
SCALE_PERF=FILE (`perf record --call-graph dwarf` of previewd over the new PRs into FILE,
over the pushes into FILE.push), SCALE_STRACE=FILE (likewise, `strace -c -f`: previewd's
system calls counted, fsync among them; it slows previewd, so its times do not count then),
SCALE_SYSCALLS=FILE (likewise, `perf stat` of a few system calls' tracepoints: counts
without slowing previewd).
Prints the figures; exits non-zero only when the state does not converge.
"""
import collections
import copy
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faithful as F  # noqa: E402

AS_EMULATOR = "PREVIEWD_SCALE_EMULATOR"  # PREVIEWD_*: previewd's own environment drops it
REPOS, CLUSTERS = 100, 10
APPS = F.APPS


def emulator_as_argocd(path):
    """Runs kube_emulator.py at `path` with TCP_NODELAY, an Argo CD that finishes the sync
    operations it is asked for, and a count of the requests it answers (GET /_bench/requests)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("kube_emulator", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    counts, counting = collections.Counter(), threading.Lock()
    setup = m.Handler.setup

    def nodelay(handler):
        setup(handler)
        handler.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    m.Handler.setup = nodelay

    get = m.Handler.do_GET

    def paged(self):
        """A list as the API server answers it: `limit` items at a time in name order, with a
        `continue` token (apiserver storage/etcd3 store.go GetList), and only metadata when
        the client asks for PartialObjectMetadataList (apiserver endpoints/handlers
        response.go). The emulator itself answers every list whole, in full, and copies every
        object under its store's lock to do it: at thousands of Applications, each page of a
        paged list would stop the whole API for seconds."""
        parts, q = self.parse()
        r = self.resolve(parts) if parts[:1] in (["api"], ["apis"]) else None
        if r is None or r[0] == "unknown" or r[2] or q.get("watch") in ("1", "true"):
            return get(self)
        gvr, ns, _name, _sub = r
        st, limit, after = self.store, int(q.get("limit") or 0), q.get("continue", "")
        with st.lock:
            keys = sorted(k for k, o in st.objects.items() if k[:3] == gvr and (ns is None or k[3] == ns)
                          and k[4] > after and m.matches(q, o))
            meta = {"resourceVersion": str(st.rv)}
            if limit and len(keys) > limit:
                keys = keys[:limit]
                meta["continue"] = keys[-1][4]
            metadata_only = "as=PartialObjectMetadataList" in (self.headers.get("Accept") or "")
            items = [copy.deepcopy(st.objects[k]["metadata"] if metadata_only else st.objects[k]) for k in keys]
        kind, api_version = m.RESOURCES[gvr][0] + "List", "%s/%s" % gvr[:2]
        if metadata_only:
            items = [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": meta}
                     for meta in items]
            kind, api_version = "PartialObjectMetadataList", "meta.k8s.io/v1"
        self.send_json(200, {"kind": kind, "apiVersion": api_version.lstrip("/"), "metadata": meta, "items": items})
    m.Handler.do_GET = paged

    def counted(verb, method):
        def handle(self):
            if self.path.startswith("/_bench/requests"):
                with counting:
                    return self.send_json(200, dict(counts))
            kind = "watch" if "watch=true" in self.path else ("list" if verb == "GET" and not re.search(
                r"/applications/[^/?]+", self.path) else verb)
            with counting:
                counts["%s %s" % (kind, "applications" if "/applications" in self.path else "other")] += 1
            return method(self)
        return handle
    for verb in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        name = "do_" + verb
        setattr(m.Handler, name, counted(verb, getattr(m.Handler, name)))

    def after_write(self, gvr, ns, name):
        if gvr != m.APPLICATIONS:
            return

        def settle():
            time.sleep(self.store.argocd_delay)
            with self.store.lock:
                obj = self.store.objects.get(gvr + (ns, name))
                if not obj or obj["metadata"].get("deletionTimestamp"):
                    return
                spec = obj.get("spec") or {}
                rev = (spec.get("source") or {}).get("targetRevision", "")
                compared = {k: copy.deepcopy(spec[k]) for k in ("source", "sources", "destination") if k in spec}
                status = obj.get("status") or {}
                status["sync"] = {"status": "Synced", "revision": rev, "comparedTo": compared}
                status["health"] = {"status": "Healthy"}
                operation = obj.pop("operation", None)
                if operation is not None:
                    status["operationState"] = {
                        "phase": "Succeeded", "message": "successfully synced (all tasks run)",
                        "operation": operation, "startedAt": m.now_iso(), "finishedAt": m.now_iso(),
                        "syncResult": {"revision": rev, "source": copy.deepcopy(spec.get("source"))}}
                obj["status"] = status
                self.store.put(gvr, ns, obj, "MODIFIED")
        threading.Thread(target=settle, daemon=True).start()
    m.Handler.after_write = after_write

    sys.argv[0] = path
    sys.exit(m.main())


def repo_of(n):
    return "scale/repo-%03d" % (n % REPOS)


class GitHub:
    """GitHub's REST API as previewd's reporting and resync use it: each repository's open
    PRs listed (with an ETag, 304 to a matching If-None-Match, like GitHub), every other
    listing empty, every write accepted with a new id. Counts requests by kind."""

    def __init__(self):
        import http.server
        self.open = collections.defaultdict(dict)  # repo -> number -> PR object
        self.counts, self.lock = collections.Counter(), threading.Lock()
        gh, ids = self, iter(range(1, 1 << 62))

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                # As the emulator's: no 40 ms delayed-ACK wait per kept-alive answer.
                http.server.BaseHTTPRequestHandler.setup(self)
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def answer(self, body, status=200, etag=None):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if etag:
                    self.send_header("ETag", etag)
                self.end_headers()
                self.wfile.write(data)

            def count(self, kind):
                with gh.lock:
                    gh.counts[kind] += 1

            def do_GET(self):
                path = urllib.parse.urlparse(self.path)
                if path.path == "/user":
                    self.count("GET /user")
                    return self.answer({"login": "previewd-scale", "id": 1, "type": "User"})
                pulls = re.fullmatch(r"/repos/([^/]+/[^/]+)/pulls", path.path)
                if pulls:
                    q = urllib.parse.parse_qs(path.query)
                    page, per = int(q.get("page", ["1"])[0]), int(q.get("per_page", ["30"])[0])
                    with gh.lock:
                        listed = [gh.open[pulls.group(1)][n] for n in sorted(gh.open[pulls.group(1)])]
                    body = listed[(page - 1) * per:page * per]
                    etag = 'W/"%s"' % hashlib.sha256(json.dumps(body).encode()).hexdigest()
                    if self.headers.get("If-None-Match") == etag:
                        self.count("GET pulls (304, not counted by GitHub)")
                        self.send_response(304)
                        self.send_header("ETag", etag)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.count("GET pulls")
                    return self.answer(body, etag=etag)
                self.count("GET " + re.sub(r"/repos/[^/]+/[^/]+/|\d+|[0-9a-f]{40}", "", path.path))
                if path.path.endswith("/check-runs"):
                    return self.answer({"total_count": 0, "check_runs": []})
                if path.path.endswith("/status"):
                    return self.answer({"state": "pending", "statuses": [], "total_count": 0})
                if path.path.endswith("/permission"):
                    return self.answer({"permission": "admin", "user": {"login": "x"}})
                return self.answer([])

            def write(self):
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                kind = re.sub(r"/repos/[^/]+/[^/]+/|/\d+", "", urllib.parse.urlparse(self.path).path)
                self.count("%s %s" % (self.command, kind))
                self.answer({"id": next(ids), "node_id": "x", "state": "success"}, 201)

            do_POST = do_PATCH = write

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def snapshot(self):
        with self.lock:
            return collections.Counter(self.counts)


def opened(template, n):
    event = copy.deepcopy(template)
    repo = repo_of(n)
    event["number"] = n
    event["pull_request"]["number"] = n
    event["repository"]["full_name"] = repo
    event["repository"]["name"] = repo.split("/")[1]
    event["pull_request"]["base"]["repo"]["full_name"] = repo
    return event


class Watcher:
    """The time each helpers Application is first seen created (its watch event's receipt)."""

    def __init__(self, base, since):
        self.url = urllib.parse.urlparse(base)
        self.created, self.rv, self.stop = {}, since, False
        # PR -> the head SHA a push gave it, and when its helpers Application was first seen
        # carrying it.
        self.expect, self.pushed = {}, {}
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while not self.stop:
            conn = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=300)
            try:
                conn.request("GET", "%s?watch=true&timeoutSeconds=280&resourceVersion=%s" % (APPS, self.rv))
                resp = conn.getresponse()
                while not self.stop:
                    line = resp.readline()
                    if not line:
                        break
                    t = time.time()
                    ev = json.loads(line)
                    meta = ev["object"]["metadata"]
                    self.rv = meta.get("resourceVersion", self.rv)
                    found = re.search(r"-pr-(\d+)-helpers$", meta["name"])
                    if ev["type"] == "ADDED" and found:
                        self.created.setdefault(int(found.group(1)), t)
                    sha = (meta.get("annotations") or {}).get("previewd.dev/head-sha")
                    if ev["type"] == "MODIFIED" and found and sha == self.expect.get(int(found.group(1))):
                        self.pushed.setdefault(int(found.group(1)), t)
            except (OSError, ValueError, http.client.HTTPException):
                time.sleep(0.05)
            finally:
                conn.close()


def metric(pd, name):
    """The sum over label sets of a metric's samples named exactly `name`."""
    _, body = pd.get("/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def peak_rss(pd, field="VmHWM:"):
    with open("/proc/%d/status" % pd.proc.pid) as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field))


def cpu_split(pd):
    """The CPU time previewd has spent: (user, system) seconds."""
    with open("/proc/%d/stat" % pd.proc.pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / os.sysconf("SC_CLK_TCK"), int(fields[12]) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pd):
    """The CPU time (user and system) previewd has spent."""
    return sum(cpu_split(pd))


# Counted by SCALE_SYSCALLS through the kernel's tracepoints, which, unlike strace, leave
# previewd's timing alone: commits (fsync), SQLite's busy waits (clock_nanosleep: its
# default busy handler sleeps 1 ms, then longer), locks (fcntl), hand-offs (futex), pages.
SYSCALLS = ["fsync", "clock_nanosleep", "fcntl", "futex", "pread64", "pwrite64", "epoll_wait"]


def profilers(pd, suffix):
    """With SCALE_PERF=FILE, a `perf record` of previewd into FILE + suffix; with
    SCALE_STRACE=FILE, an `strace -c -f` into FILE + suffix; with SCALE_SYSCALLS=FILE, a
    `perf stat` count of SYSCALLS into FILE + suffix; until `stopped`."""
    counted = ",".join(f"syscalls:sys_enter_{call}" for call in SYSCALLS)
    commands = {"SCALE_PERF": ["perf", "record", "-q", "-F", "999", "--call-graph", "dwarf,16384", "-o"],
                "SCALE_STRACE": ["strace", "-c", "-f", "-o"],
                "SCALE_SYSCALLS": ["perf", "stat", "-e", counted, "-o"]}
    return [subprocess.Popen(command + [os.environ[name] + suffix, "-p", str(pd.proc.pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name, command in commands.items() if os.environ.get(name)]


def stopped(profiling):
    for p in profiling:
        p.send_signal(signal.SIGINT)
        p.wait()


class Measured:
    """One phase: each change's delay from its 202, and what previewd spent over the phase."""

    def __init__(self, delays, cpu, seconds, api, github):
        self.samples, (self.user, self.system), self.seconds = delays, cpu, seconds
        self.api, self.github = api, github

    def delays(self):
        return (statistics.median(self.samples) * 1e3, pct(self.samples, 0.99) * 1e3, max(self.samples) * 1e3)

    def cpu(self):
        n = len(self.samples)
        return "%.2f ms (user %.2f, system %.2f)" % ((self.user + self.system) / n * 1e3, self.user / n * 1e3,
                                                    self.system / n * 1e3)

    def own(self, rest):
        """CPU per change less what previewd spends at rest (`rest` a second) over the phase."""
        return (self.user + self.system - rest * self.seconds) / len(self.samples) * 1e3

    def requests(self):
        def each(counts):
            return ", ".join("%s %.1f" % (k, v / len(self.samples)) for k, v in sorted((+counts).items()))
        return "of the API server: %s; of GitHub: %s" % (each(self.api), each(self.github))


def measure(pd, emu, gh, suffix, numbers, event_of, seen):
    """Delivers `event_of(n)` for each PR `n`, one at a time, each once `seen[n]` (the watch's
    receipt of what it wrote) has the one before."""
    profiling = profilers(pd, suffix)
    api_from, github_from, cpu_from, started = emu.req("GET", "/_bench/requests")[1], gh.snapshot(), \
        cpu_split(pd), time.time()
    delays = []
    for n in numbers:
        event = event_of(n)
        with gh.lock:
            gh.open[repo_of(n)][n] = event["pull_request"]
        pd.deliver("pull_request", event)
        accepted = time.time()
        wait("PR %d's Application" % n, lambda: n in seen, 30, 0.001)
        delays.append(seen[n] - accepted)
        time.sleep(0.01)
    cpu, seconds = [b - a for a, b in zip(cpu_from, cpu_split(pd))], time.time() - started
    stopped(profiling)
    if "SCALE_LOG" in os.environ:  # to find the phase in previewd's log
        print("  (phase%s: %s to %s UTC)" % (suffix, *(time.strftime("%H:%M:%S", time.gmtime(t)) + ".%03d" % (
            t % 1 * 1000) for t in (started, started + seconds))), flush=True)
    api = collections.Counter(emu.req("GET", "/_bench/requests")[1])
    api.subtract(api_from)
    github = gh.snapshot()
    github.subtract(github_from)
    return Measured(delays, cpu, seconds, api, github)


class Sweeps:
    """Each sweep pass's time, from `previewd_sweep_seconds` read every second (a scrape of
    /metrics counts the previews by state: at 5,000, a few ms of previewd's CPU each)."""

    def __init__(self, pd):
        self.took, self.stop = [], False

        def run():
            count, total = 0, 0.0
            while not self.stop:
                now_count = metric(pd, "previewd_sweep_seconds_count")
                if now_count > count:
                    now_total = metric(pd, "previewd_sweep_seconds_sum")
                    self.took.append((now_total - total) / (now_count - count))
                    count, total = now_count, now_total
                time.sleep(1)
        threading.Thread(target=run, daemon=True).start()


def wait(what, predicate, timeout, every=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(every)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


def pct(values, p):
    values = sorted(values)
    return values[min(len(values), max(1, int(-(-len(values) * p // 1)))) - 1]


def config(github_url):
    cert = os.path.join(F.FIXTURES, "sealed", "test-cert.pem")
    clusters = "".join('[[clusters]]\nname = "c%d"\nserver = "https://c%d.k8s.example.com"\nsealing_cert = "%s"\n'
                       'ingress_target = "ingress.c%d.example.com"\n' % (i, i, cert, i) for i in range(CLUSTERS))
    return ('[github]\ntoken = "scale"\napi_url = "%s"\n[sink]\nkind = "kubernetes"\n[defaults]\n'
            'domain = "preview.example.com"\n[database]\nmode = "shared"\nnamespace = "previewd-system"\n'
            'host = "postgres.example"\n%s' % (github_url, clusters))


def main():
    args = sys.argv[1:]

    def option(name, default):
        return int(args[args.index(name) + 1]) if name in args else default
    previews, count = option("--previews", 5000), option("--latency", 200)
    binary, python, emulator = (os.path.abspath(a) for a in args[:3])
    os.environ[AS_EMULATOR] = emulator
    work = tempfile.mkdtemp(prefix="previewd-scale-")
    emu = F.Emulator.__new__(F.Emulator)
    emu.log = open(os.path.join(work, "emulator.log"), "w")
    emu.proc = subprocess.Popen(
        [python, os.path.abspath(__file__), "--port", "0", "--kubeconfig", os.path.join(work, "kubeconfig"),
         "--argocd-delay", "0", "--namespaces", "argocd,previewd-system"],
        stdout=subprocess.PIPE, stderr=emu.log, text=True)
    emu.base = "http://127.0.0.1:%d" % int(emu.proc.stdout.readline())
    gh = GitHub()
    pd = F.Previewd(binary, work)
    env = pd.env
    pd.env = lambda: {**env(), "PREVIEWD_LOG": os.environ.get("SCALE_LOG", "warn")}
    template = F.fixture("pull_request.opened")
    ok = False
    try:
        with open(os.path.join(work, "previewd.toml"), "w") as f:
            f.write(config(gh.url))
        import yaml
        for project in yaml.safe_load_all(pd.run("render", "--projects")):
            status, body = emu.req("POST", "/apis/argoproj.io/v1alpha1/namespaces/argocd/appprojects", project)
            assert status == 201, body
        print("previewd scale (kubernetes sink): %d previews over %d repositories and %d clusters, "
              "GitHub reporting on; %d cores" % (previews, REPOS, CLUSTERS, os.cpu_count()), flush=True)

        def state_count(state):
            db = sqlite3.connect("file:%s?mode=ro" % os.path.join(work, "previewd.db"), uri=True, timeout=30)
            try:
                return db.execute("SELECT count(*) FROM previews WHERE observed = ?1", (state,)).fetchone()[0]
            finally:
                db.close()

        # 1. Fill.
        pd.start()
        started = time.time()
        for n in range(1, previews + 1):
            event = opened(template, n)
            with gh.lock:
                gh.open[repo_of(n)][n] = event["pull_request"]
            pd.deliver("pull_request", event)
        recorded = time.time() - started
        wait("every preview ready", lambda: state_count("ready") >= previews, 1800, every=1)
        ready = time.time() - started
        last = [None, time.time()]

        def reports_settled():
            counts = gh.snapshot()
            total = sum(counts.values())
            if total != last[0]:
                last[0], last[1] = total, time.time()
            if int(time.time() - started) % 30 == 0:
                print("  GitHub so far: %s" % dict(counts), flush=True)
            return time.time() - last[1] > 10
        wait("GitHub reports to settle", reports_settled, 1800, every=1)
        one = emu.req("GET", APPS + "?limit=1")[1]["items"][0]
        print("fill: %d deliveries recorded in %.1f s; every preview ready %.1f s after the first; "
              "an Application is %d bytes of JSON; GitHub requests: %s"
              % (previews, recorded, ready, len(json.dumps(one)), dict(gh.snapshot())), flush=True)
        pd.stop()

        # 2. Restart: cold start, then a pass with nothing to do.
        spawned = time.time()
        pd.start()
        sweeps = Sweeps(pd)
        wait("the first pass", lambda: metric(pd, "previewd_reconcile_seconds_count") >= previews, 600)
        cold = time.time() - spawned
        print("  peak RSS after the cold start: %d MiB (now %d MiB)" % (peak_rss(pd) // 1024, peak_rss(pd, "VmRSS:") // 1024), flush=True)
        github_from = gh.snapshot()
        wait("the second pass to start", lambda: metric(pd, "previewd_reconcile_seconds_count") > previews, 120, 0.02)
        pass_api_from, begun = emu.req("GET", "/_bench/requests")[1], time.time()
        wait("the second pass", lambda: metric(pd, "previewd_reconcile_seconds_count") >= 2 * previews, 600, 0.02)
        idle = time.time() - begun
        pass_api = collections.Counter(emu.req("GET", "/_bench/requests")[1])
        pass_api.subtract(pass_api_from)
        idle_github = gh.snapshot()
        idle_github.subtract(github_from)
        idle_seconds = time.time() - spawned - cold
        print("restart: first full pass over %d done %.2f s after the process started; the next full pass "
              "(nothing to do) took %.0f ms, with %s requests of the API server"
              % (previews, cold, idle * 1e3, dict(+pass_api)), flush=True)
        print("GitHub requests in those %.0f s, from the first pass's end to the second's: %s"
              % (idle_seconds, dict(+idle_github) or "none"), flush=True)

        # 3. Latency on top of them: new PRs, then pushes (`synchronize`, a new head) on live
        # previews, the change a preview sees most (no sealing: its secrets are sealed once; a
        # new rendering, an Application patched, the new head's deployment on GitHub).
        rv = emu.req("GET", APPS + "?limit=1")[1]["metadata"]["resourceVersion"]
        watch = Watcher(emu.base, rv)
        looks_from = (metric(pd, "previewd_reconcile_seconds_count"), metric(pd, "previewd_reconcile_seconds_sum"))

        def new_pr(n):
            return opened(template, n)
        fresh = measure(pd, emu, gh, "", range(previews + 1, previews + count + 1), new_pr, watch.created)
        looks = metric(pd, "previewd_reconcile_seconds_count") - looks_from[0]
        looked = metric(pd, "previewd_reconcile_seconds_sum") - looks_from[1]
        print("latency: %d PRs over %d live, 202 -> helpers Application created: p50 %.1f ms, p99 %.1f ms, "
              "max %.1f ms" % (count, previews, *fresh.delays()), flush=True)
        print("  meanwhile %d looks at previews (the new PRs' reconciles, each a render, a seal and the API "
              "calls), %.2f ms each on average (previewd_reconcile_seconds); previewd's CPU per new PR, its "
              "intake, reconciles, watch events and GitHub reports included: %s" % (looks, looked / looks * 1e3,
                                                                                    fresh.cpu()), flush=True)
        print("  per new PR, requests %s" % fresh.requests(), flush=True)

        sync = F.fixture("pull_request.synchronize")

        def push(n):
            event = opened(sync, n)
            sha = hashlib.sha1(b"push %d" % n).hexdigest()
            event["before"], event["after"] = event["pull_request"]["head"]["sha"], sha
            event["pull_request"]["head"]["sha"] = sha
            watch.expect[n] = sha
            return event
        pushed = measure(pd, emu, gh, ".push", range(1, previews + 1, max(1, previews // count))[:count], push,
                         watch.pushed)
        watch.stop = True
        print("pushes: %d new heads on live previews, 202 -> helpers Application patched: p50 %.1f ms, "
              "p99 %.1f ms, max %.1f ms; previewd's CPU per push: %s" % (count, *pushed.delays(), pushed.cpu()),
              flush=True)
        print("  per push, requests %s" % pushed.requests(), flush=True)

        # 4. Reads.
        def timed(path):
            times = []
            for _ in range(20):
                t = time.time()
                status, _ = pd.get(path)
                assert status == 200, (path, status)
                times.append(time.time() - t)
            return statistics.median(times) * 1e3, pct(times, 0.99) * 1e3
        api, page = timed("/api/previews"), timed("/")
        print("reads over %d previews: GET /api/previews p50 %.1f ms, p99 %.1f ms; dashboard first page "
              "p50 %.1f ms, p99 %.1f ms" % (previews + count, *api, *page), flush=True)

        # At rest: what previewd spends with nothing new (its passes every 30 s: reconcile,
        # GitHub reports, sweeps), so that the CPU per new PR can be told from it.
        rest_from, rest_started = cpu_seconds(pd), time.time()
        time.sleep(60)
        rest = (cpu_seconds(pd) - rest_from) / (time.time() - rest_started)
        print("at rest: %.1f ms of CPU a second; less that, a new PR's own: %.2f ms, a push's: %.2f ms"
              % (rest * 1e3, fresh.own(rest), pushed.own(rest)), flush=True)

        # 5. Sweep, memory. The first sweep runs at the start, with the orphan check (every
        # tenth pass: every Application listed), beside the cold pass; the next has nothing
        # due and no orphan check.
        wait("the second sweep", lambda: len(sweeps.took) >= 2, 90, 0.1)
        sweeps.stop = True
        print("sweep, nothing due: the first (at the start, orphans looked for) %.1f ms, the next %s ms"
              % (sweeps.took[0] * 1e3, ", ".join("%.1f" % (t * 1e3) for t in sweeps.took[1:])), flush=True)
        print("server peak RSS: %d MiB" % (peak_rss(pd) // 1024), flush=True)
        ok = True
    except Exception:
        import traceback
        traceback.print_exc()
        F.log_tails(work)
    finally:
        pd.stop()
        emu.close()
        gh.server.shutdown()
    if ok and "SCALE_LOG" not in os.environ:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print("work directory kept: %s" % work)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    if os.environ.get(AS_EMULATOR) and "--kubeconfig" in sys.argv:
        emulator_as_argocd(os.environ[AS_EMULATOR])
    main()

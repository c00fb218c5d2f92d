#!/usr/bin/env python3
"""previewd end to end against the faithful Argo CD (kube_emulator.py --argocd faithful).

Through the real binary, once per database mode (shared, cnpg): helpers-chart and an app
chart (tests/e2e/app-chart) mapped to this checkout, the AppProjects `previewd render
--projects` prints applied, the test sealing key, --cert-http01. The walk:

  opened   -> the preview's Ingress (app_service, public_url): the helpers' sync waits in its
              wave, Progressing, no seed and no app Application, until the cluster's ingress
              controller publishes an address -> helpers Synced/Healthy/Succeeded -> app
              Application at the head (its own Ingress off) -> ready
  pushed   -> the migration Job ran again for the new image, before the app moved to it
  reseed   -> the seed Job ran again, at the next generation
  a migration that fails -> the preview is failed (naming the Job); the app stays where it was
  closed   -> every object gone, every hook in the provisioner namespace included, the Ingress too
  (shared) a repository without app_service whose app chart ships its own Ingress -> the
              apps' AppProject refuses the app's sync, the preview failed, no Ingress made

and, with `wait_for = ["build-image"]` (shared mode; a small GitHub stand-in answers the
look-ups and takes the reports):

  opened   -> the helpers provisioned (database Job included), no Job runs the PR's image,
              no app Application, the preview waiting_for_ci
  check succeeds -> the migration runs the image, the app deploys, ready
  pushed   -> waiting again: no migration at the new image until its check succeeds

and, with `database_template = true` (template-shared, template-cnpg):

  opened   -> seeded while generation 1 builds (create, migrate at the base commit's image,
              seed, then seal); generation 1 ready; its size Job ran after the seal, and a
              report with the token the cluster opened from its SealedSecret is listed; its
              pool keeper (a Deployment) is Healthy
  another PR -> cloned from generation 1, no seed
  /preview refresh-template -> generation 2 ready, generation 1's Application gone and its
              PostDelete drop run, its pool keeper gone
  closed   -> the template kept; `previewd destroy-template` -> nothing of it left

and, with `mail = true` (relaying to one named recipient) and `messaging = "rabbitmq"`
(services-shared: database and broker shared; services-cnpg: CloudNativePG and the RabbitMQ
topology operator, whose part a small stand-in in this file plays):

  opened   -> ready; the Mailpit Deployment (run by the emulator's Deployment controller) and
              its Service Synced/Healthy in the preview namespace; shared: the `-amqp-create`
              Sync hook ran in previewd-system after `<slug>-amqp-hash` was unsealed with its
              PASSWORD_HASH, its pod not held (the admin Secret `rabbitmq-admin` made here);
              operator: Vhost, User, Permission, OperatorPolicy in `rabbitmq`, made Ready by
              the stand-in; the broker user's hash is of the app's AMQP_PASSWORD
              (SHA-256 shared, SHA-512 operator); `<slug>-mail` and `<slug>-amqp` opened with
              the cluster's key, every key there, MP_SMTP_AUTH = "preview:" + SMTP_PASSWORD,
              AMQP_URL built from its parts; the app told preview.mailSecret and
              messagingSecret; the Ingress routes `/__mail/` to `<slug>-mail:http` before `/`;
              the ledger lists the catcher and the broker's items
  closed   -> nothing left (shared: the PostDelete `-amqp-delete` ran and HookSucceeded
              removed it; operator: each rabbitmq.com object went through the operator's
              finalizer); the destroyed history says each ledger item gone

and, with `sleep` (shared database, `mail = true`, the app chart, `access = "public"`; the
emulator run with server-side apply's removal of what previewd applies no longer played
here, `run_emulator`):

  opened   -> ready (db-create, migrate, seed, the app's smoke hook once each)
  /preview sleep -> state sleeping: both Applications re-rendered asleep (the app's
              replicaCount 0, autoscaling off, preview.asleep; the helpers' mail.asleep), their
              hashes the awake ones + "-asleep", synced by previewd with syncStrategy apply;
              the app Deployment and Mailpit at 0, the app's CronJob suspended, both
              Applications Synced/Healthy; no hook ran; database, Secrets and namespace kept
  self-heal -> the app Deployment scaled to 1 behind Argo CD's back is brought back to 0
              by Argo CD; still sleeping, no hook
  a request -> the check answers 401 (ingress-nginx), 503 + Retry-After and the "Waking
              up" page (Traefik), the sign-in route the waking page; ready again at the same
              renderings awake, synced with syncStrategy apply: the app at 1, its CronJob
              running, Mailpit at 1, no hook; then the check answers 200. Over a few
              sleep/wake cycles, previewd's share of a wake (the check's request to the app's
              Application rendered awake, polled every 10 ms) is printed, never asserted
  /preview reseed while asleep -> the seed Job runs (hooks), the preview stays asleep
  pushed while asleep -> woken at the new head, synced with hooks: the migration ran at it
  sleep_after = "2s" -> the sweeper puts it to sleep without a request; a request wakes it
  closed   -> nothing left

Every Job's pod could start (no Secret or ConfigMap missing), and the sealed values opened
with the cluster's key. Usage: faithful.py PREVIEWD PYTHON EMULATOR [MODE ...]
Ends with "N passed, M failed"; non-zero exit on a failure.
"""
import base64
import copy
import hashlib
import hmac
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
SECRET = "e2e-webhook-secret-0123456789"
SLUG = "pv-codertocat-hello-world-4d960c3af87af320-pr-2"
HELPERS, APP = SLUG + "-helpers", SLUG + "-app"
SHA_A = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
SHA_B = "b" * 40
SHA_C = "c" * 40
IMAGE = "ghcr.io/codertocat/hello-world"
APPS = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications"


def log_tails(work, lines=40):
    """The last `lines` of previewd's and the emulator's logs in `work`, to stderr: what a
    failed run leaves to read."""
    for name in ("serve.log", "emulator.log"):
        path = os.path.join(work, name)
        if os.path.exists(path):
            with open(path) as f:
                sys.stderr.write("--- %s (tail)\n%s\n" % (name, "".join(f.readlines()[-lines:])))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fixture(name):
    with open(os.path.join(FIXTURES, "github", name + ".json")) as f:
        return json.load(f)


def run_emulator(emulator, args):
    """The emulator (`faithful.py --emulator EMULATOR ARGS`, as `Emulator(learned=True)` starts
    it) with what it has not learned yet played here, as the real API server does it:
    server-side apply removes what the same field manager applied before and applies no
    longer (a field it alone owns; Kubernetes' structured-merge-diff), where the emulator
    merges and keeps it, so a sleep written into `helm.valuesObject` would outlive the wake
    whatever previewd applies. Lists are taken whole; the object's uid and resourceVersion
    (a write's preconditions) are not fields."""
    import threading

    sys.path.insert(0, os.path.dirname(os.path.abspath(emulator)))
    sys.argv = [emulator] + list(args)
    import kube_emulator

    local, applied = threading.local(), {}
    merge, decode, write_obj = kube_emulator.deep_merge, kube_emulator.Handler.decode, kube_emulator.Handler.write_obj

    def prune(out, before, now):
        for k, was in before.items():
            if not isinstance(out, dict):
                return
            if k not in now:
                out.pop(k, None)
            elif isinstance(was, dict) and isinstance(now[k], dict):
                prune(out.get(k), was, now[k])

    def applying(handler):
        ctype = (handler.headers.get("Content-Type") or "").split(";")[0]
        if handler.command != "PATCH" or ctype != "application/apply-patch+yaml":
            return None
        url = urllib.parse.urlparse(handler.path)
        manager = urllib.parse.parse_qs(url.query).get("fieldManager", [""])[0]
        return (url.path, manager)

    def patched_write_obj(self, verb):
        local.key, local.body = applying(self), None
        try:
            return write_obj(self, verb)
        finally:
            if local.key is not None and isinstance(local.body, dict):
                body = copy.deepcopy(local.body)
                for field in ("uid", "resourceVersion"):
                    (body.get("metadata") or {}).pop(field, None)
                applied[local.key] = body
            local.key = local.body = None

    def patched_decode(raw):
        body = decode(raw)
        if getattr(local, "key", None) is not None:
            local.body = body
        return body

    def patched_merge(base, patch):
        key = getattr(local, "key", None)
        local.key = None  # the object's own merge only, not its parts' (merge recurses through here)
        try:
            out = merge(base, patch)
        finally:
            local.key = key
        if key is not None and key in applied and isinstance(patch, dict) and isinstance(out, dict):
            prune(out, applied[key], patch)
        return out

    kube_emulator.deep_merge = patched_merge
    kube_emulator.Handler.decode = staticmethod(patched_decode)
    kube_emulator.Handler.write_obj = patched_write_obj
    sys.exit(kube_emulator.main())


class Emulator:
    def __init__(self, python, emulator, work, seconds="0.3", extra=(), learned=False):
        """`seconds`: how long a Job runs and a Deployment or Certificate takes to be ready;
        `extra`: more emulator arguments (latency.py sets every Argo CD delay to zero);
        `learned`: run it with what it has not learned yet played here (`run_emulator`). The
        cluster's ingress controller runs from the start (`publishing`; clear it to hold it)."""
        import threading

        self.publishing, self.stopping = threading.Event(), threading.Event()
        self.publishing.set()
        self.log = open(os.path.join(work, "emulator.log"), "w")
        start = [python, os.path.abspath(__file__), "--emulator", emulator] if learned else [python, emulator]
        self.proc = subprocess.Popen(
            [*start, "--port", "0", "--kubeconfig", os.path.join(work, "kubeconfig"),
             "--argocd", "faithful", "--namespaces", "argocd,default,previewd-system,pg",
             "--repo", "https://github.com/previewd/previewd.git=" + ROOT,
             "--repo", "https://github.com/codertocat/hello-world.git=" + os.path.join(ROOT, "tests", "e2e"),
             "--sealing-key", os.path.join(FIXTURES, "sealed", "test-key.pem"), "--cert-http01",
             "--job-seconds", seconds, "--ready-seconds", seconds, *extra],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError("the emulator did not start: %r (see emulator.log)" % line)
        self.base = "http://127.0.0.1:%d" % int(line)
        threading.Thread(target=self.ingress_controller, daemon=True).start()

    def req(self, method, path, body=None, ctype="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(self.base + path, data=data, method=method,
                                   headers={"Content-Type": ctype})
        try:
            with urllib.request.urlopen(r, timeout=10) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def objects(self):
        return self.req("GET", "/_emu/objects")[1]

    def jobs(self):
        return self.req("GET", "/_emu/argocd/jobs")[1]

    def actions(self):
        return self.req("GET", "/_emu/argocd/log")[1]

    def app(self, name):
        status, body = self.req("GET", "%s/%s" % (APPS, name))
        return body if status == 200 else None

    def ingresses(self, namespace=None):
        where = "/namespaces/%s" % namespace if namespace else ""
        status, body = self.req("GET", "/apis/networking.k8s.io/v1%s/ingresses" % where)
        return body["items"] if status == 200 else []

    def ingress_controller(self):
        """The cluster's ingress controller, which the emulator has not got, as ingress-nginx
        keeps Ingress status (--update-status, on by default): every Ingress gets the
        controller's address in status.loadBalancer.ingress, written through the status
        subresource (ingress-nginx internal/ingress/status/status.go updateStatus, runUpdate).
        Until then Argo CD counts an Ingress Progressing (gitops-engine pkg/health/
        health_ingress.go), and the twin does the same."""
        while not self.stopping.wait(0.2):
            if not self.publishing.is_set():
                continue
            try:
                for ing in self.ingresses():
                    m = ing["metadata"]
                    if m.get("deletionTimestamp") or ((ing.get("status") or {}).get("loadBalancer") or {}).get("ingress"):
                        continue
                    self.req("PATCH", "/apis/networking.k8s.io/v1/namespaces/%s/ingresses/%s/status"
                             % (m["namespace"], m["name"]),
                             {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}},
                             "application/merge-patch+json")
            except (OSError, ValueError, KeyError):
                pass  # the emulator is stopping, or the object went

    def close(self):
        self.stopping.set()
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Previewd:
    def __init__(self, binary, work):
        self.binary, self.work, self.proc = binary, work, None
        self.port = free_port()

    def env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREVIEWD_")}
        env.update({"KUBECONFIG": os.path.join(self.work, "kubeconfig"),
                    "PREVIEWD_GITHUB_WEBHOOK_SECRET": SECRET,
                    "PREVIEWD_LISTEN": "127.0.0.1:%d" % self.port,
                    "PREVIEWD_LOG": "info,previewd=debug"})
        return env

    def run(self, *args):
        out = subprocess.run([self.binary, "--config", "previewd.toml", *args], cwd=self.work, env=self.env(),
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError("previewd %s failed: %s" % (" ".join(args), out.stderr))
        return out.stdout

    def start(self):
        self.log = open(os.path.join(self.work, "serve.log"), "a")
        self.proc = subprocess.Popen([self.binary, "--config", "previewd.toml", "serve"], cwd=self.work,
                                     env=self.env(), stdout=self.log, stderr=self.log)
        wait("previewd to answer /healthz", lambda: self.get("/healthz")[0] == 200, 30)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)

    def get(self, path):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path), timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return 0, b""

    def deliver(self, event, payload):
        body = json.dumps(payload).encode()
        sig = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        r = urllib.request.Request("http://127.0.0.1:%d/webhooks/github" % self.port, data=body, method="POST",
                                   headers={"Content-Type": "application/json", "X-GitHub-Event": event,
                                            "X-GitHub-Delivery": str(uuid.uuid4()),
                                            "X-Hub-Signature-256": "sha256=" + sig})
        with urllib.request.urlopen(r, timeout=10) as resp:
            assert resp.status in (200, 202), resp.status
            return json.loads(resp.read())

    def preview(self):
        db = sqlite3.connect(os.path.join(self.work, "previewd.db"))
        try:
            row = db.execute("SELECT observed, last_error, head_sha FROM previews").fetchone()
        finally:
            db.close()
        return row

    def history(self, what):
        db = sqlite3.connect(os.path.join(self.work, "previewd.db"))
        try:
            return [r[0] for r in db.execute("SELECT reason FROM history WHERE what = ?1 ORDER BY id", (what,))]
        finally:
            db.close()


class GitHub:
    """Just enough of GitHub's REST API for previewd to report and look up checks: every
    listing empty (no check is known but what webhooks tell), every write accepted (each
    given a new id) and kept in `writes` as (time received, method, path, JSON body, id)."""

    def __init__(self):
        import http.server
        import itertools
        import threading

        self.writes = []
        writes, ids = self.writes, itertools.count(1)

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, body, status=200):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                path = self.path.split("?")[0]
                if path == "/user":
                    return self.answer({"login": "previewd-e2e", "id": 1, "type": "User"})
                if path.endswith("/check-runs"):
                    return self.answer({"total_count": 0, "check_runs": []})
                if path.endswith("/status"):
                    return self.answer({"state": "pending", "statuses": [], "total_count": 0})
                if path.endswith("/actions/runs"):
                    return self.answer({"total_count": 0, "workflow_runs": []})
                if path.endswith("/permission"):
                    return self.answer({"permission": "admin", "user": {"login": "x"}})
                return self.answer([])

            def write(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                try:
                    body = json.loads(body or b"null")
                except ValueError:
                    pass
                given = next(ids)
                writes.append((time.time(), self.command, self.path, body, given))
                self.answer({"id": given, "node_id": "x", "state": "success"}, 201)

            do_POST = do_PATCH = write

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def check_run(sha, conclusion, at):
    event = fixture("check_run.completed")
    pr = fixture("pull_request.opened")
    event["repository"] = pr["repository"]
    run = event["check_run"]
    run["name"] = "build-image"
    run["head_sha"] = sha
    run["status"], run["conclusion"] = "completed", conclusion
    run["started_at"] = run["completed_at"] = at
    return event


def wait(what, predicate, timeout=120.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


def config(mode, migrate, revision="v0.1.0"):
    database = {"shared": '[database]\nmode = "shared"\nnamespace = "previewd-system"\nhost = "postgres.example"\n',
                "cnpg": '[database]\nmode = "cnpg"\nnamespace = "pg"\ncnpg_cluster = "shared"\n'}[mode]
    return """[sink]
kind = "kubernetes"
[chart]
revision = "%s"
[defaults]
domain = "preview.example.com"
%s[tls]
mode = "cert-manager"
[[clusters]]
name = "in-cluster"
server = "https://kubernetes.default.svc"
sealing_cert = "%s"
ingress_target = "ingress.example.com"
[[repos]]
name = "codertocat/hello-world"
image = "%s"
migrate_command = %s
seed = "example"
app_chart = "app-chart"
app_service = "web:http"
""" % (revision, database, os.path.join(FIXTURES, "sealed", "test-cert.pem"), IMAGE, json.dumps(migrate))


def pushed(sha, at):
    event = fixture("pull_request.synchronize")
    event["pull_request"]["head"]["sha"] = sha
    event["pull_request"]["updated_at"] = at
    return event


def command(line, comment_id):
    event = fixture("issue_comment.created.pull_request")
    pr = fixture("pull_request.opened")
    event["repository"] = pr["repository"]
    event["issue"]["number"] = 2
    event["comment"]["body"] = line
    event["comment"]["author_association"] = "OWNER"
    event["comment"]["user"] = pr["repository"]["owner"]
    event["comment"]["id"] = comment_id
    event["comment"]["created_at"] = event["comment"]["updated_at"] = "2019-05-15T17:00:00Z"
    return event


def ready_at(pd, emu, sha):
    """The preview ready at `sha`, with its app Application synced there."""
    row = pd.preview()
    app = emu.app(APP)
    return (row is not None and row[0] == "ready" and row[2] == sha and app is not None
            and app["spec"]["source"]["targetRevision"] == sha
            and (app.get("status") or {}).get("sync", {}).get("revision") == sha)


def runs(emu, suffix, image=None):
    return [j for j in emu.jobs() if j["name"].endswith(suffix) and (image is None or j["image"] == image)]


def check_pods_started(emu):
    """No Job was ever held for a missing Secret or ConfigMap key, nor is one now."""
    blocked = [(j["namespace"], j["name"], j["blocked"]) for j in emu.jobs() if j.get("blocked")]
    assert not blocked, "Jobs whose pod could not start: %s" % blocked


def prepare(emu, pd, work, mode, toml):
    """previewd.toml written, the shared server's admin Secret (shared mode) and the
    AppProjects `previewd render --projects` prints applied, then previewd started."""
    with open(os.path.join(work, "previewd.toml"), "w") as f:
        f.write(toml)
    if mode == "shared":
        admin = {k: base64.b64encode(v.encode()).decode() for k, v in
                 {"PGHOST": "postgres.example", "PGPORT": "5432", "PGUSER": "postgres", "PGPASSWORD": "admin"}.items()}
        status, body = emu.req("POST", "/api/v1/namespaces/previewd-system/secrets",
                               {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "postgres-admin"},
                                "data": admin})
        assert status == 201, body
    if mode == "cnpg":
        # The Cluster's superuser Secret (enableSuperuserAccess), which the access, clone,
        # template and drop Jobs use.
        superuser = {k: base64.b64encode(v.encode()).decode() for k, v in
                     {"host": "shared-rw.pg.svc", "port": "5432", "username": "postgres", "password": "su"}.items()}
        status, body = emu.req("POST", "/api/v1/namespaces/pg/secrets",
                               {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shared-superuser"},
                                "type": "kubernetes.io/basic-auth", "data": superuser})
        assert status == 201, body
    import yaml
    for project in yaml.safe_load_all(pd.run("render", "--projects")):
        status, body = emu.req("POST", "/apis/argoproj.io/v1alpha1/namespaces/argocd/appprojects", project)
        assert status == 201, body
    pd.start()


# A repository whose app chart (the same tests/e2e/app-chart) ships its own Ingress and that
# has not named an app_service: previewd makes it no Ingress, and the apps' AppProject admits
# none.
OWN_INGRESS = "codertocat/hello-ingress"
OWN_INGRESS_REPO = """[[repos]]
name = "%s"
image = "%s"
app_chart = "app-chart"
""" % (OWN_INGRESS, IMAGE)


def own_ingress(event):
    """`event` as OWN_INGRESS sends it."""
    return json.loads(json.dumps(event).replace("Hello-World", "Hello-Ingress"))


def check_edge(emu, pd, base):
    """The preview's Ingress, made by the helpers before the cluster's ingress controller
    published its address: the helpers' sync waits in the Ingress's wave (Argo CD counts it
    Progressing), so the PostSync seed and the app's Application wait too; then the address
    published, the gate opens. Returns how long the controller was held (not the walk's time
    to ready)."""
    found = wait("the helpers' Ingress", lambda: emu.ingresses(SLUG), 180)
    held = time.time()
    assert len(found) == 1, found
    ingress = found[0]
    time.sleep(1.5)  # several of the twin's refreshes: the migration done, the wave still waiting
    st = emu.app(HELPERS)["status"]
    health = [r.get("health", {}).get("status") for r in st.get("resources", []) if r["kind"] == "Ingress"]
    assert health == ["Progressing"], st.get("resources")
    assert st["health"]["status"] == "Progressing", st["health"]
    assert st["operationState"]["phase"] == "Running", st["operationState"]
    assert runs(emu, "-migrate"), "the migration ran beside the Ingress (wave 0): %s" % emu.jobs()
    assert not runs(emu, "-seed"), "the PostSync seed waits for the Ingress's wave"
    assert emu.app(APP) is None, "the app waits behind the helpers' gate"
    assert (pd.preview() or [None])[0] != "ready", pd.preview()
    m, spec = ingress["metadata"], ingress["spec"]
    host = SLUG + ".preview.example.com"
    annotations = m.get("annotations") or {}
    assert annotations.get("nginx.ingress.kubernetes.io/auth-url") == base + "/auth/check?host=" + host, annotations
    assert annotations.get("nginx.ingress.kubernetes.io/auth-signin") == base + "/auth/signin", annotations
    assert annotations.get("nginx.ingress.kubernetes.io/auth-response-headers") == "X-Auth-Request-User", annotations
    assert not [k for k in annotations if "auth-cache" in k], annotations
    assert [r["host"] for r in spec["rules"]] == [host], spec
    assert spec["tls"] == [{"hosts": [host], "secretName": SLUG + "-tls"}], spec
    backend = spec["rules"][0]["http"]["paths"][0]["backend"]
    assert backend == {"service": {"name": "web", "port": {"name": "http"}}}, backend
    assert m["labels"].get("app.kubernetes.io/instance") == HELPERS, m["labels"]
    print("faithful: the preview's Ingress (auth-url %s, host %s) held the helpers Progressing, the seed and the app "
          "waiting" % (annotations["nginx.ingress.kubernetes.io/auth-url"], host))
    emu.publishing.set()
    return time.time() - held


def refused_own_ingress(emu, pd):
    """OWN_INGRESS's PR: its helpers make no Ingress; its app chart's own Ingress is refused by
    the apps' AppProject, so the app's sync fails and the preview with it; closed, nothing is
    left."""
    opened = own_ingress(fixture("pull_request.opened"))
    opened["number"] = opened["pull_request"]["number"] = 5
    pd.deliver("pull_request", opened)

    def app_failed():
        apps = [o for o in emu.objects() if o["kind"] == "Application" and o["metadata"]["name"].endswith("-app")]
        op = ((apps[0].get("status") or {}).get("operationState") or {}) if apps else {}
        return apps if op.get("phase") == "Failed" else None

    apps = wait("the app's sync to fail, its retries spent", app_failed, 180)
    assert len(apps) == 1 and apps[0]["metadata"]["labels"]["previewd.dev/repo"] == "codertocat.hello-ingress", apps
    op = apps[0]["status"]["operationState"]
    assert "resource networking.k8s.io:Ingress is not permitted in project preview-apps" in op["message"], op
    row = wait("the preview whose app ships an Ingress to fail",
               lambda: (lambda r: r if r and r[0] == "failed" else None)(pd.preview()), 60)
    assert "not permitted" in (row[1] or ""), "the failure says why: %r" % row[1]
    assert not emu.ingresses(), "no Ingress was made: %s" % emu.ingresses()
    print("faithful: an app chart with its own Ingress -> refused by the apps' AppProject (%s)" % op["message"][:110])
    closed = own_ingress(fixture("pull_request.closed.unmerged"))
    closed["number"] = closed["pull_request"]["number"] = 5
    closed["pull_request"]["updated_at"] = closed["pull_request"]["closed_at"] = "2019-05-15T20:00:00Z"
    pd.deliver("pull_request", closed)
    wait("the refused preview forgotten", lambda: pd.preview() is None, 300)
    left = [o["metadata"]["name"] for o in emu.objects() if o["kind"] == "Application"]
    assert not left, left


def walk(mode, binary, python, emulator):
    work = tempfile.mkdtemp(prefix="previewd-faithful-%s-" % mode)
    emu = Emulator(python, emulator, work, extra=(
        "--repo", "https://github.com/%s.git=%s" % (OWN_INGRESS, os.path.join(ROOT, "tests", "e2e"))))
    pd = Previewd(binary, work)
    # previewd's address for the cluster's ingress controller (configured: the loopback guess
    # is never given to a cluster; here the emulated cluster is this host).
    base = "http://127.0.0.1:%d" % pd.port

    def toml(migrate, revision="v0.1.0"):
        return 'public_url = "%s"\n' % base + config(mode, migrate, revision) + OWN_INGRESS_REPO

    try:
        emu.publishing.clear()  # the ingress controller held: the gate is checked first
        prepare(emu, pd, work, mode, toml(["bin/migrate"]))
        with open(os.path.join(work, "serve.log")) as f:
            lacks = [line for line in f if "lacks what previews need" in line or "could not check" in line]
        assert not lacks, "the emulated cluster has all previews need: %s" % lacks

        # opened -> ready, with the app at the head SHA behind the helpers' gate
        started = time.time()
        pd.deliver("pull_request", fixture("pull_request.opened"))
        held = check_edge(emu, pd, base)
        wait("the preview ready at the opened head", lambda: ready_at(pd, emu, SHA_A), 180)
        took = {"opened": time.time() - started - held}
        app_ingress = [o for o in emu.objects() if o["kind"] == "Ingress" and o["metadata"]["name"] == "web"]
        assert not app_ingress, "the app chart's own Ingress is off (ingress.enabled: false)"
        assert emu.app(APP)["spec"]["source"]["helm"]["valuesObject"]["ingress"] == {"enabled": False}
        helpers = emu.app(HELPERS)
        st = helpers["status"]
        assert (st["sync"]["status"], st["health"]["status"], st["operationState"]["phase"]) == \
            ("Synced", "Healthy", "Succeeded"), st
        assert runs(emu, "-migrate", "%s:%s" % (IMAGE, SHA_A)), emu.jobs()
        assert runs(emu, "-seed"), emu.jobs()
        assert runs(emu, "-db-create" if mode == "shared" else "-db-access"), emu.jobs()
        assert runs(emu, "smoke"), "the app's own hook ran: its Secrets existed"
        objects = emu.objects()
        # The size guard (database.max_size) beside the admin's credentials; the teardown's
        # leftovers check below sees it gone with the rest.
        guard = [o for o in objects if o["kind"] == "CronJob" and o["metadata"]["name"] == SLUG + "-size"]
        assert guard and guard[0]["metadata"]["namespace"] == ("previewd-system" if mode == "shared" else "pg"), \
            "the size guard: %s" % [(o["kind"], o["metadata"]["name"]) for o in objects]
        secret = next(o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == SLUG + "-db")
        url = base64.b64decode(secret["data"]["DATABASE_URL"]).decode()
        assert url.startswith("postgres://"), "the sealed values opened with the cluster's key: %r" % url[:12]
        print("faithful[%s]: opened -> ready (helpers Synced/Healthy/Succeeded, app at %s)" % (mode, SHA_A[:7]))

        # pushed -> migrated at the new image before the app moves there
        started = time.time()
        pd.deliver("pull_request", pushed(SHA_B, "2019-05-15T16:00:00Z"))
        wait("the preview ready at the pushed head", lambda: ready_at(pd, emu, SHA_B), 180)
        took["pushed"] = time.time() - started
        migrated = runs(emu, "-migrate", "%s:%s" % (IMAGE, SHA_B))
        assert migrated and migrated[-1]["result"] == "succeeded", emu.jobs()
        # previewd's sync request rides in the same write as the new rendering: Argo CD's own
        # auto-sync cannot run first, so the push runs its migration once, not twice.
        assert len(migrated) == 1, "the migration ran %d times for one push" % len(migrated)
        log = emu.actions()
        seeded = [a["seq"] for a in log if a["action"] == "create-hook" and a["name"].endswith("-seed")]
        moved = [a["seq"] for a in log if a["action"] == "apply" and a["app"] == APP and a["kind"] == "Deployment"]
        migrate_b = [a["seq"] for a in log if a["action"] == "create-hook" and a["name"].endswith("-migrate")][-1]
        after = [s for s in seeded if s > migrate_b]
        assert after and moved[-1] > after[0], \
            "the app's Deployment moved (seq %s) before the helpers' sync passed its migration (seq %s)" % (moved, after)
        print("faithful[%s]: pushed -> migration re-ran for %s before the app moved" % (mode, SHA_B[:7]))

        # a new chart revision that renders the same objects: Argo CD alone would sync nothing
        # (it syncs only OutOfSync), so previewd asks, and must not wait for what never comes
        pd.stop()
        with open(os.path.join(work, "previewd.toml"), "w") as f:
            f.write(toml(["bin/migrate"], "v9.9.9"))
        pd.start()
        compared = lambda: ((emu.app(HELPERS).get("status") or {}).get("sync") or {}).get("comparedTo", {})
        wait("Argo CD to compare the new chart revision",
             lambda: compared().get("source", {}).get("targetRevision") == "v9.9.9", 60)
        time.sleep(1)
        wait("the preview ready at the new chart revision", lambda: ready_at(pd, emu, SHA_B), 30)
        print("faithful[%s]: chart revision bumped, no object changed -> synced on previewd's request, ready" % mode)

        # /preview reseed -> the seed Job runs again, at generation 2
        before = len(runs(emu, "-seed"))
        pd.deliver("issue_comment", command("/preview reseed", 9000001))
        wait("the seed Job to run again", lambda: len(runs(emu, "-seed")) > before, 120)
        wait("the preview ready after the reseed", lambda: ready_at(pd, emu, SHA_B) and runs(emu, "-seed")[-1]["result"] == "succeeded", 120)
        rendering = next(o for o in emu.objects() if o["kind"] == "ConfigMap" and o["metadata"]["name"] == SLUG + "-rendering")
        assert rendering["data"]["seedGeneration"] == "2", rendering["data"]
        print("faithful[%s]: /preview reseed -> the seed Job ran again (generation 2)" % mode)

        # a failing migration -> failed, and the app stays at the last good head
        pd.stop()
        with open(os.path.join(work, "previewd.toml"), "w") as f:
            f.write(toml(["bin/migrate", "previewd-twin-fail"], "v9.9.9"))
        pd.start()
        pd.deliver("pull_request", pushed(SHA_C, "2019-05-15T18:00:00Z"))
        row = wait("the preview to fail", lambda: (lambda r: r if r and r[0] == "failed" and r[2] == SHA_C else None)(pd.preview()), 180)
        assert "-migrate" in (row[1] or ""), "the failure names the migration Job: %r" % row[1]
        app = emu.app(APP)
        assert app["spec"]["source"]["targetRevision"] == SHA_B, "the app was moved past a failed migration"
        status, page = pd.get("/api/previews/codertocat/hello-world/2")
        assert status == 200 and b'"failed"' in page, page[:300]
        print("faithful[%s]: failing migration -> failed (%s); the app stays at %s" % (mode, row[1][:70], SHA_B[:7]))

        # Argo CD never retries a failed source itself; /preview redeploy makes a new one
        wait("Argo CD to give up retrying", lambda: emu.app(HELPERS)["status"]["operationState"]["phase"] == "Failed", 120)
        tries = len(runs(emu, "-migrate", "%s:%s" % (IMAGE, SHA_C)))
        time.sleep(2)
        assert len(runs(emu, "-migrate", "%s:%s" % (IMAGE, SHA_C))) == tries, "Argo CD retried the same source"
        pd.deliver("issue_comment", command("/preview redeploy", 9000002))
        wait("the migration to run again", lambda: len(runs(emu, "-migrate", "%s:%s" % (IMAGE, SHA_C))) > tries, 120)
        print("faithful[%s]: /preview redeploy -> the failed migration ran again" % mode)

        # closed -> nothing left, hooks in the provisioner namespace included
        closed = fixture("pull_request.closed.unmerged")
        closed["pull_request"]["updated_at"] = closed["pull_request"]["closed_at"] = "2019-05-15T19:00:00Z"
        started = time.time()
        pd.deliver("pull_request", closed)
        wait("the preview forgotten", lambda: pd.preview() is None, 300)
        took["closed"] = time.time() - started

        def leftovers():
            keep = {("Secret", "previewd-system", "postgres-admin"), ("Secret", "pg", "shared-superuser")}
            return [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in emu.objects()
                    if o["kind"] not in ("AppProject",)
                    and (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) not in keep
                    and (o["metadata"].get("namespace") in ("previewd-system", "pg", SLUG)
                         or o["metadata"]["name"].startswith(SLUG)
                         or o["kind"] in ("Application", "Job", "SealedSecret", "Certificate", "DNSEndpoint"))]
        try:
            wait("every object to be gone", lambda: not leftovers(), 60)
        except AssertionError:
            raise AssertionError("left behind: %s" % leftovers())
        # The drop WITH (FORCE), in both modes: CloudNativePG's own would fail with the app
        # connected (tests/postgres/cnpg.rs).
        assert runs(emu, "-db-drop"), "the PostDelete drop ran"
        check_pods_started(emu)
        assert pd.history("destroyed"), "the history outlives the preview"
        assert not emu.ingresses(), "the preview's Ingress went with it"
        print("faithful[%s]: closed -> every object gone (hooks and the Ingress included); history kept" % mode)
        if mode == "shared":
            refused_own_ingress(emu, pd)
        print("faithful[%s]: seconds to ready after opened %.1f, after the push %.1f; closed to forgotten %.1f"
              % (mode, took["opened"], took["pushed"], took["closed"]))
    except BaseException:
        for name in ("serve.log", "emulator.log"):
            path = os.path.join(work, name)
            if os.path.exists(path):
                with open(path) as f:
                    sys.stderr.write("--- %s (tail)\n%s\n" % (name, "".join(f.readlines()[-40:])))
        raise
    finally:
        pd.stop()
        emu.close()
    shutil.rmtree(work, ignore_errors=True)


def wait_walk(binary, python, emulator):
    """`wait_for`: nothing runs the PR's image before its check succeeded on the head."""
    work = tempfile.mkdtemp(prefix="previewd-faithful-wait-")
    emu = Emulator(python, emulator, work)
    gh = GitHub()
    pd = Previewd(binary, work)
    try:
        prepare(emu, pd, work, "shared", 'public_url = "http://127.0.0.1:%d"\n' % pd.port
                + '[github]\ntoken = "e2e"\napi_url = "%s"\n' % gh.url
                + config("shared", ["bin/migrate"]) + 'wait_for = ["build-image"]\n')

        def helpers_done():
            app = emu.app(HELPERS)
            st = (app or {}).get("status") or {}
            return ((st.get("sync") or {}).get("status"), (st.get("health") or {}).get("status"),
                    (st.get("operationState") or {}).get("phase")) == ("Synced", "Healthy", "Succeeded")

        pd.deliver("pull_request", fixture("pull_request.opened"))
        wait("the helpers provisioned while the image waits",
             lambda: helpers_done() and (pd.preview() or [None])[0] == "waiting_for_ci", 180)
        time.sleep(1.5)  # long enough for any Job Argo CD would start
        image_a = "%s:%s" % (IMAGE, SHA_A)
        assert runs(emu, "-db-create"), "the database is provisioned at once: %s" % emu.jobs()
        assert not [j for j in emu.jobs() if j["image"] == image_a], "a Job ran the PR's image before CI built it: %s" % emu.jobs()
        assert not runs(emu, "-seed"), "the seed waits for the migrations"
        assert emu.app(APP) is None, "the app waits for CI"
        print("faithful[wait_for]: opened -> helpers Synced/Healthy/Succeeded, database provisioned, nothing ran %s" % SHA_A[:7])

        reply = pd.deliver("check_run", check_run(SHA_A, "success", "2019-05-15T15:25:00Z"))
        assert reply["outcome"] == "accepted", reply
        wait("the preview ready once the build succeeded", lambda: ready_at(pd, emu, SHA_A), 180)
        assert runs(emu, "-migrate", image_a), emu.jobs()
        print("faithful[wait_for]: build-image succeeded -> migrated with %s, app deployed, ready" % SHA_A[:7])

        pd.deliver("pull_request", pushed(SHA_B, "2019-05-15T16:00:00Z"))
        wait("the push to wait for its build", lambda: (pd.preview() or [None, None, None])[0:3:2] == ("waiting_for_ci", SHA_B), 60)
        time.sleep(1.5)
        image_b = "%s:%s" % (IMAGE, SHA_B)
        assert not [j for j in emu.jobs() if j["image"] == image_b], "a Job ran the pushed image before its check: %s" % emu.jobs()
        assert emu.app(APP)["spec"]["source"]["targetRevision"] == SHA_A, "the app moved before CI built the push"
        pd.deliver("check_run", check_run(SHA_B, "success", "2019-05-15T16:05:00Z"))
        wait("the preview ready at the pushed head", lambda: ready_at(pd, emu, SHA_B), 180)
        assert len(runs(emu, "-migrate", image_b)) == 1, emu.jobs()
        check_pods_started(emu)
        print("faithful[wait_for]: pushed -> waited for %s's build, then migrated once and moved the app" % SHA_B[:7])
    except BaseException:
        for name in ("serve.log", "emulator.log"):
            path = os.path.join(work, name)
            if os.path.exists(path):
                with open(path) as f:
                    sys.stderr.write("--- %s (tail)\n%s\n" % (name, "".join(f.readlines()[-40:])))
        raise
    finally:
        pd.stop()
        emu.close()
        gh.close()
    shutil.rmtree(work, ignore_errors=True)


GEN = "pv-codertocat-hello-worl-4d960c3af87af320-tpl-%d"
BASE_SHA = "f95f852bd8fca8fcc58a9a2d6c842781e32a215e"  # pull_request.opened's base.sha


def template_walk(mode, binary, python, emulator):
    """`database_template` (#16): the repository's first preview is seeded while generation 1
    builds (create, migrate at the base commit's image, seed, then seal); the next PR is a
    clone of it with no seed; a writer's refresh builds generation 2 and retires generation 1
    (its PostDelete drop runs); closing every PR keeps the template; destroy-template drops it
    and leaves nothing."""
    work = tempfile.mkdtemp(prefix="previewd-faithful-template-%s-" % mode)
    emu = Emulator(python, emulator, work)
    pd = Previewd(binary, work)
    db_ns = "previewd-system" if mode == "shared" else "pg"
    clone_job = "-db-create" if mode == "shared" else "-db-clone"
    slug3 = SLUG.replace("-pr-2", "-pr-3")

    def generations():
        db = sqlite3.connect(os.path.join(work, "previewd.db"))
        try:
            return db.execute("SELECT generation, state FROM templates ORDER BY generation").fetchall()
        finally:
            db.close()

    def observed(number):
        db = sqlite3.connect(os.path.join(work, "previewd.db"))
        try:
            row = db.execute("SELECT observed FROM previews WHERE number = ?1", (number,)).fetchone()
        finally:
            db.close()
        return row[0] if row else None

    def named(name):
        return [j for j in emu.jobs() if j["name"] == name]

    def hook_seq(name):
        return [a["seq"] for a in emu.actions() if a["action"] == "create-hook" and a["name"] == name]

    try:
        # The address the cluster's size Job reports to: configured, as an operator does (the
        # loopback guess is never given to a cluster); here the emulated cluster is this host.
        prepare(emu, pd, work, mode, 'public_url = "http://127.0.0.1:%d"\n' % pd.port
                + config(mode, ["bin/migrate"]) + "database_template = true\n")
        pd.deliver("pull_request", fixture("pull_request.opened"))
        wait("the first preview ready", lambda: ready_at(pd, emu, SHA_A), 180)
        assert named(SLUG + "-seed"), "the first preview, with no generation ready, is seeded: %s" % emu.jobs()
        # Whether generation 1's row was written before this preview was decided is a race
        # between the template look and the PR's reconcile: either way it was seeded for want
        # of a ready generation.
        assert any("no template generation is ready" in r or "template generation 1 is still building" in r
                   for r in pd.history("template")), pd.history("template")
        wait("generation 1 ready", lambda: generations() == [(1, "ready")], 180)
        gen1 = GEN % 1
        base_image = "%s:%s" % (IMAGE, BASE_SHA)
        assert [j for j in named(gen1 + "-migrate") if j["image"] == base_image and j["result"] == "succeeded"], \
            "generation 1 migrated with the base commit's image: %s" % emu.jobs()
        assert named(gen1 + "-db-create") and named(gen1 + "-seed"), emu.jobs()
        seal, seed = hook_seq(gen1 + "-db-seal"), hook_seq(gen1 + "-seed")
        assert seal and seed and seal[0] > seed[0], "the seal runs after the seed: seal %s, seed %s" % (seal, seed)
        st = emu.app(gen1 + "-helpers")["status"]
        assert (st["sync"]["status"], st["health"]["status"], st["operationState"]["phase"]) == \
            ("Synced", "Healthy", "Succeeded"), st
        print("faithful[template-%s]: first PR seeded while generation 1 built (create, migrate at %s, seed, then seal)"
              % (mode, BASE_SHA[:7]))

        # The size Job ran after the seal, with the token the cluster's controller opened
        # from the generation's report SealedSecret. The emulator runs no container, so this
        # walk plays its script's part (the real script is tests/postgres'): it posts a size
        # to the URL the Job was given, with that token, and the API lists it.
        size = hook_seq(gen1 + "-db-size")
        assert size and size[0] > seal[0], "the size Job runs after the seal: size %s, seal %s" % (size, seal)
        job = next(o for o in emu.objects() if o["kind"] == "Job" and o["metadata"]["name"] == gen1 + "-db-size")
        env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        ref = env["TOKEN"]["valueFrom"]["secretKeyRef"]
        secret = next(o for o in emu.objects() if o["kind"] == "Secret" and o["metadata"]["name"] == ref["name"]
                      and o["metadata"]["namespace"] == job["metadata"]["namespace"])
        token = base64.b64decode(secret["data"][ref["key"]]).decode()
        report = urllib.request.Request(env["URL"]["value"], method="POST", headers={"Content-Type": "application/json"},
                                        data=json.dumps({"token": token, "bytes": 262144000}).encode())
        with urllib.request.urlopen(report, timeout=10) as answer:
            assert answer.status == 204, answer.status
        listed = json.loads(pd.get("/api/templates")[1])["templates"]
        assert [(t["generation"], t["size_bytes"]) for t in listed] == [(1, 262144000)], listed
        print("faithful[template-%s]: the size Job's report, with the token sealed for the cluster, lists 250 MB" % mode)
        # The pool keeper, an ordinary Deployment of the generation's Application, admitted
        # by the helpers' AppProject and healthy in Argo CD's eyes.
        keeper = [r for r in st.get("resources", []) if r["kind"] == "Deployment" and r["name"] == gen1 + "-db-spares"]
        assert keeper and keeper[0].get("health", {}).get("status") == "Healthy", st.get("resources")
        assert any(o["kind"] == "Deployment" and o["metadata"]["name"] == gen1 + "-db-spares" for o in emu.objects())

        opened3 = fixture("pull_request.opened")
        opened3["number"] = opened3["pull_request"]["number"] = 3
        pd.deliver("pull_request", opened3)
        wait("the second preview ready", lambda: observed(3) == "ready", 180)
        assert not named(slug3 + "-seed"), "a clone is not seeded: %s" % emu.jobs()
        job = next(o for o in emu.objects() if o["kind"] == "Job" and o["metadata"]["name"] == slug3 + clone_job)
        args = json.dumps(job["spec"]["template"]["spec"]["containers"][0])
        database = gen1.replace("-", "_")
        assert "template=%s" % database in args and "clone=1" in args, args
        print("faithful[template-%s]: the next PR cloned generation 1 (%s), no seed" % (mode, clone_job[1:]))

        refresh = command("/preview refresh-template", 9000101)
        refresh["issue"]["number"] = 3
        pd.deliver("issue_comment", refresh)
        wait("generation 2 ready and generation 1 retired", lambda: generations() == [(2, "ready")], 240)
        wait("generation 1's Application gone", lambda: emu.app(gen1 + "-helpers") is None, 60)
        assert named(gen1 + "-db-drop"), "generation 1's PostDelete drop ran: %s" % emu.jobs()
        assert not any(o["kind"] == "Deployment" and o["metadata"]["name"] == gen1 + "-db-spares" for o in emu.objects()), \
            "generation 1's pool keeper went with its Application"
        print("faithful[template-%s]: /preview refresh-template -> generation 2 ready, generation 1 dropped" % mode)

        for number in (2, 3):
            closed = fixture("pull_request.closed.unmerged")
            closed["number"] = closed["pull_request"]["number"] = number
            closed["pull_request"]["updated_at"] = closed["pull_request"]["closed_at"] = "2019-05-15T19:00:00Z"
            pd.deliver("pull_request", closed)
        wait("both previews forgotten", lambda: observed(2) is None and observed(3) is None, 300)
        assert generations() == [(2, "ready")] and emu.app(GEN % 2 + "-helpers"), "the template outlives its previews"
        print(pd.run("destroy-template", "codertocat/hello-world").strip())
        wait("every generation gone", lambda: not generations(), 120)

        def leftovers():
            return [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in emu.objects()
                    if "-tpl-" in o["metadata"]["name"] or "-tpl-" in o["metadata"].get("namespace", "")
                    or (o["metadata"].get("namespace") == db_ns and o["kind"] in ("Job", "ConfigMap"))]
        try:
            wait("every template object to be gone", lambda: not leftovers(), 60)
        except AssertionError:
            raise AssertionError("left behind: %s" % leftovers())
        assert named(GEN % 2 + "-db-drop"), "generation 2's PostDelete drop ran"
        check_pods_started(emu)
        print("faithful[template-%s]: PRs closed -> template kept; destroy-template -> nothing left" % mode)
    except BaseException:
        for name in ("serve.log", "emulator.log"):
            path = os.path.join(work, name)
            if os.path.exists(path):
                with open(path) as f:
                    sys.stderr.write("--- %s (tail)\n%s\n" % (name, "".join(f.readlines()[-40:])))
        raise
    finally:
        pd.stop()
        emu.close()
    shutil.rmtree(work, ignore_errors=True)


class TopologyOperator:
    """The RabbitMQ messaging-topology-operator, which the emulator has not got, in as much as
    Argo CD sees of it: each Vhost, User, Permission and OperatorPolicy gets the operator's
    deletion finalizer (deletion.finalizers.<plural>.rabbitmq.com) and, once what it names is
    there (a User's imported credentials Secret with username and passwordHash; a
    Permission's or OperatorPolicy's vhost, and a Permission's User, already ready), status
    Ready=True reason SuccessfulCreateOrUpdate, what Argo CD's Lua health checks read
    (resource_customizations/rabbitmq.com/<Kind>/health.lua). A deleted one is "deleted from
    the broker" and its finalizer released; `deleted` lists them. Nothing talks to a broker."""

    PLURALS = (("Vhost", "vhosts"), ("User", "users"), ("Permission", "permissions"),
               ("OperatorPolicy", "operatorpolicies"))

    def __init__(self, emu):
        import threading

        self.emu, self.deleted, self.stopping = emu, [], threading.Event()
        threading.Thread(target=self.run, daemon=True).start()

    def items(self, plural):
        status, body = self.emu.req("GET", "/apis/rabbitmq.com/v1beta1/%s" % plural)
        return body["items"] if status == 200 else []  # 404 until the twin first applies one

    def ready(self, kind, namespace, name):
        plural = dict(self.PLURALS)[kind]
        status, body = self.emu.req("GET", "/apis/rabbitmq.com/v1beta1/namespaces/%s/%s/%s" % (namespace, plural, name))
        conds = ((body or {}).get("status") or {}).get("conditions") or [] if status == 200 else []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)

    def run(self):
        while not self.stopping.wait(0.2):
            try:
                for kind, plural in self.PLURALS:  # in this order: what a later kind names comes first
                    for o in self.items(plural):
                        self.reconcile(kind, plural, o)
            except (OSError, ValueError, KeyError):
                pass  # the emulator is stopping, or the object went

    def reconcile(self, kind, plural, o):
        m, spec = o["metadata"], o.get("spec") or {}
        path = "/apis/rabbitmq.com/v1beta1/namespaces/%s/%s/%s" % (m["namespace"], plural, m["name"])
        finalizer = "deletion.finalizers.%s.rabbitmq.com" % plural
        finalizers = m.get("finalizers") or []
        if m.get("deletionTimestamp"):
            if finalizer in finalizers:
                self.deleted.append((kind, m["namespace"], m["name"]))
                self.emu.req("PATCH", path, {"metadata": {"finalizers": [f for f in finalizers if f != finalizer] or None}},
                             "application/merge-patch+json")
            return
        if finalizer not in finalizers:
            self.emu.req("PATCH", path, {"metadata": {"finalizers": finalizers + [finalizer]}},
                         "application/merge-patch+json")
        st = o.get("status") or {}
        if st.get("observedGeneration") == m.get("generation") and st.get("conditions"):
            return
        if kind == "User":
            ref = (spec.get("importCredentialsSecret") or {}).get("name")
            status, secret = self.emu.req("GET", "/api/v1/namespaces/%s/secrets/%s" % (m["namespace"], ref))
            if status != 200 or not {"username", "passwordHash"} <= set((secret.get("data") or {})):
                return  # retried, as the operator does while the Secret is missing
        if kind in ("Permission", "OperatorPolicy"):
            vhosts = [v for v in self.items("vhosts") if v["metadata"]["namespace"] == m["namespace"]
                      and (v.get("spec") or {}).get("name") == spec.get("vhost")]
            if not (vhosts and self.ready("Vhost", m["namespace"], vhosts[0]["metadata"]["name"])):
                return
        if kind == "Permission" and not self.ready("User", m["namespace"], (spec.get("userReference") or {}).get("name")):
            return
        self.emu.req("PATCH", path + "/status", {"status": {
            "observedGeneration": m.get("generation"),
            "conditions": [{"type": "Ready", "status": "True", "reason": "SuccessfulCreateOrUpdate",
                            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}},
            "application/merge-patch+json")

    def close(self):
        self.stopping.set()


SERVICES_HOST = "rabbitmq.%s.svc"


def services_config(mode):
    """The walk's previewd.toml for `services-<mode>`: the database in `mode`, messaging
    shared beside it (shared) or through the topology operator (cnpg), mail with a relay
    for one named recipient."""
    messaging = {"shared": '[messaging]\nmode = "shared"\nnamespace = "previewd-system"\n',
                 "cnpg": '[messaging]\nmode = "operator"\nnamespace = "rabbitmq"\ncluster = "rabbitmq"\n'}[mode]
    return ('[mail]\nrelay_host = "smtp-relay.mail.svc"\n' + messaging + config(mode, ["bin/migrate"])
            + 'mail = true\nmail_relay = ["qa@example.com"]\nmessaging = "rabbitmq"\n')


def services_walk(mode, binary, python, emulator):
    """Mail and messaging (`services-shared`: database and broker shared; `services-cnpg`:
    CloudNativePG and the RabbitMQ topology operator): the catcher and the broker's vhost
    and user provisioned with the preview, their Secrets opened by the cluster, the inbox on
    the preview's Ingress; closed, nothing of them left and the ledger says each gone."""
    broker_ns = "previewd-system" if mode == "shared" else "rabbitmq"
    work = tempfile.mkdtemp(prefix="previewd-faithful-services-%s-" % mode)
    emu = Emulator(python, emulator, work, extra=("--namespaces", "argocd,default,previewd-system,pg,rabbitmq"))
    operator = TopologyOperator(emu) if mode == "cnpg" else None
    pd = Previewd(binary, work)
    base = "http://127.0.0.1:%d" % pd.port
    mail_name = SLUG + "-mail"

    def decoded(kind_ns, name):
        s = next((o for o in emu.objects() if o["kind"] == "Secret" and o["metadata"]["name"] == name
                  and o["metadata"].get("namespace") == kind_ns), None)
        return None if s is None else {k: base64.b64decode(v).decode() for k, v in (s.get("data") or {}).items()}

    def seqs(action, name, kind=None):
        return [a["seq"] for a in emu.actions() if a["action"] == action and a["name"] == name
                and (kind is None or a["kind"] == kind)]

    try:
        if mode == "shared":
            # The broker's admin Secret, beside the shared server's (prepare): what the
            # create and delete Jobs read with envFrom.
            admin = {k: base64.b64encode(v.encode()).decode() for k, v in
                     {"RABBITMQ_MANAGEMENT_URL": "http://rabbitmq.previewd-system.svc:15672",
                      "RABBITMQ_ADMIN_USER": "admin", "RABBITMQ_ADMIN_PASSWORD": "admin"}.items()}
            status, body = emu.req("POST", "/api/v1/namespaces/previewd-system/secrets",
                                   {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "rabbitmq-admin"},
                                    "data": admin})
            assert status == 201, body
        prepare(emu, pd, work, mode, 'public_url = "%s"\n' % base + services_config(mode))
        with open(os.path.join(work, "serve.log")) as f:
            lacks = [line.strip() for line in f if "lacks what previews need" in line or "could not check" in line]
        # The emulator serves a kind it has no table entry for (rabbitmq.com's) only once the
        # twin first applies one: at start, operator mode's check finds the topology operator
        # missing, and nothing else may be.
        other = [line for line in lacks if not (mode == "cnpg" and "rabbitmq.com/v1beta1" in line)]
        assert not other, "the emulated cluster has all previews need: %s" % other
        if lacks:
            print("faithful[services-%s]: at start (the emulator serves no rabbitmq.com kinds yet): %s"
                  % (mode, lacks[0].split("missing=", 1)[-1]))

        # opened -> ready, the catcher and the broker's objects among the helpers'
        started = time.time()
        pd.deliver("pull_request", fixture("pull_request.opened"))
        def opened():
            # A chart that will not render (values previewd's binary and the checkout's chart
            # disagree on) fails the walk at once, not after the wait.
            conds = ((emu.app(HELPERS) or {}).get("status") or {}).get("conditions") or []
            errors = [c["message"] for c in conds if c.get("type") == "ComparisonError"]
            assert not errors, "the helpers' chart did not render: %s" % errors
            return ready_at(pd, emu, SHA_A)

        try:
            wait("the preview ready at the opened head", opened, 180)
        except AssertionError:
            check_pods_started(emu)  # a Job held by a missing Secret or key, named
            raise
        took = {"opened": time.time() - started}
        st = emu.app(HELPERS)["status"]
        assert (st["sync"]["status"], st["health"]["status"], st["operationState"]["phase"]) == \
            ("Synced", "Healthy", "Succeeded"), st
        health = {(r["kind"], r.get("namespace", ""), r["name"]): (r.get("status"), (r.get("health") or {}).get("status"))
                  for r in st.get("resources", [])}
        assert health.get(("Deployment", SLUG, mail_name)) == ("Synced", "Healthy"), health
        assert health.get(("Service", SLUG, mail_name)) == ("Synced", "Healthy"), health
        objects = emu.objects()
        deploy = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == mail_name)
        assert deploy["metadata"]["namespace"] == SLUG and deploy["status"].get("readyReplicas") == 1, deploy.get("status")
        env = {e["name"]: e for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["MP_SMTP_AUTH"]["valueFrom"]["secretKeyRef"] == {"name": mail_name, "key": "MP_SMTP_AUTH"}, env
        assert env["MP_SMTP_RELAY_HOST"]["value"] == "smtp-relay.mail.svc", env
        assert env["MP_SMTP_RELAY_ALLOWED_RECIPIENTS"]["value"] == r"^(qa\@example\.com)$", env
        # The emulator's Deployment controller starts no pod: what Mailpit's would need, checked here.
        for ref in (e["valueFrom"]["secretKeyRef"] for e in env.values() if "secretKeyRef" in e.get("valueFrom", {})):
            assert ref["key"] in (decoded(SLUG, ref["name"]) or {}), "Mailpit's pod could start: %s" % ref
        service = next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == mail_name)
        assert service["metadata"]["namespace"] == SLUG, service["metadata"]
        assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"smtp": 1025, "http": 8025}, service["spec"]
        print("faithful[services-%s]: opened -> ready; Mailpit Deployment and Service Synced/Healthy in %s"
              % (mode, SLUG))

        if mode == "shared":
            create = [j for j in emu.jobs() if j["name"] == SLUG + "-amqp-create"]
            assert create and create[-1]["namespace"] == "previewd-system" and create[-1]["result"] == "succeeded", \
                emu.jobs()
            hashed = decoded("previewd-system", SLUG + "-amqp-hash")
            assert hashed and list(hashed) == ["PASSWORD_HASH"] and hashed["PASSWORD_HASH"], hashed
            unsealed, hooked = seqs("unseal", SLUG + "-amqp-hash"), seqs("create-hook", SLUG + "-amqp-create")
            assert unsealed and hooked and unsealed[0] < hooked[0], \
                "the hash Secret (unsealed at %s) before the create Job (%s)" % (unsealed, hooked)
            assert not [o for o in objects if o["metadata"].get("namespace") == "rabbitmq"], "nothing in rabbitmq"
            print("faithful[services-shared]: %s-amqp-create ran in previewd-system after the SealedSecret with "
                  "PASSWORD_HASH opened (unseal seq %d < hook seq %d), its pod not blocked"
                  % ("<slug>", unsealed[0], hooked[0]))
        else:
            want = {("Vhost", SLUG), ("User", SLUG), ("Permission", SLUG), ("OperatorPolicy", SLUG + "-bounds")}
            made = {(o["kind"], o["metadata"]["name"]) for o in objects
                    if o.get("apiVersion") == "rabbitmq.com/v1beta1" and o["metadata"].get("namespace") == "rabbitmq"}
            assert made == want, made
            user = next(o for o in objects if o["kind"] == "User" and o["metadata"]["name"] == SLUG)
            assert user["spec"]["importCredentialsSecret"] == {"name": SLUG + "-amqp-user"}, user["spec"]
            creds = decoded("rabbitmq", SLUG + "-amqp-user")
            assert creds and creds.get("username") == SLUG, creds
            got = {k: health.get((k, "rabbitmq", n)) for k, n in want}
            assert all(v and v[0] == "Synced" for v in got.values()), got
            wait("the topology operator (the walk's stand-in) to make each ready",
                 lambda: all(operator.ready(k, "rabbitmq", n) for k, n in want), 30)
            print("faithful[services-cnpg]: Vhost, User, Permission, OperatorPolicy Synced in rabbitmq, made Ready "
                  "by the operator's stand-in; the twin's health of them: %s (it has no Lua for rabbitmq.com); "
                  "the User's credentials Secret opened (keys %s)"
                  % (sorted((k, v[1]) for k, v in got.items()), sorted(creds)))

        # The app's Secrets, opened by the cluster's controller with its key
        for name in (SLUG + "-mail", SLUG + "-amqp"):
            assert not seqs("unseal-failed", name), [a for a in emu.actions() if a["name"] == name]
        mail = decoded(SLUG, SLUG + "-mail")
        assert mail and sorted(mail) == ["MP_SMTP_AUTH", "SMTP_HOST", "SMTP_PASSWORD", "SMTP_PORT", "SMTP_USERNAME"], mail
        assert mail["MP_SMTP_AUTH"] == "preview:" + mail["SMTP_PASSWORD"] and mail["SMTP_PASSWORD"], mail
        assert (mail["SMTP_HOST"], mail["SMTP_PORT"], mail["SMTP_USERNAME"]) == \
            ("%s.%s.svc" % (mail_name, SLUG), "1025", "preview"), mail
        amqp = decoded(SLUG, SLUG + "-amqp")
        assert amqp and sorted(amqp) == ["AMQP_HOST", "AMQP_PASSWORD", "AMQP_PORT", "AMQP_URL", "AMQP_USERNAME",
                                         "AMQP_VHOST"], amqp
        assert amqp["AMQP_URL"] == "amqp://%s:%s@%s:%s/%s" % (amqp["AMQP_USERNAME"], amqp["AMQP_PASSWORD"],
                                                            amqp["AMQP_HOST"], amqp["AMQP_PORT"], amqp["AMQP_VHOST"]), amqp
        assert (amqp["AMQP_HOST"], amqp["AMQP_PORT"], amqp["AMQP_USERNAME"], amqp["AMQP_VHOST"]) == \
            (SERVICES_HOST % broker_ns, "5672", SLUG, SLUG), amqp
        # The broker's user gets the app's password, as a salted hash only (RabbitMQ's
        # rabbit_password: base64(salt ++ H(salt ++ password))): SHA-256 for the management
        # API's Job, SHA-512 as the topology operator declares an imported passwordHash.
        stored = hashed["PASSWORD_HASH"] if mode == "shared" else creds["passwordHash"]
        raw = base64.b64decode(stored)
        digest = hashlib.sha256 if mode == "shared" else hashlib.sha512
        assert len(raw) == 4 + digest().digest_size and \
            raw[4:] == digest(raw[:4] + amqp["AMQP_PASSWORD"].encode()).digest(), \
            "the broker user's hash is of the app's AMQP_PASSWORD"
        values = emu.app(APP)["spec"]["source"]["helm"]["valuesObject"]["preview"]
        assert values.get("mailSecret") == SLUG + "-mail" and values.get("messagingSecret") == SLUG + "-amqp", values
        print("faithful[services-%s]: %s-mail and -amqp opened with the cluster's key (MP_SMTP_AUTH = preview:"
              "SMTP_PASSWORD, AMQP_URL from its parts); the app told mailSecret and messagingSecret" % (mode, "<slug>"))

        # The inbox on the preview's host, before the app
        ingress = emu.ingresses(SLUG)
        assert len(ingress) == 1, ingress
        paths = ingress[0]["spec"]["rules"][0]["http"]["paths"]
        assert [p["path"] for p in paths] == ["/__mail/", "/"], paths
        assert paths[0]["backend"] == {"service": {"name": mail_name, "port": {"name": "http"}}}, paths[0]
        assert paths[1]["backend"] == {"service": {"name": "web", "port": {"name": "http"}}}, paths[1]
        check_pods_started(emu)
        print("faithful[services-%s]: the Ingress serves /__mail/ -> %s:http before / -> web:http" % (mode, "<slug>-mail"))

        status, page = pd.get("/api/previews/codertocat/hello-world/2")
        assert status == 200, page[:300]
        listed = {(i["kind"], i["namespace"], i["name"]) for i in json.loads(page)["ledger"]}
        want_ledger = {("Deployment", SLUG, mail_name)} | (
            {("RabbitMQ vhost", SERVICES_HOST % broker_ns, SLUG), ("RabbitMQ user", SERVICES_HOST % broker_ns, SLUG)}
            if mode == "shared" else {(k, "rabbitmq", SLUG) for k in ("Vhost", "User", "Permission")})
        assert want_ledger <= listed, "the ledger lacks %s: %s" % (want_ledger - listed, sorted(listed))

        # closed -> every object gone, the broker's included; the ledger says each gone
        closed = fixture("pull_request.closed.unmerged")
        closed["pull_request"]["updated_at"] = closed["pull_request"]["closed_at"] = "2019-05-15T19:00:00Z"
        started = time.time()
        pd.deliver("pull_request", closed)
        wait("the preview forgotten", lambda: pd.preview() is None, 300)
        took["closed"] = time.time() - started

        def leftovers():
            keep = {("Secret", "previewd-system", "postgres-admin"), ("Secret", "previewd-system", "rabbitmq-admin"),
                    ("Secret", "pg", "shared-superuser")}
            return [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in emu.objects()
                    if o["kind"] not in ("AppProject",)
                    and (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) not in keep
                    and (o["metadata"].get("namespace") in ("previewd-system", "pg", "rabbitmq", SLUG)
                         or o["metadata"]["name"].startswith(SLUG) or o.get("apiVersion") == "rabbitmq.com/v1beta1"
                         or o["kind"] in ("Application", "Job", "SealedSecret", "Certificate", "DNSEndpoint"))]
        try:
            wait("every object to be gone", lambda: not leftovers(), 60)
        except AssertionError:
            raise AssertionError("left behind: %s" % leftovers())
        if mode == "shared":
            delete = [j for j in emu.jobs() if j["name"] == SLUG + "-amqp-delete"]
            assert delete and delete[-1]["namespace"] == "previewd-system" and delete[-1]["result"] == "succeeded", \
                emu.jobs()
            cleaned = seqs("cleanup-hook", SLUG + "-amqp-delete", "Job")
            assert cleaned, "the delete Job was cleaned up (HookSucceeded): %s" % [
                a for a in emu.actions() if a["name"] == SLUG + "-amqp-delete"]
        else:
            assert sorted(operator.deleted) == sorted((k, "rabbitmq", n) for k, n in want), \
                "each went through the operator's finalizer: %s" % operator.deleted
        check_pods_started(emu)
        destroyed = pd.history("destroyed")
        assert destroyed, "the history outlives the preview"
        reason = destroyed[-1]
        items = ["Deployment %s gone" % mail_name, "Namespace %s gone" % SLUG]
        items += (["RabbitMQ vhost %s gone" % SLUG, "RabbitMQ user %s gone" % SLUG] if mode == "shared"
                  else ["Vhost %s gone" % SLUG, "User %s gone" % SLUG, "Permission %s gone" % SLUG])
        missing = [i for i in items if i not in reason]
        assert not missing, "the ledger's last word lacks %s: %r" % (missing, reason)
        status, page = pd.get("/api/previews/codertocat/hello-world/2")
        after = json.loads(page) if status == 200 else {}
        assert after.get("preview") is None and any(h.get("what") == "destroyed" for h in after.get("history", [])), \
            (status, page[:500])
        print("faithful[services-%s]: closed -> nothing left (%s); ledger: %s"
              % (mode, "-amqp-delete ran and was cleaned up" if mode == "shared" else "no rabbitmq.com objects", reason))
        print("faithful[services-%s]: seconds to ready after opened %.1f; closed to forgotten %.1f"
              % (mode, took["opened"], took["closed"]))
    except BaseException:
        log_tails(work)
        raise
    finally:
        pd.stop()
        if operator is not None:
            operator.close()
        emu.close()
    shutil.rmtree(work, ignore_errors=True)



HASH = "previewd.dev/applied-hash"
HOST = SLUG + ".preview.example.com"
CRON = "web-cleanup"  # tests/e2e/app-chart/templates/cronjob.yaml


def helm_values(app):
    """The values an Application's chart is rendered with: its `helm.valuesObject`, then its
    `helm.parameters` over them (Helm's --set: a dotted name, "0" an integer, "true" and
    "false" booleans), wherever previewd puts the sleep."""
    helm = app["spec"]["source"].get("helm") or {}
    values = copy.deepcopy(helm.get("valuesObject") or {})
    for p in helm.get("parameters") or []:
        value = p["value"]
        if not p.get("forceString"):
            value = {"true": True, "false": False}.get(value, int(value) if value.lstrip("-").isdigit() else value)
        *path, last = p["name"].split(".")
        at = values
        for part in path:
            at = at.setdefault(part, {})
        at[last] = value
    return values


def sleep_walk(binary, python, emulator):
    """Sleep and wake (#41), shared database, `mail = true`, the app chart, `access = "public"`:
    a sleep is a rendering (the app's replicaCount 0, its CronJob suspended, Mailpit at 0),
    synced with the apply strategy (no hook), Synced and Healthy; Argo CD's self-heal keeps
    it asleep; a request through the login check wakes
    it (the same rendering awake, again without hooks); a reseed while asleep runs the seed;
    a push wakes it at the new head with hooks; the sweeper sleeps it after `sleep_after`;
    closed, nothing is left. Prints previewd's share of a wake (the check's request to the
    app's Application rendered awake), never asserted."""
    work = tempfile.mkdtemp(prefix="previewd-faithful-sleep-")
    emu = Emulator(python, emulator, work, learned=True)
    pd = Previewd(binary, work)
    base = "http://127.0.0.1:%d" % pd.port
    mail_name = SLUG + "-mail"
    comment_ids = iter(range(9000201, 9001000))

    def toml(extra="", sweep=""):
        return ('public_url = "%s"\n' % base + sweep + config("shared", ["bin/migrate"])
                + 'mail = true\naccess = "public"\n' + extra)

    def state():
        return (pd.preview() or [None])[0]

    def live(kind, name, namespace=SLUG):
        return next((o for o in emu.objects() if o["kind"] == kind and o["metadata"]["name"] == name
                     and o["metadata"].get("namespace") == namespace), None)

    def replicas(name):
        d = live("Deployment", name)
        return None if d is None else d["spec"].get("replicas", 1)

    def suspended():
        return live("CronJob", CRON)["spec"].get("suspend")

    def hooks():
        """Every hook Job run so far, by name suffix."""
        names = ("-db-create", "-migrate", "-seed", "smoke")
        return {n.strip("-"): len(runs(emu, n)) for n in names}

    def hook_actions(after):
        return [(a["seq"], a["name"]) for a in emu.actions() if a["action"] == "create-hook" and a["seq"] > after]

    def last_seq():
        return max([a["seq"] for a in emu.actions()] or [0])

    def settled(name, hash_):
        """The Application at rendering `hash_`, previewd's sync of it done, Synced and
        Healthy (a Deployment at zero is; a suspended CronJob too, argo-cd v3.5.1
        resource_customizations/batch/CronJob/health.lua, where the twin gives it none)."""
        app = emu.app(name)
        if app is None or app["metadata"]["annotations"].get(HASH) != hash_:
            return None
        st = app.get("status") or {}
        op = st.get("operationState") or {}
        info = {i["name"]: i["value"] for i in (op.get("operation") or {}).get("info") or []}
        if app.get("operation") or op.get("phase") != "Succeeded" or info.get("previewd.dev/rendering") != hash_:
            return None
        if (st.get("sync") or {}).get("status") != "Synced" or (st.get("health") or {}).get("status") != "Healthy":
            return None
        return app

    def strategy(app):
        return app["status"]["operationState"]["operation"]["sync"].get("syncStrategy")

    def sleep_command():
        pd.deliver("issue_comment", command("/preview sleep", next(comment_ids)))

    def asleep(awake):
        """Waits for the preview asleep at the renderings named after `awake` (helpers, app)."""
        try:
            wait("previewd to record the preview sleeping", lambda: state() == "sleeping", 120)
        except AssertionError:
            st = emu.app(APP)["status"]
            raise AssertionError("previewd's state %r, not sleeping; the app %s/%s, operation %s"
                                 % (pd.preview(), st["sync"]["status"], st["health"], st.get("operationState")))
        return (wait("the helpers synced asleep", lambda: settled(HELPERS, awake[0] + "-asleep"), 60),
                wait("the app synced asleep", lambda: settled(APP, awake[1] + "-asleep"), 60))

    def check(style, accept="text/html"):
        """A request to the preview through the login check, as ingress-nginx (`nginx`) or
        Traefik (`forward`) asks: (status, headers, body)."""
        if style == "nginx":
            url, headers = base + "/auth/check?host=" + HOST, {"X-Original-URL": "https://%s/" % HOST}
        else:
            url, headers = base + "/auth/forward", {"X-Forwarded-Host": HOST, "X-Forwarded-Proto": "https",
                                                    "X-Forwarded-Uri": "/", "X-Forwarded-Method": "GET"}
        headers["Accept"] = accept
        r = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(r, timeout=10) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    let_in_early = []  # (what woke it, seconds after, state after, the app Deployment's replicas and ready)

    def let_in_until_ready(what="a request", timeout=60):
        """Asks the check (as ingress-nginx) every few ms until the preview is ready: the
        answers that let a request in while it was not (its state after the answer not
        ready yet: states only move on to ready), with the app Deployment then."""
        started, early = time.time(), []
        while time.time() - started < timeout:
            answer = check("nginx")[0]
            after = state()
            if after == "ready":
                return early
            if answer == 200:
                web = live("Deployment", "web")
                early.append((what, round(time.time() - started, 3), after,
                              (web["spec"].get("replicas"), (web.get("status") or {}).get("readyReplicas"))))
            time.sleep(0.003)
        raise AssertionError("the preview not ready %d s after %s" % (timeout, what))

    def wake_share():
        """Seconds from the check's request to the app's Application rendered awake (its
        values, `helm_values`, no longer with replicaCount 0), polled every 10 ms."""
        started = time.time()
        status, _, _ = check("nginx")
        assert status == 401, "a sleeping preview's check answers 401 to ingress-nginx: %s" % status
        while time.time() - started < 60:
            if helm_values(emu.app(APP)).get("replicaCount") != 0:
                return time.time() - started
            time.sleep(0.01)
        raise AssertionError("the app's Application was not rendered awake within 60 s of the request")

    try:
        prepare(emu, pd, work, "shared", toml())

        # 1. opened -> ready
        pd.deliver("pull_request", fixture("pull_request.opened"))
        wait("the preview ready at the opened head", lambda: ready_at(pd, emu, SHA_A), 180)
        awake = (emu.app(HELPERS)["metadata"]["annotations"][HASH], emu.app(APP)["metadata"]["annotations"][HASH])
        assert not any(h.endswith("-asleep") for h in awake), awake
        app = wait("the app synced", lambda: settled(APP, awake[1]), 60)
        assert strategy(app) == {"hook": {}}, strategy(app)
        wait("the app's pods and Mailpit ready", lambda: replicas("web") == 1 and replicas(mail_name) == 1
             and (live("Deployment", "web")["status"].get("readyReplicas") == 1), 30)
        assert suspended() is False, live("CronJob", CRON)["spec"]
        opened_hooks = hooks()
        assert opened_hooks["migrate"] >= 1 and opened_hooks["seed"] >= 1 and opened_hooks["db-create"] >= 1, opened_hooks
        status, _, _ = check("nginx")
        assert status == 200, "an awake public preview's check answers 200: %s" % status
        print("faithful[sleep]: opened -> ready (app at %s, web 1 replica, %s not suspended, Mailpit 1); hook runs %s"
              % (SHA_A[:7], CRON, opened_hooks))

        # 2. /preview sleep -> sleeping: a rendering, synced with the apply strategy
        seq = last_seq()
        sleep_command()
        helpers, app = asleep(awake)
        values = helm_values(app)
        assert values["replicaCount"] == 0 and values["autoscaling"]["enabled"] is False \
            and values["preview"]["asleep"] is True, app["spec"]["source"]["helm"]
        assert helm_values(helpers)["mail"]["asleep"] is True, helpers["spec"]["source"]["helm"]
        assert strategy(app) == {"apply": {}} and strategy(helpers) == {"apply": {}}, (strategy(app), strategy(helpers))
        wait("the app's Deployment at 0", lambda: replicas("web") == 0, 30)
        wait("Mailpit at 0", lambda: replicas(mail_name) == 0, 30)
        assert suspended() is True, live("CronJob", CRON)["spec"]
        time.sleep(1.5)  # several of the twin's refreshes: nothing runs late
        assert hooks() == opened_hooks and not hook_actions(seq), \
            "a sleep runs no hook: %s, %s" % (hooks(), hook_actions(seq))
        for name in (HELPERS, APP):
            st = emu.app(name)["status"]
            assert (st["sync"]["status"], st["health"]["status"]) == ("Synced", "Healthy"), (name, st["sync"], st["health"])
        resources = {(r["kind"], r["name"]): (r.get("status"), (r.get("health") or {}).get("status"))
                     for r in emu.app(APP)["status"]["resources"]}
        assert resources[("Deployment", "web")] == ("Synced", "Healthy"), resources
        assert resources[("CronJob", CRON)][0] == "Synced", resources
        assert live("Namespace", SLUG, None) and live("Secret", SLUG + "-db") and live("Secret", SLUG + "-mail"), \
            "the namespace and the Secrets stay"
        assert not runs(emu, "-db-drop"), "the database stays: %s" % emu.jobs()
        assert state() == "sleeping", state()
        print("faithful[sleep]: /preview sleep -> sleeping; app %s and helpers Synced/Healthy, both via syncStrategy "
              "apply; web 0, %s suspended, Mailpit 0; no hook ran; database, Secrets, namespace kept"
              % (app["metadata"]["annotations"][HASH][-14:], CRON))

        # 3. self-heal: the app scaled behind Argo CD's back comes back to 0, still asleep
        seq = last_seq()
        status, body = emu.req("PATCH", "/apis/apps/v1/namespaces/%s/deployments/web" % SLUG,
                               {"spec": {"replicas": 1}}, "application/merge-patch+json")
        assert status == 200 and body["spec"]["replicas"] == 1, (status, body)
        wait("the twin's self-heal to scale it back to 0", lambda: replicas("web") == 0, 60)
        time.sleep(2)
        healed = [a for a in emu.actions() if a["seq"] > seq]
        wait("the app Synced and Healthy again", lambda: (lambda st: (st["sync"]["status"], st["health"]["status"],
             (st.get("operationState") or {}).get("phase")) == ("Synced", "Healthy", "Succeeded"))(emu.app(APP)["status"]), 60)
        wait("previewd's state sleeping", lambda: state() == "sleeping", 60)
        assert replicas("web") == 0 and suspended() is True
        assert hooks() == opened_hooks and not hook_actions(seq), "a self-heal runs no hook: %s" % hook_actions(seq)
        ops = emu.app(APP)["status"]["operationState"]["operation"]
        print("faithful[sleep]: scaled to 1 behind Argo CD's back -> self-heal back to 0 (%s), still sleeping; "
              "last operation by %s, strategy %s"
              % ([(a["action"], a.get("kind"), a["name"]) for a in healed if a.get("app") == APP][:6],
                 ops.get("initiatedBy"), ops["sync"].get("syncStrategy")))

        # 4. a request through the check wakes it: 401 (nginx), 503 + Retry-After (forward),
        # and the sign-in route (where ingress-nginx sends that 401) the waking page; then,
        # until the preview is ready, no request is let in (`let_in_early`, asserted at the
        # end). Each answer counts only while it wakes: one given once the preview was ready
        # (its state read before the request) may let the request in.
        seq = last_seq()
        status, _, _ = check("nginx")
        assert status == 401, "ingress-nginx is answered 401 while the preview sleeps: %s" % status

        def waking(ask, want):
            before = state()
            answer = ask()
            assert want(answer) or before == "ready", "%r while waking (the preview %s before, %s after)" % (
                answer[:2] + (answer[-1][-200:],), before, state())

        def signin():
            r = urllib.request.Request(base + "/auth/signin?rd=" + urllib.parse.quote("https://%s/" % HOST, safe=""),
                                       headers={"Accept": "text/html"})
            try:
                with urllib.request.urlopen(r, timeout=10) as resp:
                    return resp.status, resp.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()

        waking(lambda: check("forward"), lambda a: a[0] == 503 and a[1].get("Retry-After") and b"Waking up" in a[2])
        waking(lambda: check("forward", accept="*/*"), lambda a: a[0] == 503)
        waking(signin, lambda a: a[0] == 503 and b"Waking up" in a[1])
        let_in_early.extend(let_in_until_ready())
        wait("the preview ready again", lambda: ready_at(pd, emu, SHA_A), 120)
        app = wait("the app synced awake", lambda: settled(APP, awake[1]), 60)
        helpers = wait("the helpers synced awake", lambda: settled(HELPERS, awake[0]), 60)
        assert strategy(app) == {"apply": {}} and strategy(helpers) == {"apply": {}}, (strategy(app), strategy(helpers))
        values = helm_values(app)
        assert values.get("replicaCount", 1) == 1 and not values["preview"].get("asleep") \
            and not helm_values(helpers)["mail"].get("asleep"), (app["spec"]["source"]["helm"], helpers["spec"]["source"]["helm"])
        wait("web and Mailpit back at 1", lambda: replicas("web") == 1 and replicas(mail_name) == 1, 30)
        assert suspended() is False
        assert hooks() == opened_hooks and not hook_actions(seq), "a wake runs no hook: %s" % hook_actions(seq)
        wait("the check to let the request in", lambda: check("nginx")[0] == 200, 30)
        assert check("forward")[0] == 200
        print("faithful[sleep]: a request -> 401 (nginx), 503 + Retry-After 'Waking up' (forward), the sign-in route "
              "the waking page; ready at %s via syncStrategy apply, web 1, %s running, Mailpit 1, no hook; then 200"
              % (SHA_A[:7], CRON))

        # previewd's share of a wake, over a few cycles (printed, not asserted)
        shares = []
        for _ in range(5):
            sleep_command()
            asleep(awake)
            wait("the app's Deployment at 0", lambda: replicas("web") == 0, 30)
            shares.append(wake_share())
            wait("the preview ready again", lambda: ready_at(pd, emu, SHA_A) and settled(APP, awake[1]), 120)
            wait("the check to let the request in", lambda: check("nginx")[0] == 200, 30)
        assert hooks() == opened_hooks, "sleep/wake cycles ran hooks: %s" % hooks()
        print("faithful[sleep]: previewd's share of a wake (check request -> app Application rendered awake), "
              "median of %d: %.0f ms (each: %s)"
              % (len(shares), sorted(shares)[len(shares) // 2] * 1000, ", ".join("%.0f" % (s * 1000) for s in shares)))

        # asleep, /preview reseed -> the seed Job runs again (the sleep's apply strategy is for
        # a sleep or a wake alone), and the preview stays asleep
        sleep_command()
        asleep(awake)
        seeds = len(runs(emu, "-seed"))
        pd.deliver("issue_comment", command("/preview reseed", next(comment_ids)))
        try:
            wait("the seed Job to run again while asleep", lambda: len(runs(emu, "-seed")) > seeds, 60)
        except AssertionError:
            helpers = emu.app(HELPERS)
            raise AssertionError("/preview reseed while asleep ran no seed: helpers at %s synced with %s, state %r, "
                                 "hook runs %s" % (helpers["metadata"]["annotations"][HASH], strategy(helpers),
                                                   pd.preview(), hooks()))
        helpers_hash = wait("the helpers at the next seed generation, asleep",
                            lambda: (lambda h: h if h != awake[0] + "-asleep" and h.endswith("-asleep") else None)(
                                emu.app(HELPERS)["metadata"]["annotations"][HASH]), 60)
        awake = (helpers_hash[:-len("-asleep")], awake[1])
        asleep(awake)
        assert replicas("web") == 0 and suspended() is True
        rendering = live("ConfigMap", SLUG + "-rendering")
        print("faithful[sleep]: asleep, /preview reseed -> the seed Job ran (generation %s, helpers synced with %s); "
              "still sleeping" % (rendering["data"].get("seedGeneration"), strategy(emu.app(HELPERS))))

        # 5. asleep, then a push -> woken at the new head, with hooks
        seq = last_seq()
        pd.deliver("pull_request", pushed(SHA_B, "2019-05-15T16:00:00Z"))
        wait("the preview ready at the pushed head", lambda: ready_at(pd, emu, SHA_B), 180)
        app, helpers = emu.app(APP), emu.app(HELPERS)
        pushed_hash = app["metadata"]["annotations"][HASH]
        assert not pushed_hash.endswith("-asleep") and pushed_hash != awake[1], pushed_hash
        app = wait("the app synced at the push", lambda: settled(APP, pushed_hash), 60)
        assert strategy(app) == {"hook": {}} and strategy(helpers) == {"hook": {}}, (strategy(app), strategy(helpers))
        migrated = runs(emu, "-migrate", "%s:%s" % (IMAGE, SHA_B))
        assert len(migrated) == 1 and migrated[-1]["result"] == "succeeded", emu.jobs()
        wait("web and Mailpit back at 1", lambda: replicas("web") == 1 and replicas(mail_name) == 1, 30)
        assert suspended() is False and live("Deployment", "web")["spec"]["template"]["spec"]["containers"][0]["image"] \
            == "%s:%s" % (IMAGE, SHA_B)
        print("faithful[sleep]: asleep, then pushed -> woken at %s with hooks (syncStrategy hook): migration ran at %s, "
              "hook runs since: %s" % (SHA_B[:7], SHA_B[:7], sorted({n for _, n in hook_actions(seq)})))

        # 6. the sweeper puts it to sleep after sleep_after without a request
        awake = (emu.app(HELPERS)["metadata"]["annotations"][HASH], pushed_hash)
        pd.stop()
        with open(os.path.join(work, "previewd.toml"), "w") as f:
            f.write(toml('sleep_after = "2s"\n', '[sweep]\ninterval = "1s"\n'))
        pd.start()
        before = hooks()
        asleep(awake)
        slept = pd.history("slept")
        assert slept and "no request for 2s" in slept[-1], slept
        wait("the app's Deployment at 0", lambda: replicas("web") == 0, 30)
        assert hooks() == before
        status, _, _ = check("forward")
        assert status == 503, status
        let_in_early.extend(let_in_until_ready("a request after the sweeper's sleep"))
        wait("the preview ready again", lambda: ready_at(pd, emu, SHA_B), 120)
        print("faithful[sleep]: sleep_after = 2s -> the sweeper slept it (%r); a request woke it" % slept[-1])

        # 7. closed -> nothing left
        closed = fixture("pull_request.closed.unmerged")
        closed["pull_request"]["updated_at"] = closed["pull_request"]["closed_at"] = "2019-05-15T19:00:00Z"
        pd.deliver("pull_request", closed)
        wait("the preview forgotten", lambda: pd.preview() is None, 300)

        def leftovers():
            keep = {("Secret", "previewd-system", "postgres-admin")}
            return [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in emu.objects()
                    if o["kind"] not in ("AppProject",)
                    and (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) not in keep
                    and (o["metadata"].get("namespace") in ("previewd-system", "pg", SLUG)
                         or o["metadata"]["name"].startswith(SLUG)
                         or o["kind"] in ("Application", "Job", "SealedSecret", "Certificate", "DNSEndpoint",
                                          "CronJob", "Deployment"))]
        try:
            wait("every object to be gone", lambda: not leftovers(), 60)
        except AssertionError:
            raise AssertionError("left behind: %s" % leftovers())
        assert runs(emu, "-db-drop"), "the PostDelete drop ran"
        check_pods_started(emu)
        print("faithful[sleep]: closed -> nothing left; hook runs in all %s" % hooks())
        # Last, so that every step above has run and said what it saw.
        assert not let_in_early, "the check let requests in while the preview was waking, its app not ready " \
            "(what woke it, seconds after, previewd's state, the app Deployment's replicas and ready ones): %s" \
            % let_in_early
    except BaseException:
        log_tails(work)
        raise
    finally:
        pd.stop()
        emu.close()
    shutil.rmtree(work, ignore_errors=True)


def main():
    if sys.argv[1:2] == ["--emulator"]:
        return run_emulator(sys.argv[2], sys.argv[3:])
    binary, python, emulator = (os.path.abspath(a) if os.sep in a else shutil.which(a) for a in sys.argv[1:4])
    modes = sys.argv[4:] or ["shared", "cnpg", "wait_for", "template-shared", "template-cnpg", "services-shared",
                             "services-cnpg", "sleep"]
    passed = failed = 0
    for mode in modes:
        started = time.time()
        try:
            if mode == "wait_for":
                wait_walk(binary, python, emulator)
            elif mode == "sleep":
                sleep_walk(binary, python, emulator)
            elif mode.startswith("services-"):
                services_walk(mode.split("-", 1)[1], binary, python, emulator)
            elif mode.startswith("template-"):
                template_walk(mode.split("-", 1)[1], binary, python, emulator)
            else:
                walk(mode, binary, python, emulator)
            passed += 1
            print("faithful[%s]: passed in %.0f s" % (mode, time.time() - started))
        except Exception:
            failed += 1
            traceback.print_exc()
            print("faithful[%s]: FAILED" % mode)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A retired template generation's drop runs, against the faithful Argo CD (attack [1/7]).

Argo CD adds an Application's post-delete finalizers only when a refresh compared the
Application with its target (argo-cd controller/appcontroller.go processAppRefreshQueueItem:
SetPostDeleteFinalizer, after refreshAppConditions and CompareAppState), and runs PostDelete
hooks only for an Application that carries them (finalizeApplicationDeletion). A generation
superseded before Argo CD's first refresh of it (a writer's refresh while it builds, a busy
controller) is deleted without them: its drop never runs, and its sealed database and role
stay on the server. The twin adds them on its first refresh too, and refreshes at once, so
the walk holds that refresh off the way Argo CD itself does: the Applications' AppProject is
missing until generation 1 is being deleted (refreshAppConditions fails, nothing is compared,
and the deletion waits for the project: finalizeApplicationDeletion getAppProj).

The walk, per mode (shared, cnpg; `-keep`: `database.drop_on_delete = false`):

  no AppProject; opened -> generation 1's Application applied, never compared
  /preview refresh-template -> generation 2 started, generation 1 deleted
  the AppProjects applied -> generation 1's PostDelete drop ran (drop_on_delete false too),
              its hooks cleaned up (HookSucceeded), its Application gone
  destroy-template -> generation 2's drop ran
  /preview refresh-template -> generation 3, never a number used before
  closed   -> the preview's own database dropped, or kept with drop_on_delete = false

Usage: template_drop.py PREVIEWD PYTHON EMULATOR [MODE ...]   (modes: shared cnpg shared-keep cnpg-keep)
Ends with "N passed, M failed"; non-zero exit on a failure.
"""
import base64
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faithful as f  # noqa: E402  (the walks' emulator, previewd and GitHub fixtures)

POST_DELETE = "post-delete-finalizer.argocd.argoproj.io"


def secrets(emu, mode):
    """The database server's admin Secret (shared) or the Cluster's superuser Secret (cnpg)."""
    if mode == "shared":
        name, ns, kind = "postgres-admin", "previewd-system", "Opaque"
        data = {"PGHOST": "postgres.example", "PGPORT": "5432", "PGUSER": "postgres", "PGPASSWORD": "admin"}
    else:
        name, ns, kind = "shared-superuser", "pg", "kubernetes.io/basic-auth"
        data = {"host": "shared-rw.pg.svc", "port": "5432", "username": "postgres", "password": "su"}
    data = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    status, body = emu.req("POST", "/api/v1/namespaces/%s/secrets" % ns,
                           {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": kind,
                            "data": data})
    assert status == 201, body


def walk(mode, keep, binary, python, emulator):
    work = tempfile.mkdtemp(prefix="previewd-template-drop-%s-" % mode)
    emu = f.Emulator(python, emulator, work)
    pd = f.Previewd(binary, work)
    db_ns = "previewd-system" if mode == "shared" else "pg"
    label = mode + ("-keep" if keep else "")

    def generations():
        db = sqlite3.connect(os.path.join(work, "previewd.db"))
        try:
            return db.execute("SELECT generation, state FROM templates ORDER BY generation").fetchall()
        finally:
            db.close()

    def ran(name):
        return [j for j in emu.jobs() if j["name"] == name and j["result"] == "succeeded"]

    def hooks_left(gen):
        return [(o["kind"], o["metadata"]["name"]) for o in emu.objects()
                if o["metadata"].get("namespace") == db_ns and o["metadata"]["name"].startswith(gen + "-")]

    def refresh(comment_id):
        event = f.command("/preview refresh-template", comment_id)
        pd.deliver("issue_comment", event)

    try:
        toml = 'public_url = "http://127.0.0.1:%d"\n' % pd.port + f.config(mode, ["bin/migrate"]) \
            + "database_template = true\n"
        if keep:
            toml = toml.replace("[database]\n", "[database]\ndrop_on_delete = false\n", 1)
        with open(os.path.join(work, "previewd.toml"), "w") as out:
            out.write(toml)
        secrets(emu, mode)
        pd.start()  # no AppProject yet: Argo CD compares nothing

        gen1, gen2 = f.GEN % 1 + "-helpers", f.GEN % 2 + "-helpers"
        pd.deliver("pull_request", f.fixture("pull_request.opened"))
        f.wait("generation 1's Application", lambda: emu.app(gen1), 60)
        time.sleep(1)  # several of the twin's refreshes
        conditions = [c["type"] for c in (emu.app(gen1).get("status") or {}).get("conditions") or []]
        assert "InvalidSpecError" in conditions, "Argo CD could not compare it: %s" % emu.app(gen1).get("status")
        print("faithful[%s]: generation 1 applied, never compared by Argo CD (%s); finalizers %s"
              % (label, conditions, emu.app(gen1)["metadata"].get("finalizers")))

        refresh(9000201)
        f.wait("generation 1's Application being deleted",
               lambda: (emu.app(gen1) or {}).get("metadata", {}).get("deletionTimestamp"), 120)
        f.wait("generation 2's Application", lambda: emu.app(gen2), 60)
        import yaml
        for project in yaml.safe_load_all(pd.run("render", "--projects")):
            status, body = emu.req("POST", "/apis/argoproj.io/v1alpha1/namespaces/argocd/appprojects", project)
            assert status == 201, body
        f.wait("generation 1's Application gone", lambda: emu.app(gen1) is None, 120)
        assert ran(f.GEN % 1 + "-db-drop"), \
            "generation 1, deleted before Argo CD compared it, was never dropped: its database and role " \
            "stay on the server (Jobs run: %s)" % [j["name"] for j in emu.jobs()]
        f.wait("generation 1's drop hooks cleaned up", lambda: not hooks_left(f.GEN % 1), 30)
        print("faithful[%s]: generation 1, retired before Argo CD compared it: its PostDelete drop ran, "
              "its hooks cleaned up" % label)

        f.wait("generation 1 forgotten", lambda: [g for g, _ in generations()] == [2], 120)
        print(pd.run("destroy-template", "codertocat/hello-world").strip())
        f.wait("every generation gone", lambda: not generations() and emu.app(gen2) is None, 120)
        assert ran(f.GEN % 2 + "-db-drop"), "generation 2 was never dropped (Jobs run: %s)" % \
            [j["name"] for j in emu.jobs()]
        f.wait("generation 2's drop hooks cleaned up", lambda: not hooks_left(f.GEN % 2), 30)
        print("faithful[%s]: destroy-template -> generation 2's PostDelete drop ran" % label)

        refresh(9000202)
        built = f.wait("a generation built again", lambda: generations(), 60)
        assert [g for g, _ in built] == [3], "a generation number was used again: %s" % built
        f.wait("generation 3 ready", lambda: generations() == [(3, "ready")], 180)
        print("faithful[%s]: /preview refresh-template after destroy-template -> generation 3, ready" % label)

        # The preview's own database: dropped at teardown, or kept with drop_on_delete = false.
        closed = f.fixture("pull_request.closed.unmerged")
        closed["pull_request"]["updated_at"] = closed["pull_request"]["closed_at"] = "2019-05-15T19:00:00Z"
        pd.deliver("pull_request", closed)
        f.wait("the preview forgotten", lambda: pd.preview() is None, 180)
        dropped = bool(ran(f.SLUG + "-db-drop"))
        # (A cnpg preview's database may go by its Database's reclaim policy, with no Job.)
        assert not (keep and dropped) and (keep or dropped or mode == "cnpg"), \
            "the preview's database dropped: %s, drop_on_delete = %s" % (dropped, not keep)
        f.check_pods_started(emu)
        print("faithful[%s]: PR closed -> its drop Job %s" % (label, "ran" if dropped else "did not run"))
    except BaseException:
        f.log_tails(work)
        raise
    finally:
        pd.stop()
        emu.close()
    shutil.rmtree(work, ignore_errors=True)


def main():
    binary, python, emulator = (os.path.abspath(a) if os.sep in a else shutil.which(a) for a in sys.argv[1:4])
    modes = sys.argv[4:] or ["shared", "cnpg", "shared-keep", "cnpg-keep"]
    passed = failed = 0
    for mode in modes:
        started = time.time()
        try:
            walk(mode.split("-")[0], mode.endswith("-keep"), binary, python, emulator)
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

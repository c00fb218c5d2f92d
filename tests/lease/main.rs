//! Who leads, through the real binary: three `previewd serve` on one state with the
//! kubernetes sink, against one Kubernetes emulator (`kube_emulator.py`, a verbatim copy of
//! `../shared/tools/kube_emulator.py`, sha256 044fba4e…, so that the tests pass from a fresh
//! clone). Each process reaches the emulator through its own logging proxy (`proxy.rs`),
//! which tells who wrote what, and when.
//!
//! The state is one PostgreSQL database the three share (a throwaway server per test
//! binary, `common::pg`), as replicas share one in a cluster. What they say to GitHub goes to
//! the stand-in (`common::github`), each replica with a token of its own, so that who wrote
//! what is known there too.

#[path = "../common/mod.rs"]
mod common;
mod proxy;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Delivery;
use common::github::FakeGitHub;
use common::http::request;
use common::process::Server;
use proxy::Proxy;

/// Short settings, so that the test runs in seconds: (duration, renew deadline, retry period).
const SHORT: (u64, u64, u64) = (3, 2, 1);

/// The emulator on a free port, stopped when dropped.
struct Emulator {
    child: Child,
    port: u16,
}

impl Emulator {
    fn start() -> Self {
        let python = std::env::var("PREVIEWD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = format!(
            "{}/tests/lease/kube_emulator.py",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut child = Command::new(python)
            .args([&script, "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the Kubernetes emulator");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the emulator prints its port");
        Self { child, port }
    }

    /// The Lease's holder (empty when released or none).
    fn holder(&self) -> String {
        let answer = request(
            &format!("127.0.0.1:{}", self.port),
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/previewd",
            &[],
            b"",
        )
        .unwrap();
        if answer.status == 404 {
            return String::new();
        }
        let lease: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The GitHub stand-in, on a runtime of its own (the tests drive processes, synchronously).
struct GitHubStandIn {
    fake: FakeGitHub,
    _runtime: tokio::runtime::Runtime,
}

impl GitHubStandIn {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let fake = runtime.block_on(FakeGitHub::start());
        Self {
            fake,
            _runtime: runtime,
        }
    }

    /// How many requests it has had: a mark for `writes_by`.
    fn requests(&self) -> usize {
        self.fake.hub().log.len()
    }

    /// The writes (anything but GET) signed with `replica`'s token, from request `since` on.
    fn writes_by(&self, replica: &Replica, since: usize) -> Vec<String> {
        let hub = self.fake.hub();
        let token = token_of(replica.name);
        hub.log
            .iter()
            .zip(&hub.auth)
            .skip(since)
            .filter(|(line, auth)| !line.starts_with("GET ") && auth.ends_with(&token))
            .map(|(line, _)| line.clone())
            .collect()
    }

    /// How many sticky status comments each PR has.
    fn sticky_comments(&self) -> BTreeMap<u64, usize> {
        let mut count = BTreeMap::new();
        for comment in &self.fake.hub().comments {
            if comment["body"]
                .as_str()
                .is_some_and(|b| b.starts_with(previewd::comment::MARKER))
            {
                *count
                    .entry(comment["issue_number"].as_u64().unwrap())
                    .or_default() += 1;
            }
        }
        count
    }

    /// How many deployments each (environment, SHA) has.
    fn deployments(&self) -> BTreeMap<(String, String), usize> {
        let mut count = BTreeMap::new();
        for deployment in &self.fake.hub().deployments {
            let key = (
                deployment["environment"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                deployment["sha"].as_str().unwrap_or_default().to_owned(),
            );
            *count.entry(key).or_default() += 1;
        }
        count
    }
}

fn token_of(replica: &str) -> String {
    format!("ghp_{replica}")
}

/// One previewd, its proxy and its log.
struct Replica {
    name: &'static str,
    server: Server,
    proxy: Proxy,
    log: PathBuf,
}

impl Replica {
    fn start(
        name: &'static str,
        dir: &Path,
        state: &str,
        emulator: &Emulator,
        github: &GitHubStandIn,
        settings: (u64, u64, u64),
    ) -> Self {
        // What every replica of a shared state is configured with: its cluster's sealing
        // certificate and the one session secret.
        let (toml, shared) = common::shared_store(dir, "", state);
        std::fs::write(dir.join("previewd.toml"), toml).unwrap();
        let proxy = Proxy::start(emulator.port);
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        proxy.kubeconfig(&kubeconfig);
        let log = dir.join(format!("{name}.log"));
        let (duration, renew, retry) = settings;
        let mut env: Vec<(&str, String)> = vec![
            ("PREVIEWD_GITHUB_WEBHOOK_SECRET", common::SECRET.into()),
            ("PREVIEWD_SINK_KIND", "kubernetes".into()),
            ("KUBECONFIG", kubeconfig.display().to_string()),
            ("PREVIEWD_LEASE_ENABLED", "true".into()),
            ("PREVIEWD_LEASE_NAMESPACE", "default".into()),
            ("PREVIEWD_LEASE_IDENTITY", name.into()),
            ("PREVIEWD_LEASE_DURATION", format!("{duration}s")),
            ("PREVIEWD_LEASE_RENEW_DEADLINE", format!("{renew}s")),
            ("PREVIEWD_LEASE_RETRY_PERIOD", format!("{retry}s")),
            ("PREVIEWD_GITHUB_API_URL", github.fake.url.clone()),
            ("PREVIEWD_GITHUB_TOKEN", token_of(name)),
        ];
        env.extend(shared.iter().map(|(k, v)| (k.as_str(), v.clone())));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let server = Server::start_logging(dir, &env, std::fs::File::create(&log).unwrap());
        Self {
            name,
            server,
            proxy,
            log,
        }
    }

    fn holds(&self, holder: &str) -> bool {
        holder.starts_with(&format!("{}_", self.name))
    }

    /// `previewd_lease_held` as this replica reports it.
    fn held_metric(&self) -> Option<u8> {
        let answer = request(&self.server.addr, "GET", "/metrics", &[], b"").ok()?;
        let line = answer
            .body
            .lines()
            .find(|l| l.starts_with("previewd_lease_held "))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    fn ready(&self) -> bool {
        request(&self.server.addr, "GET", "/readyz", &[], b"").is_ok_and(|a| a.status == 200)
    }

    fn signal(&self, signal: &str) {
        let pid = self.server.child.id().to_string();
        assert!(
            Command::new("kill")
                .args([signal, &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Polls `what` every 20 ms until it holds, for at most `within`; the time it took.
fn wait_for(what: &str, within: Duration, done: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

/// The one replica the Lease names, by index, once it names one of `among`.
fn leader(emulator: &Emulator, replicas: &[Replica], among: &[usize]) -> usize {
    let holder = emulator.holder();
    let found: Vec<usize> = among
        .iter()
        .copied()
        .filter(|&i| replicas[i].holds(&holder))
        .collect();
    assert_eq!(found.len(), 1, "the Lease names {holder:?}");
    found[0]
}

/// Sends `count` new PRs' `opened` deliveries, each to every replica; the GUIDs some
/// replica acknowledged (2xx).
fn deliveries_to_all(replicas: &[Replica], count: u64) -> Vec<String> {
    let mut acknowledged = Vec::new();
    for n in 0..count {
        let guid = format!("during-takeover-{n}");
        let delivery = Delivery::fixture("pull_request.opened")
            .number(100 + n)
            .guid(&guid);
        let headers: Vec<(&str, String)> = delivery.headers();
        let mut statuses = Vec::new();
        for replica in replicas {
            // The killed one refuses the connection: not acknowledged, nothing to check.
            if let Ok(answer) = request(
                &replica.server.addr,
                "POST",
                "/webhooks/github",
                &headers,
                &delivery.body,
            ) {
                statuses.push(answer.status);
            }
        }
        assert!(!statuses.is_empty(), "{guid}: no replica answered");
        assert!(
            statuses.iter().all(|s| *s == 200 || *s == 202),
            "{guid}: {statuses:?}"
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == 202).count(),
            1,
            "{guid}: one replica records it, the others find it recorded: {statuses:?}"
        );
        acknowledged.push(guid);
        std::thread::sleep(Duration::from_millis(100));
    }
    acknowledged
}

/// Every acknowledged delivery is in the shared state exactly once, and so is its PR's
/// preview and the history row that opened it.
fn recorded_once(state: &str, acknowledged: &[String]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let pool = sqlx::PgPool::connect(state).await.unwrap();
        let guids: Vec<String> =
            sqlx::query_scalar("SELECT guid FROM deliveries WHERE guid LIKE 'during-takeover-%'")
                .fetch_all(&pool)
                .await
                .unwrap();
        let mut sorted = guids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), guids.len(), "no delivery twice");
        for guid in acknowledged {
            assert!(guids.contains(guid), "{guid} acknowledged but not recorded");
        }
        let opened: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM history WHERE what = 'opened' AND number >= 100",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(opened, acknowledged.len() as i64, "each PR opened once");
        pool.close().await;
    });
}

#[test]
fn one_replica_leads_a_killed_one_is_replaced_in_time_and_a_stopped_one_writes_nothing_after() {
    let (duration, _, retry) = SHORT;
    let bound = Duration::from_secs(duration + retry);
    let emulator = Emulator::start();
    let github = GitHubStandIn::start();
    let dir = tempfile::tempdir().unwrap();
    let state = common::pg::server().fresh_database();
    let replicas: Vec<Replica> = ["replica-a", "replica-b", "replica-c"]
        .into_iter()
        .map(|name| Replica::start(name, dir.path(), &state, &emulator, &github, SHORT))
        .collect();
    let all = [0, 1, 2];

    // Exactly one holds the Lease, says so in /metrics, and every replica is ready.
    wait_for("a holder", Duration::from_secs(10), || {
        !emulator.holder().is_empty()
    });
    let first = leader(&emulator, &replicas, &all);
    wait_for("the leader's gauge", Duration::from_secs(5), || {
        replicas[first].held_metric() == Some(1)
    });
    std::thread::sleep(Duration::from_secs(retry * 2));
    let held: Vec<Option<u8>> = replicas.iter().map(Replica::held_metric).collect();
    let mut expected = vec![Some(0); 3];
    expected[first] = Some(1);
    assert_eq!(held, expected, "previewd_lease_held of a, b, c");
    for replica in &replicas {
        assert!(
            replica.ready(),
            "{} is ready for deliveries whether it leads or not",
            replica.name
        );
    }

    // Only the leader writes the preview's Application.
    let start = Instant::now();
    let opened = replicas[first]
        .server
        .deliver(&Delivery::fixture("pull_request.opened"));
    assert_eq!(opened.status, 202, "{}", opened.body);
    wait_for("the leader's apply", Duration::from_secs(10), || {
        !replicas[first].proxy.writes_since(start).is_empty()
    });
    for (i, replica) in replicas.iter().enumerate().filter(|(i, _)| *i != first) {
        assert_eq!(
            replica.proxy.writes_since(start).len(),
            0,
            "follower {i} wrote"
        );
    }

    // kill -9 of the holder: another takes over within the duration and a retry period.
    replicas[first].signal("-KILL");
    let killed = Instant::now();
    let rest: Vec<usize> = all.iter().copied().filter(|&i| i != first).collect();
    // Meanwhile GitHub keeps sending, each delivery to all three (as a Service would spread
    // them, and redeliveries land anywhere): every one acknowledged is recorded, once.
    let (took, acknowledged) = std::thread::scope(|scope| {
        let sending = scope.spawn(|| deliveries_to_all(&replicas, 20));
        let took = wait_for("a new holder", bound * 3, || {
            let holder = emulator.holder();
            rest.iter().any(|&i| replicas[i].holds(&holder))
        });
        (took, sending.join().unwrap())
    });
    recorded_once(&state, &acknowledged);
    eprintln!("takeover after kill -9: {took:?} (bound {bound:?})");
    assert!(
        took <= bound,
        "took over after {took:?}, more than {bound:?}"
    );
    assert!(killed.elapsed() >= took);

    // On GitHub, each PR has one sticky comment and one deployment per head, whether the
    // killed holder reported it before it died or the new one did after.
    let prs = 1 + acknowledged.len();
    wait_for("every PR's sticky comment", Duration::from_secs(60), || {
        github.sticky_comments().len() == prs
    });
    std::thread::sleep(Duration::from_secs(retry * 2));
    let comments = github.sticky_comments();
    assert!(
        comments.values().all(|n| *n == 1),
        "sticky comments per PR: {comments:?}"
    );
    let deployments = github.deployments();
    assert!(
        deployments.values().all(|n| *n == 1),
        "deployments per environment and head: {deployments:?}"
    );
    let second = leader(&emulator, &replicas, &rest);
    let third = rest.into_iter().find(|&i| i != second).unwrap();

    // SIGSTOP of the new holder past the duration: the third takes over.
    wait_for("the new leader's gauge", Duration::from_secs(5), || {
        replicas[second].held_metric() == Some(1)
    });
    replicas[second].signal("-STOP");
    wait_for("the third to take over", bound * 3, || {
        replicas[third].holds(&emulator.holder())
    });
    std::thread::sleep(Duration::from_secs(1));
    // Resumed, it finds its tenure lapsed: told of a new PR, it writes nothing, to the
    // cluster or to GitHub.
    let resumed = Instant::now();
    let mark = github.requests();
    replicas[second].signal("-CONT");
    let another = Delivery::fixture("pull_request.opened").number(3);
    assert_eq!(replicas[second].server.deliver(&another).status, 202);
    std::thread::sleep(Duration::from_secs(retry * 3));
    let writes = replicas[second].proxy.writes_since(resumed);
    assert!(writes.is_empty(), "the resumed replica wrote: {writes:?}");
    let told = github.writes_by(&replicas[second], mark);
    assert!(
        told.is_empty(),
        "the resumed replica wrote to GitHub: {told:?}"
    );
    // The third, which leads, reports the new PR.
    wait_for(
        "the third's comment on PR 3",
        Duration::from_secs(30),
        || github.sticky_comments().contains_key(&3),
    );
    assert!(
        !github.writes_by(&replicas[third], mark).is_empty(),
        "the third's writes are told apart by its token"
    );
    assert!(
        replicas[second].log_text().contains("lost the Lease"),
        "the resumed replica's log:\n{}",
        replicas[second].log_text()
    );
    assert_eq!(replicas[second].held_metric(), Some(0));
    assert_eq!(replicas[third].held_metric(), Some(1));
    assert!(replicas[third].holds(&emulator.holder()));
    assert!(replicas[third].log_text().contains("acquired the Lease"));
}

#[test]
fn sigterm_releases_the_lease_so_the_next_replica_leads_at_once() {
    let emulator = Emulator::start();
    let github = GitHubStandIn::start();
    let dir = tempfile::tempdir().unwrap();
    let state = common::pg::server().fresh_database();
    // A long duration: only a release can hand over quickly.
    let slow = (30, 20, 1);
    let replicas: Vec<Replica> = ["replica-a", "replica-b"]
        .into_iter()
        .map(|name| Replica::start(name, dir.path(), &state, &emulator, &github, slow))
        .collect();
    wait_for("a holder", Duration::from_secs(10), || {
        !emulator.holder().is_empty()
    });
    let first = leader(&emulator, &replicas, &[0, 1]);
    let other = 1 - first;
    replicas[first].signal("-TERM");
    let took = wait_for("the other to lead", Duration::from_secs(10), || {
        replicas[other].holds(&emulator.holder())
    });
    eprintln!("hand-over after SIGTERM: {took:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(replicas[first].log_text().contains("released the Lease"));
}

/// With the default settings (12 s, 8 s, 2 s) a killed holder is replaced within 15 s. Slow
/// (up to 15 s): run it with `--ignored`.
#[test]
#[ignore]
fn with_the_default_settings_a_killed_holder_is_replaced_within_15_s() {
    let emulator = Emulator::start();
    let github = GitHubStandIn::start();
    let dir = tempfile::tempdir().unwrap();
    let state = common::pg::server().fresh_database();
    let defaults = (12, 8, 2);
    let replicas: Vec<Replica> = ["replica-a", "replica-b"]
        .into_iter()
        .map(|name| Replica::start(name, dir.path(), &state, &emulator, &github, defaults))
        .collect();
    wait_for("a holder", Duration::from_secs(10), || {
        !emulator.holder().is_empty()
    });
    let first = leader(&emulator, &replicas, &[0, 1]);
    // Kill right after a renew: the worst case for the one that follows.
    std::thread::sleep(Duration::from_secs(5));
    replicas[first].signal("-KILL");
    let took = wait_for("the other to lead", Duration::from_secs(30), || {
        replicas[1 - first].holds(&emulator.holder())
    });
    eprintln!("takeover after kill -9 with the defaults: {took:?}");
    assert!(took <= Duration::from_secs(15), "took {took:?}");
}

//! Delete with the app still consuming, twice, and before any create; and no secret in
//! any process's argv, create or delete.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::Preview;
use crate::rabbitmq::ADMIN_PASSWORD;

/// Whether `done` comes true within 10 s.
fn eventually(done: impl Fn() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    done()
}

#[test]
fn delete_with_a_consumer_connected_closes_it_and_leaves_nothing_of_the_preview() {
    let preview = Preview::of("octo/teardown#5");
    preview.create();
    let broker = preview.broker();
    let mut consumer = preview
        .app(&preview.slug, "consume", &[])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(consumer.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert_eq!(first, r#"{"consuming": true}"#);
    assert!(
        eventually(|| broker
            .get("/api/connections")
            .to_string()
            .contains(&preview.slug)),
        "the consumer's connection is listed"
    );

    let started = Instant::now();
    preview.delete();
    let closed: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    // Closed when its user went, the first thing delete removes.
    let reason = format!("CONNECTION_FORCED - user '{}' is deleted", preview.slug);
    assert!(
        closed["closed"]
            .as_str()
            .unwrap_or_default()
            .contains(&reason),
        "the consumer was not closed by its user's deletion: {closed}"
    );
    assert!(started.elapsed() < Duration::from_secs(20), "{closed}");
    consumer.wait().unwrap();

    for path in [
        "/api/vhosts",
        "/api/users",
        "/api/connections",
        "/api/queues",
    ] {
        assert!(
            eventually(|| !broker.get(path).to_string().contains(&preview.slug)),
            "{path} still shows {}: {}",
            preview.slug,
            broker.get(path)
        );
    }
}

#[test]
fn delete_twice_and_delete_before_any_create_both_succeed() {
    let preview = Preview::of("octo/teardown-twice#1");
    preview.create();
    preview.delete();
    let again = preview.delete();
    assert!(again.contains("already gone"), "{again}");

    let never = Preview::of("octo/never-created#1");
    let output = never.delete();
    assert!(output.contains("already gone"), "{output}");
}

#[test]
fn no_secret_reaches_any_process_argv() {
    let preview = Preview::of("octo/argv#1");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("argv.log");
    let wrapper = dir.path().join("curl");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nfor arg in \"$@\"; do printf '%s\\n' \"$arg\" >>'{}'; done\nexec /usr/bin/curl \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", dir.path().display());
    let broker = preview.broker();
    for (action, create) in [("create", true), ("delete", false)] {
        let output = broker.script_with_path(action, &preview.env(create), &path);
        crate::ok(&output, action);
    }
    let argv = std::fs::read_to_string(&log).unwrap();
    assert!(argv.contains("/api/users/"), "the wrapper ran: {argv}");
    // The admin password's tail, to catch it however escaped.
    for secret in [
        ADMIN_PASSWORD,
        "zebra-quokka",
        &preview.hash,
        &preview.password,
    ] {
        assert!(!argv.contains(secret), "{secret:?} in curl's argv:\n{argv}");
    }
}

//! `/metrics` parsed by the Prometheus client's own OpenMetrics parser; each previewd counts
//! into the registry it was handed, so tests run side by side without seeing each other's.

mod common;

use common::{Delivery, TestApp};
use serde_json::Value;

#[tokio::test]
async fn metrics_parse_as_openmetrics_and_move_when_deliveries_arrive() {
    let app = TestApp::start().await;
    let read = |text: &str| -> Value {
        let python = std::env::var("PREVIEWD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/prometheus_parse.py");
        let mut child = std::process::Command::new(python)
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "the parser refused the text:\n{text}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let accepted = |samples: &Value| {
        samples
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["name"] == "previewd_deliveries_total"
                    && s["labels"]["event"] == "pull_request"
                    && s["labels"]["outcome"] == "accepted"
            })
            .map_or(0.0, |s| s["value"].as_f64().unwrap())
    };
    let (_, before) = app.get("/metrics", None).await;
    let before = read(&before);
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.send(
        &Delivery::fixture("pull_request.opened")
            .number(5)
            .guid("five"),
    )
    .await;
    let (status, after) = app.get("/metrics", None).await;
    assert_eq!(status, 200);
    let after = read(&after);
    assert_eq!(accepted(&after) - accepted(&before), 2.0);
    let queued: f64 = after
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "previewd_previews")
        .map(|s| s["value"].as_f64().unwrap())
        .sum();
    assert_eq!(queued, 2.0, "previews by state and cluster");
    for family in [
        "previewd_intake_seconds_bucket",
        "previewd_teardown_seconds_count",
        "previewd_stuck_teardowns_total",
        "previewd_github_rate_limit_remaining",
        "previewd_sweep_seconds_count",
    ] {
        assert!(
            after
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["name"] == family),
            "{family}"
        );
    }
}

/// 20,000 unsigned deliveries once made 20,080 lines of `/metrics`: each new
/// `X-GitHub-Event` value was a new series. Labels now come from fixed sets.
#[tokio::test]
async fn unsigned_deliveries_never_name_a_series_after_their_event_header() {
    let app = TestApp::start().await;
    let (_, before) = app.get("/metrics", None).await;
    for n in 0..200 {
        let event = format!("made_up_event_{}", "x".repeat(n % 30));
        let event = format!("{event}{}", (b'a' + (n / 30) as u8) as char);
        let forged = Delivery::fixture("pull_request.opened")
            .signed_with("not-the-webhook-secret")
            .without("X-GitHub-Event");
        let forged = Delivery {
            event: Some(event),
            ..forged
        };
        assert_eq!(app.send(&forged).await.0, 401);
    }
    // A verified delivery of an event previewd has never heard of: `other`, not its name.
    let unknown = Delivery::raw("sponsorship", br#"{"action":"created"}"#.to_vec());
    assert_eq!(app.send(&unknown).await.0, 200);
    let (_, after) = app.get("/metrics", None).await;
    assert!(!after.contains("made_up_event"), "{after}");
    assert!(!after.contains("sponsorship"), "{after}");
    assert!(
        after.contains("previewd_deliveries_total{event=\"unverified\",outcome=\"rejected\"} 200"),
        "{after}"
    );
    assert!(
        after.contains("previewd_deliveries_total{event=\"other\",outcome=\"ignored\"} 1"),
        "{after}"
    );
    assert!(
        after.lines().count() <= before.lines().count() + 4,
        "the exposition grew from {} to {} lines",
        before.lines().count(),
        after.lines().count()
    );
}

/// The registry is handed to each previewd, not a process-wide static: a delivery counted by
/// one is not in another's `/metrics` (before, both read one global and the first test
/// binary to count made the other's numbers wrong).
#[tokio::test]
async fn two_previewds_in_one_process_count_apart() {
    let (one, other) = (TestApp::start().await, TestApp::start().await);
    assert_eq!(
        one.send(&Delivery::fixture("pull_request.opened")).await.0,
        202
    );
    let accepted = "previewd_deliveries_total{event=\"pull_request\",outcome=\"accepted\"} 1";
    let (_, counted) = one.get("/metrics", None).await;
    assert!(counted.contains(accepted), "{counted}");
    let (_, apart) = other.get("/metrics", None).await;
    assert!(!apart.contains("outcome=\"accepted\""), "{apart}");
    // Prometheus picks its parser by this header: OpenMetrics text under the old
    // `text/plain; version=0.0.4` would be read with the wrong one.
    let request = axum::http::Request::get("/metrics")
        .body(axum::body::Body::empty())
        .unwrap();
    let (_, headers, _) = other.answer(request).await;
    assert_eq!(
        headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(
        apart.ends_with("# EOF\n"),
        "OpenMetrics ends with # EOF: {apart}"
    );
}

//! Prometheus metrics: counters and histograms kept in memory by the code that measures,
//! rendered in the text exposition format at `GET /metrics` together with gauges read from
//! the state at scrape time (previews by state and cluster).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

/// The process's metrics; one registry, like a Prometheus client's default.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::default);

/// Seconds: from 1 ms to 10 minutes, wide enough for an intake write and a teardown.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 600.0,
];

#[derive(Default)]
pub struct Histogram {
    inner: Mutex<(Vec<u64>, u64, f64)>,
}

impl Histogram {
    pub fn observe(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        let mut inner = self.inner.lock().expect("histogram");
        if inner.0.is_empty() {
            inner.0 = vec![0; BUCKETS.len()];
        }
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                inner.0[i] += 1;
            }
        }
        inner.1 += 1;
        inner.2 += seconds;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let inner = self.inner.lock().expect("histogram");
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, bound) in BUCKETS.iter().enumerate() {
            let count = inner.0.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", inner.1);
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", inner.2);
        let _ = writeln!(out, "{name}_count{braces} {}", inner.1);
    }
}

/// The events a verified delivery is counted under; any other name is `other`.
const EVENTS: &[&str] = &[
    "ping",
    "pull_request",
    "issue_comment",
    "installation",
    "installation_repositories",
];

/// The `event` label: `unverified` before the signature checked out, else a known name.
pub fn event_label(event: Option<&str>) -> &'static str {
    match event {
        None => "unverified",
        Some(name) => EVENTS
            .iter()
            .find(|known| **known == name)
            .copied()
            .unwrap_or("other"),
    }
}

/// How a delivery ended, as counted: the `outcome` label's fixed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    Recorded(crate::intent::Outcome),
    Duplicate,
    Rejected,
}

impl DeliveryOutcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Recorded(outcome) => outcome.as_str(),
            Self::Duplicate => "duplicate",
            Self::Rejected => "rejected",
        }
    }
}

#[derive(Default)]
pub struct Metrics {
    /// (event, outcome) → deliveries; both labels from fixed sets
    deliveries: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    pub intake_latency: Histogram,
    /// sink → reconcile durations, and errors
    reconcile: Mutex<BTreeMap<&'static str, (Histogram, u64)>>,
    pub teardown: Histogram,
    stuck_teardowns: AtomicI64,
    pub sweep: Histogram,
    /// `x-ratelimit-remaining` of GitHub's last answer (-1: none yet).
    pub github_rate_remaining: AtomicI64,
}

impl Metrics {
    /// One delivery. `event` is `None` until the signature verified: an unsigned header's
    /// value never becomes a label (every new value would be a new series), and a verified
    /// one only when it is an event previewd knows.
    pub fn delivery(&self, event: Option<&str>, outcome: DeliveryOutcome, latency: Duration) {
        *self
            .deliveries
            .lock()
            .expect("deliveries")
            .entry((event_label(event), outcome.as_str()))
            .or_default() += 1;
        self.intake_latency.observe(latency);
    }

    /// `sink` is a sink kind's name (`Sink::kind`): a fixed set.
    pub fn reconciled(&self, sink: &'static str, took: Duration, failed: bool) {
        let mut map = self.reconcile.lock().expect("reconcile");
        let entry = map.entry(sink).or_default();
        entry.0.observe(took);
        if failed {
            entry.1 += 1;
        }
    }

    pub fn stuck_teardown(&self) {
        self.stuck_teardowns.fetch_add(1, Ordering::Relaxed);
    }

    /// The exposition text; `previews` are (state, cluster, count) read from the state now.
    pub fn render(&self, previews: &[(String, String, i64)]) -> String {
        let mut out = String::new();
        out += "# HELP previewd_deliveries_total Webhook deliveries by event and outcome.\n";
        out += "# TYPE previewd_deliveries_total counter\n";
        for ((event, outcome), n) in self.deliveries.lock().expect("deliveries").iter() {
            let _ = writeln!(
                out,
                "previewd_deliveries_total{{event=\"{event}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        out += "# HELP previewd_intake_seconds Time from a delivery's arrival to its durable answer.\n";
        out += "# TYPE previewd_intake_seconds histogram\n";
        self.intake_latency
            .render(&mut out, "previewd_intake_seconds", "");
        out += "# HELP previewd_reconcile_seconds Time one preview's reconcile took, by sink.\n";
        out += "# TYPE previewd_reconcile_seconds histogram\n";
        let reconcile = self.reconcile.lock().expect("reconcile");
        for (sink, (histogram, _)) in reconcile.iter() {
            histogram.render(
                &mut out,
                "previewd_reconcile_seconds",
                &format!("sink=\"{sink}\""),
            );
        }
        out += "# HELP previewd_reconcile_errors_total Reconciles that failed, by sink.\n";
        out += "# TYPE previewd_reconcile_errors_total counter\n";
        for (sink, (_, errors)) in reconcile.iter() {
            let _ = writeln!(
                out,
                "previewd_reconcile_errors_total{{sink=\"{sink}\"}} {errors}"
            );
        }
        drop(reconcile);
        out += "# HELP previewd_previews Tracked previews by state and cluster.\n";
        out += "# TYPE previewd_previews gauge\n";
        for (state, cluster, n) in previews {
            let _ = writeln!(
                out,
                "previewd_previews{{state=\"{}\",cluster=\"{}\"}} {n}",
                label(state),
                label(cluster)
            );
        }
        out += "# HELP previewd_teardown_seconds Time from a teardown's start to the preview forgotten.\n";
        out += "# TYPE previewd_teardown_seconds histogram\n";
        self.teardown
            .render(&mut out, "previewd_teardown_seconds", "");
        out += "# HELP previewd_stuck_teardowns_total Teardowns reported stuck (never forced).\n";
        out += "# TYPE previewd_stuck_teardowns_total counter\n";
        let _ = writeln!(
            out,
            "previewd_stuck_teardowns_total {}",
            self.stuck_teardowns.load(Ordering::Relaxed)
        );
        out += "# HELP previewd_github_rate_limit_remaining GitHub's x-ratelimit-remaining on its last answer (-1: none yet).\n";
        out += "# TYPE previewd_github_rate_limit_remaining gauge\n";
        let _ = writeln!(
            out,
            "previewd_github_rate_limit_remaining {}",
            self.github_rate_remaining.load(Ordering::Relaxed)
        );
        out += "# HELP previewd_sweep_seconds Time one sweep pass took.\n";
        out += "# TYPE previewd_sweep_seconds histogram\n";
        self.sweep.render(&mut out, "previewd_sweep_seconds", "");
        out
    }
}

/// A label value escaped as the exposition format requires.
fn label(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counters_count() {
        let metrics = Metrics::default();
        let accepted = DeliveryOutcome::Recorded(crate::intent::Outcome::Accepted);
        let ignored = DeliveryOutcome::Recorded(crate::intent::Outcome::Ignored);
        metrics.delivery(Some("pull_request"), accepted, Duration::from_millis(3));
        metrics.delivery(Some("pull_request"), accepted, Duration::from_millis(30));
        metrics.delivery(Some("x\"}evil"), ignored, Duration::from_millis(1));
        let text = metrics.render(&[("ready".into(), "eu\"1".into(), 2)]);
        assert!(
            text.contains(
                "previewd_deliveries_total{event=\"pull_request\",outcome=\"accepted\"} 2"
            )
        );
        assert!(text.contains("previewd_deliveries_total{event=\"other\",outcome=\"ignored\"} 1"));
        assert!(text.contains("previewd_intake_seconds_bucket{le=\"0.005\"} 2"));
        assert!(text.contains("previewd_intake_seconds_bucket{le=\"+Inf\"} 3"));
        assert!(text.contains("previewd_previews{state=\"ready\",cluster=\"eu\\\"1\"} 2"));
    }
}

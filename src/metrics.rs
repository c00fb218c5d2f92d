//! Prometheus metrics: one registry (prometheus-client, as kube-rs' controller-rs and
//! linkerd's policy controller keep theirs), built once by the composition root and handed
//! to whoever counts; rendered in the OpenMetrics text format at `GET /metrics` together with
//! gauges read from the state at scrape time (previews by state and cluster).

use std::sync::Mutex;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Seconds: from 1 ms to 10 minutes, wide enough for an intake write and a teardown.
const BUCKETS: [f64; 17] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 600.0,
];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
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

/// Label sets: every value from a fixed set, except the previews' `cluster`, which comes
/// from the configuration (bounded by it), never from a request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabels {
    event: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PassLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkLabels {
    sink: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    /// `acquired` or `lost`.
    change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PreviewLabels {
    state: String,
    cluster: String,
}

pub struct Metrics {
    registry: Registry,
    deliveries: Family<DeliveryLabels, Counter>,
    intake_latency: Histogram,
    reconcile: Family<SinkLabels, Histogram, fn() -> Histogram>,
    reconcile_errors: Family<SinkLabels, Counter>,
    passes: Family<PassLabels, Histogram, fn() -> Histogram>,
    previews: Family<PreviewLabels, Gauge>,
    teardown: Histogram,
    stuck_teardowns: Counter,
    sweep: Histogram,
    /// `x-ratelimit-remaining` of GitHub's last answer (-1: none yet).
    github_rate_remaining: Gauge<i64, AtomicI64>,
    /// 1 while this replica holds the Lease (and so runs the work loops).
    lease_held: Gauge<i64, AtomicI64>,
    lease_changes: Family<LeaseLabels, Counter>,
    /// One scrape at a time: the previews gauge is cleared and refilled from the state.
    scraping: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let deliveries = Family::<DeliveryLabels, Counter>::default();
        registry.register(
            "previewd_deliveries",
            "Webhook deliveries by event and outcome",
            deliveries.clone(),
        );
        let intake_latency = histogram();
        registry.register(
            "previewd_intake_seconds",
            "Time from a delivery's arrival to its durable answer",
            intake_latency.clone(),
        );
        let reconcile: Family<SinkLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(histogram);
        registry.register(
            "previewd_reconcile_seconds",
            "Time one preview's reconcile took, by sink",
            reconcile.clone(),
        );
        let reconcile_errors = Family::<SinkLabels, Counter>::default();
        registry.register(
            "previewd_reconcile_errors",
            "Reconciles that failed, by sink",
            reconcile_errors.clone(),
        );
        let passes: Family<PassLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(histogram);
        registry.register(
            "previewd_reconcile_pass_seconds",
            "Time one reconcile pass took: full (every preview) or resync (what changed)",
            passes.clone(),
        );
        let previews = Family::<PreviewLabels, Gauge>::default();
        registry.register(
            "previewd_previews",
            "Tracked previews by state and cluster",
            previews.clone(),
        );
        let teardown = histogram();
        registry.register(
            "previewd_teardown_seconds",
            "Time from a teardown's start to the preview forgotten",
            teardown.clone(),
        );
        let stuck_teardowns = Counter::default();
        registry.register(
            "previewd_stuck_teardowns",
            "Teardowns reported stuck (never forced)",
            stuck_teardowns.clone(),
        );
        let github_rate_remaining = Gauge::<i64, AtomicI64>::default();
        github_rate_remaining.set(-1);
        registry.register(
            "previewd_github_rate_limit_remaining",
            "GitHub's x-ratelimit-remaining on its last answer (-1: none yet)",
            github_rate_remaining.clone(),
        );
        let lease_held = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "previewd_lease_held",
            "1 while this replica holds the Lease and runs the reconciler, sweeper, resync and \
             feedback; 0 otherwise (always 1 without leases: one replica)",
            lease_held.clone(),
        );
        let lease_changes = Family::<LeaseLabels, Counter>::default();
        for change in ["acquired", "lost"] {
            let _ = lease_changes.get_or_create(&LeaseLabels { change });
        }
        registry.register(
            "previewd_lease_transitions",
            "Times this replica acquired or lost the Lease",
            lease_changes.clone(),
        );
        let sweep = histogram();
        registry.register(
            "previewd_sweep_seconds",
            "Time one sweep pass took",
            sweep.clone(),
        );
        Self {
            registry,
            deliveries,
            intake_latency,
            reconcile,
            reconcile_errors,
            passes,
            previews,
            teardown,
            stuck_teardowns,
            sweep,
            github_rate_remaining,
            lease_held,
            lease_changes,
            scraping: Mutex::new(()),
        }
    }
}

impl Metrics {
    /// One delivery. `event` is `None` until the signature verified: an unsigned header's
    /// value never becomes a label (every new value would be a new series), and a verified
    /// one only when it is an event previewd knows.
    pub fn delivery(&self, event: Option<&str>, outcome: DeliveryOutcome, latency: Duration) {
        self.deliveries
            .get_or_create(&DeliveryLabels {
                event: event_label(event),
                outcome: outcome.as_str(),
            })
            .inc();
        self.intake_latency.observe(latency.as_secs_f64());
    }

    /// `sink` is a sink kind's name (`Sink::kind`): a fixed set.
    pub fn reconciled(&self, sink: &'static str, took: Duration, failed: bool) {
        let labels = SinkLabels { sink };
        self.reconcile
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        // Present (at zero) from the first reconcile, so a rate over it has a start.
        let errors = self.reconcile_errors.get_or_create(&labels);
        if failed {
            errors.inc();
        }
    }

    /// `kind`: `full` or `resync` (`Reconciler::pass_changed`).
    pub fn passed(&self, kind: &'static str, took: Duration) {
        self.passes
            .get_or_create(&PassLabels { kind })
            .observe(took.as_secs_f64());
    }

    pub fn torn_down(&self, took: Duration) {
        self.teardown.observe(took.as_secs_f64());
    }

    pub fn stuck_teardown(&self) {
        self.stuck_teardowns.inc();
    }

    pub fn swept(&self, took: Duration) {
        self.sweep.observe(took.as_secs_f64());
    }

    pub fn github_rate_remaining(&self, remaining: i64) {
        self.github_rate_remaining.set(remaining);
    }

    /// Whether this replica holds the Lease now.
    pub fn lease_held(&self, held: bool) {
        self.lease_held.set(i64::from(held));
    }

    /// This replica acquired (`true`) or lost the Lease.
    pub fn lease_changed(&self, acquired: bool) {
        let change = if acquired { "acquired" } else { "lost" };
        self.lease_changes
            .get_or_create(&LeaseLabels { change })
            .inc();
    }

    /// The exposition text; `previews` are (state, cluster, count) read from the state now.
    pub fn render(&self, previews: &[(String, String, i64)]) -> String {
        let _one_scrape = self
            .scraping
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // States and clusters that are gone leave the gauge, not linger at their last count.
        self.previews.clear();
        for (state, cluster, n) in previews {
            self.previews
                .get_or_create(&PreviewLabels {
                    state: state.clone(),
                    cluster: cluster.clone(),
                })
                .set(*n);
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
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
            ),
            "{text}"
        );
        assert!(text.contains("previewd_deliveries_total{event=\"other\",outcome=\"ignored\"} 1"));
        assert!(text.contains("previewd_intake_seconds_bucket{le=\"0.005\"} 2"));
        assert!(text.contains("previewd_intake_seconds_bucket{le=\"+Inf\"} 3"));
        assert!(text.contains("previewd_previews{state=\"ready\",cluster=\"eu\\\"1\"} 2"));
        assert!(text.contains("previewd_github_rate_limit_remaining -1"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_state_no_preview_is_in_any_more_leaves_the_gauge() {
        let metrics = Metrics::default();
        metrics.render(&[("ready".into(), "eu".into(), 2)]);
        let text = metrics.render(&[("failed".into(), "eu".into(), 1)]);
        assert!(!text.contains("state=\"ready\""), "{text}");
        assert!(text.contains("previewd_previews{state=\"failed\",cluster=\"eu\"} 1"));
    }

    #[test]
    fn two_registries_count_apart() {
        let (one, other) = (Metrics::default(), Metrics::default());
        one.stuck_teardown();
        assert!(one.render(&[]).contains("previewd_stuck_teardowns_total 1"));
        assert!(
            other
                .render(&[])
                .contains("previewd_stuck_teardowns_total 0")
        );
    }
}

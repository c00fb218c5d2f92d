//! Who leads: one `coordination.k8s.io/v1` Lease, taken and renewed through kube-rs, moving
//! this replica's `Fence`. Modelled on client-go's leader election
//! (tools/leaderelection/leaderelection.go: `acquire`, `renew`, `tryAcquireOrRenew`,
//! `release`; resourcelock/leaselock.go: the record in the Lease's spec, written with
//! `Update`, which carries the `resourceVersion` read): every write names the version it
//! decided on, so of two replicas writing one record, one gets 409 and reads again.
//!
//! The acquire and renew loops are one here: every `retry_period` the Lease is read and
//! `decide` says what to do. A holder's fence is open until the send time of its last
//! successful write plus `renew_deadline`; past that, it has lost (logged, counted), whatever
//! its next read finds. On stop it releases the Lease (holder cleared, duration 1 s, as
//! client-go's `ReleaseOnCancel`), so that a rollout hands over at once.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tokio_util::sync::CancellationToken;

use crate::config::LeaseConfig;
use crate::fence::{Fence, Tenure};
use crate::metrics::Metrics;

mod decide;
pub use decide::{Record, Seen, Verdict, decide};

/// One replica's part in the election.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    tenure: Tenure,
    metrics: Arc<Metrics>,
    /// The Lease's `resourceVersion` as last read, and when this replica first read it.
    seen: Option<(String, Instant)>,
    /// Until when this replica may write (`None`: it does not lead).
    held_until: Option<Instant>,
}

/// What one look at the Lease came to.
enum Looked {
    /// Written as this replica's, the write sent at `sent`.
    Held { sent: Instant, won: bool },
    /// Another's (or a write lost to another's): look again after this long.
    Wait(Duration),
}

impl Elector {
    /// On the cluster of the ambient kubeconfig (or the in-cluster service account); the
    /// fence starts closed.
    pub async fn connect(
        config: &LeaseConfig,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<(Self, Fence)> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = kube::Client::try_default()
            .await
            .context("connecting to Kubernetes for the Lease")?;
        Ok(Self::new(
            client,
            config,
            identity(config.identity.as_deref()),
            metrics,
        ))
    }

    pub fn new(
        client: kube::Client,
        config: &LeaseConfig,
        identity: String,
        metrics: Arc<Metrics>,
    ) -> (Self, Fence) {
        let (tenure, fence) = Fence::closed();
        metrics.lease_held(false);
        let elector = Self {
            api: Api::namespaced(client, &config.namespace),
            name: config.name.clone(),
            identity,
            duration: config.duration,
            renew_deadline: config.renew_deadline,
            retry_period: config.retry_period,
            tenure,
            metrics,
            seen: None,
            held_until: None,
        };
        (elector, fence)
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Takes and renews the Lease until `stop`, then releases it if held. Call `stop` only
    /// once the work loops have stopped: they write under this fence until then.
    pub async fn run(mut self, stop: CancellationToken) {
        tracing::info!(lease = %self.name, identity = %self.identity, "standing for the Lease");
        loop {
            // Far off when not leading: the branch is disabled then anyway.
            let lapse = self
                .held_until
                .unwrap_or_else(|| Instant::now() + self.duration);
            let leading = self.held_until.is_some();
            let looked = tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = sleep_until(lapse), if leading => {
                    self.lose("not renewed within the renew deadline");
                    continue;
                }
                looked = timeout(self.renew_deadline, self.look()) => looked,
            };
            let wait = match looked {
                Ok(Ok(Looked::Held { sent, won })) => {
                    self.hold(sent + self.renew_deadline, won);
                    self.retry_period
                }
                Ok(Ok(Looked::Wait(wait))) => wait.min(self.retry_period),
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.name, error = %format!("{e:#}"), "reading or writing the Lease failed");
                    self.retry_period
                }
                Err(_) => {
                    tracing::warn!(lease = %self.name, "the Lease's API did not answer within the renew deadline");
                    self.retry_period
                }
            };
            let lapse = self.held_until.unwrap_or_else(|| Instant::now() + wait);
            let leading = self.held_until.is_some();
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = sleep_until(lapse), if leading => self.lose("not renewed within the renew deadline"),
                () = sleep(wait) => {}
            }
        }
        self.release().await;
    }

    /// One `tryAcquireOrRenew`: read, decide, write if the verdict says so.
    async fn look(&mut self) -> anyhow::Result<Looked> {
        let lease = self
            .api
            .get_opt(&self.name)
            .await
            .context("reading the Lease")?;
        let now = Instant::now();
        let Some(lease) = lease else {
            self.seen = None;
            return self.write(None, 0, true).await;
        };
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        let since = match &self.seen {
            Some((seen, since)) if *seen == version => *since,
            _ => now,
        };
        self.seen = Some((version, since));
        let record = record_of(lease.spec.as_ref());
        let seen = Some(Seen {
            record: &record,
            since,
        });
        match decide(
            seen,
            &self.identity,
            self.held_until.is_some(),
            now,
            self.duration,
        ) {
            Verdict::Create => self.write(None, 0, true).await,
            Verdict::Renew => self.write(Some(lease), record.transitions, false).await,
            Verdict::Acquire | Verdict::TakeOver => {
                let transitions = record.transitions.saturating_add(1);
                self.write(Some(lease), transitions, true).await
            }
            Verdict::Follow { recheck_in } => Ok(Looked::Wait(recheck_in)),
            Verdict::Lost { holder } => {
                self.lose(&format!("the Lease names {holder}"));
                Ok(Looked::Wait(self.retry_period))
            }
        }
    }

    /// Writes the Lease as this replica's: created, or replaced under the version read (a
    /// 409 means another replica wrote first: looked at again, never forced).
    async fn write(
        &mut self,
        lease: Option<Lease>,
        transitions: i32,
        acquiring: bool,
    ) -> anyhow::Result<Looked> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let acquired = match (&lease, acquiring) {
            (Some(lease), false) => lease.spec.as_ref().and_then(|s| s.acquire_time.clone()),
            _ => None,
        };
        let spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(seconds(self.duration)),
            acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        };
        // Taken just before the request: the fence runs from no later than the send.
        let sent = Instant::now();
        let written = match lease {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                lease.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                let version = lease.metadata.resource_version.unwrap_or_default();
                self.seen = Some((version, Instant::now()));
                Ok(Looked::Held {
                    sent,
                    won: acquiring,
                })
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Ok(Looked::Wait(self.retry_period))
            }
            Err(e) => Err(e).context("writing the Lease"),
        }
    }

    fn hold(&mut self, until: Instant, won: bool) {
        // Answered only after its own deadline: no time left to write under it.
        if until <= Instant::now() {
            return self.lose("the renew was answered after the renew deadline");
        }
        let was_leading = self.held_until.is_some();
        self.held_until = Some(until);
        self.tenure.hold_until(until);
        if !was_leading {
            self.metrics.lease_held(true);
            self.metrics.lease_changed(true);
            tracing::info!(lease = %self.name, identity = %self.identity, taken_over = won, "acquired the Lease: leading");
        }
    }

    fn lose(&mut self, why: &str) {
        if self.held_until.take().is_none() {
            return;
        }
        self.tenure.lapse();
        self.metrics.lease_held(false);
        self.metrics.lease_changed(false);
        tracing::warn!(lease = %self.name, identity = %self.identity, reason = why, "lost the Lease: stopped writing to the cluster and GitHub");
    }

    /// client-go's `release`: the holder cleared and the duration cut to 1 s, under the
    /// version read, so that the next replica takes it at its next look.
    async fn release(&mut self) {
        if self.held_until.is_none() {
            return;
        }
        self.tenure.lapse();
        self.held_until = None;
        self.metrics.lease_held(false);
        let released = timeout(self.renew_deadline, async {
            let Some(mut lease) = self.api.get_opt(&self.name).await? else {
                return Ok(false);
            };
            let spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(false);
            }
            let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
            lease.spec = Some(LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..spec
            });
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
                .map(|_| true)
        })
        .await;
        match released {
            Ok(Ok(true)) => {
                tracing::info!(lease = %self.name, identity = %self.identity, "released the Lease")
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(lease = %self.name, error = %e, "could not release the Lease; it expires instead")
            }
            Err(_) => {
                tracing::warn!(lease = %self.name, "releasing the Lease timed out; it expires instead")
            }
        }
    }
}

/// The election's view of a Lease's spec.
fn record_of(spec: Option<&LeaseSpec>) -> Record {
    let spec = spec.cloned().unwrap_or_default();
    Record {
        holder: spec.holder_identity.unwrap_or_default(),
        duration: Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64),
        transitions: spec.lease_transitions.unwrap_or(0),
    }
}

/// Whole seconds, as `leaseDurationSeconds` holds them (validation keeps them whole).
fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)
}

/// Who this replica says it is: `prefix` (default: the host's name, which in Kubernetes is the
/// pod's) and a random suffix, always, so that two processes never share one identity (one
/// stopped and one started on the same host would both think the Lease theirs).
pub fn identity(prefix: Option<&str>) -> String {
    let host = || {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .ok()
            .map(|name| name.trim().to_owned())
            .filter(|name| !name.is_empty())
    };
    let prefix = prefix
        .map(str::to_owned)
        .or_else(host)
        .unwrap_or_else(|| "previewd".into());
    format!("{prefix}_{:08x}", rand::random::<u32>())
}

//! previewd: one preview environment per GitHub pull request, delivered through Argo CD.
//!
//! One `pull_request` delivery, from the webhook to the sink, in order (each hop a call or
//! a named type; `serve` wired them together and is the only module that knows them all):
//!
//! 1. `server` — `POST /webhooks/github` runs the `server::delivery::Verified` extractor:
//!    body read under a byte budget and a deadline, signature checked in constant time
//!    (`webhook::verify`), payload parsed into a `webhook::Delivery`.
//! 2. `intent` — `intent::decide(&Delivery, &Config, now)` returns an `intent::Intent`: what
//!    this PR should now have (pure; no I/O).
//! 3. `intake` — `Intake::record(delivery, intent)` queues it for the one writer task, which
//!    group-commits a batch (`db::apply_pr_change`, the merge itself the pure
//!    `intent::merge`) and answers `intake::Recorded`; the handler answers GitHub with it.
//! 4. `work` — after the commit, the writer calls `work::Work::notify(PreviewKey)`; the
//!    reconciler holds the other end, `work::Pending` (sweeper, resync, commands and the
//!    API's destroy notify the same way).
//! 5. `reconcile` — `Reconciler::run` takes the key and `Reconciler::reconcile(id)` reads the
//!    `db::PreviewRow` (through `db::State`, the one handle to the state), renders both
//!    Applications with `render::preview` (a `render::Rendered`, pure), observes them through
//!    the sink (`reconcile/step.rs`), and asks `plan::step` (pure) for the whole `plan::Step`.
//! 6. `sink` — the reconciler carries the step out (`step.rs`): `Sink::apply` writes the
//!    helper Application (`sink/kubernetes.rs` to the Argo CD namespace, or a directory),
//!    records it in `db`, and requeues through `work::Later` while Argo CD syncs.
//!
//! GitHub hears of it afterwards, apart from the pass: the reconciler nudges `feedback`,
//! whose own task (`feedback/`: report, obey, look) posts the sticky comment and Deployment
//! status (`github`); `reconcile` never imports a GitHub module (`tests/architecture.rs`).
#![forbid(unsafe_code)]

pub mod ca;
pub mod checks;
pub mod cli;
pub mod clock;
pub mod clusters;
pub mod command;
pub mod comment;
pub mod config;
pub mod dashboard;
pub mod db;
pub mod duration;
pub mod feedback;
pub mod fence;
pub mod github;
pub mod intake;
pub mod intent;
pub mod lease;
pub mod ledger;
pub mod login;
pub mod metrics;
pub mod naming;
pub mod paths;
pub mod plan;
pub mod preview;
pub mod projects;
pub mod reconcile;
pub mod render;
pub mod requirements;
pub mod resync;
pub mod seal;
pub mod secrets;
pub mod seeds;
pub mod serve;
pub mod server;
pub mod sink;
pub mod sweep;
pub mod view;
pub mod webhook;
pub mod work;
pub mod yaml;

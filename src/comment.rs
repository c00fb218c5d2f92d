//! Every word previewd says on a pull request, as pure functions: the sticky status
//! comment, replies to commands, and the deployment descriptions. Snapshot-tested.

use crate::checks::Wait;
use crate::command::{Command, ParseError, ShaPrefix, ShareCap};
use crate::config::Access;
use crate::intent::OptOut;
use crate::preview::{Desired, EndReason, ObservedState, PreviewKey};

mod access;
mod gates;
mod replies;
use access::shared;
pub use access::way_in;
pub use gates::opted_out;
pub use replies::{Outcome, help, no_preview_status, reply};

/// Finds our sticky comment again (with the bot's login): GitHub keeps HTML comments hidden.
pub const MARKER: &str = "<!-- previewd:status -->";

/// What a preview looks like to a reviewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    Queued,
    AwaitingApproval,
    Draft,
    /// No preview wanted yet: the comment says how to get one.
    OptedOut,
    /// The helpers are provisioned; the image waits for `wait_for`.
    WaitingForCi,
    CiFailed,
    Deploying,
    /// Written to the directory sink, whose Applications nobody reports on: it stays so
    /// (locally nothing deploys them; an app-of-apps reading the directory does so out of
    /// previewd's sight). The kubernetes sink reports what Argo CD sees instead.
    Rendered,
    Ready,
    /// Asleep (idle, or `/preview sleep`): the next visit wakes it.
    Sleeping,
    Failed,
    TearingDown,
    Destroyed,
}

impl Shown {
    /// From the recorded intent and what the reconciler last saw.
    pub fn of(desired: Desired, observed: ObservedState) -> Self {
        match (desired, observed) {
            (Desired::Absent, _) => Self::TearingDown,
            (Desired::AwaitingApproval, _) => Self::AwaitingApproval,
            (Desired::Draft, _) => Self::Draft,
            (Desired::OptedOut, _) => Self::OptedOut,
            (Desired::Deployed, ObservedState::WaitingForCi) => Self::WaitingForCi,
            (Desired::Deployed, ObservedState::CiFailed) => Self::CiFailed,
            (Desired::Deployed, ObservedState::Queued) => Self::Queued,
            (Desired::Deployed, ObservedState::Ready) => Self::Ready,
            (Desired::Deployed, ObservedState::Sleeping) => Self::Sleeping,
            // Only the directory sink leaves a preview applied with nobody reporting.
            (Desired::Deployed, ObservedState::Applied) => Self::Rendered,
            (Desired::Deployed, ObservedState::Error | ObservedState::Failed) => Self::Failed,
            (Desired::Deployed, _) => Self::Deploying,
        }
    }

    fn headline(self) -> &'static str {
        match self {
            Self::Queued => "⏳ Queued: waiting for a cluster with room",
            Self::AwaitingApproval => "✋ Awaiting approval",
            Self::Draft => "📝 Draft: deploys when the PR is ready for review",
            Self::OptedOut => "💤 No preview for this PR",
            Self::WaitingForCi => "⏳ Waiting for CI to build the image",
            Self::CiFailed => "❌ CI failed: the image is not deployed",
            Self::Deploying => "🚧 Deploying",
            // On a PR the same as deploying, as far as previewd can tell: whatever reads its
            // directory (an app-of-apps) deploys it out of its sight.
            Self::Rendered => {
                "🚧 Deploying: rendered to previewd's directory, where previewd cannot see how it runs"
            }
            Self::Ready => "✅ Ready",
            Self::Sleeping => "😴 Sleeping: opening it wakes it",
            Self::Failed => "❌ Failed",
            Self::TearingDown => "🧹 Tearing down",
            Self::Destroyed => "🪦 Destroyed",
        }
    }

    /// The GitHub deployment status this state maps to (none before anything deploys).
    pub fn deployment_state(self) -> Option<&'static str> {
        match self {
            Self::Deploying | Self::Rendered => Some("in_progress"),
            Self::WaitingForCi => Some("queued"),
            // Its address still works: a visit wakes it.
            Self::Ready | Self::Sleeping => Some("success"),
            Self::Failed | Self::CiFailed => Some("failure"),
            Self::TearingDown | Self::Destroyed => Some("inactive"),
            Self::Queued | Self::AwaitingApproval | Self::Draft | Self::OptedOut => None,
        }
    }
}

/// Everything the status comment shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusView<'a> {
    pub shown: Shown,
    pub url: String,
    pub head_sha: &'a str,
    pub cluster: Option<&'a str>,
    pub expires_at: Option<i64>,
    pub keep: bool,
    /// Internal: only what kind of failure it is reaches the comment (`what_failed`).
    pub last_error: Option<&'a str>,
    /// This preview's page on previewd's dashboard (`public_url`), where the details are.
    pub dashboard: Option<String>,
    /// Why it ended (closed, merged, destroyed, expired), once it has.
    pub end_reason: Option<EndReason>,
    /// Place in the queue (1 = next), while queued.
    pub position: Option<i64>,
    /// Why there is no preview, and the label that asks for one (`Shown::OptedOut`).
    pub opt_out: Option<(OptOut, String)>,
    /// CI's verdict on the head and since when the preview waits for it (`wait_for`).
    pub ci: Option<(Wait, i64)>,
    /// Who may open the preview (the repository's `access`) and the repository (`owner/name`).
    pub access: Option<(Access, &'a str)>,
    /// The mail catcher's inbox, for a repository with `mail` (`render::services::inbox_url`).
    pub inbox: Option<String>,
    /// Asleep since then (`Shown::Sleeping`).
    pub sleeping_since: Option<i64>,
}

/// The sticky status comment's body.
pub fn status(view: &StatusView) -> String {
    let mut out = format!(
        "{MARKER}\n### Preview environment — {}\n\n",
        view.shown.headline()
    );
    let short = view.head_sha.get(..7).unwrap_or(view.head_sha);
    match view.shown {
        Shown::Destroyed => {
            out += &format!(
                "The preview of `{short}` is gone ({}): everything previewd provisioned was deleted.\n",
                view.end_reason.map_or("closed", EndReason::as_str)
            );
            out += "Push a commit or reopen the PR to get a new one.\n";
            return out;
        }
        Shown::OptedOut => {
            if let Some((why, label)) = &view.opt_out {
                out += &opted_out(*why, label);
                out += "\n";
            }
            return out;
        }
        Shown::AwaitingApproval => {
            // No ready-made command with the head's SHA: the head may move while a maintainer
            // reads, and copying the SHA from here would approve what they have not read.
            out += "This PR comes from a fork, so its code runs only after a maintainer approves it. \
                    A maintainer reviews the commit and comments `/preview approve` followed by its SHA \
                    (at least 7 hex digits; all 40 leave no room for a look-alike commit): only that \
                    commit deploys, and only while it is the head. Every new push needs a new approval.\n\n";
        }
        _ => {}
    }
    out += "| | |\n|---|---|\n";
    if matches!(
        view.shown,
        Shown::Ready | Shown::Sleeping | Shown::Deploying | Shown::Rendered | Shown::Failed
    ) {
        out += &format!("| URL | {} |\n", view.url);
        if let Some(since) = view
            .sleeping_since
            .filter(|_| view.shown == Shown::Sleeping)
        {
            out += &format!(
                "| Sleeping | since {}: its app stopped after a while without visits, its data kept; \
                 opening it (or `/preview wake`) starts it again within about a minute |\n",
                stamp(since)
            );
        }
        if let Some((rule, repo)) = view.access {
            out += &format!("| Access | {} |\n", way_in(rule, repo));
        }
        if let Some(inbox) = &view.inbox {
            out += &format!(
                "| Mail | [inbox]({inbox}): what the app sent, behind the same sign-in |\n"
            );
        }
    }
    if let Some(position) = view.position.filter(|_| view.shown == Shown::Queued) {
        out += &format!("| Queue | position {position} |\n");
    }
    out += &format!("| Commit | `{short}` |\n");
    if let Some(cluster) = view.cluster {
        out += &format!("| Cluster | `{}` |\n", escape(cluster));
    }
    if let Some(at) = view.expires_at.filter(|_| view.shown != Shown::TearingDown) {
        let pinned = if view.keep { " (kept)" } else { "" };
        // Absolute only: a relative time would change the body, and so edit the comment, every minute.
        out += &format!("| Expires | {}{pinned} |\n", stamp(at));
    }
    if let Some((wait, since)) = &view.ci {
        out += &gates::ci(wait, *since, short);
    }
    if let Some(error) = view.last_error.filter(|_| view.shown == Shown::Failed) {
        // The error's own text (hook output, hostnames, SQL) is for operators, not the PR.
        out += &format!("\n**What failed:** {}.", what_failed(error));
        out += &match &view.dashboard {
            Some(page) => format!(" The details are on [previewd's dashboard]({page}).\n"),
            None => " An operator sees the details with `previewd show`.\n".into(),
        };
        // Argo CD never retries a failed sync of the same rendering by itself.
        out += "\nA push retries with the new commit; a writer's `/preview redeploy` retries this one.\n";
    }
    if view.shown != Shown::TearingDown {
        out += "\nTo keep it longer comment `/preview extend 2d`; `/preview help` lists every command.\n";
    }
    out
}

/// A deployment status description (GitHub allows 140 characters).
pub fn deployment_description(shown: Shown, head_sha: &str) -> String {
    let short = head_sha.get(..7).unwrap_or(head_sha);
    match shown {
        Shown::Ready => format!("Preview of {short} is ready"),
        Shown::Sleeping => format!("Preview of {short} is asleep; opening it wakes it"),
        Shown::Failed => format!("Preview of {short} failed; see the PR comment"),
        Shown::WaitingForCi => format!("Waiting for CI to build {short}"),
        Shown::CiFailed => format!("CI failed on {short}; the image is not deployed"),
        Shown::TearingDown | Shown::Destroyed => format!("Preview of {short} destroyed"),
        _ => format!("Deploying {short}"),
    }
}

/// A deployment status naming the check that failed (GitHub allows 140 characters).
pub fn ci_failed_description(check: &str, head_sha: &str) -> String {
    let short = head_sha.get(..7).unwrap_or(head_sha);
    let text = format!("CI failed on {short}: {check}");
    text.chars().take(140).collect()
}

/// The one-off comment when a preview enters its warning window.
pub fn expiry_warning(author: &str, expires_at: i64, now: i64, kept: bool) -> String {
    if kept {
        return format!(
            "⏰ @{}: this preview reaches its maximum lifetime and will be torn down {}. \
             It cannot be kept longer; push a commit afterwards for a fresh one.",
            escape(author),
            when(expires_at, now)
        );
    }
    format!(
        "⏰ @{}: this preview will be torn down {}. To keep it, comment:\n\n```\n/preview extend 2d\n```",
        escape(author),
        when(expires_at, now)
    )
}

/// The one-off comment on a preview evicted to make room (`at_cap = "evict"`).
pub fn evicted(newcomer: &str) -> String {
    format!(
        "🧹 This preview was torn down to make room for {} (the repository is at its cap of \
         live previews, and this one was the least recently active). Push a commit to get it back.",
        escape(newcomer)
    )
}

/// `2026-12-01 14:00 UTC`.
pub fn stamp(at: i64) -> String {
    let date =
        time::OffsetDateTime::from_unix_timestamp(at).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{}-{:02}-{:02} {:02}:{:02} UTC",
        date.year(),
        u8::from(date.month()),
        date.day(),
        date.hour(),
        date.minute()
    )
}

/// `2026-12-01 14:00 UTC (in 2d 3h)`.
pub fn when(at: i64, now: i64) -> String {
    let stamp = stamp(at);
    let left = at - now;
    if left <= 0 {
        return format!("{stamp} (due now)");
    }
    format!("{stamp} (in {})", crate::duration::roughly(left as u64))
}

/// What failed, in words fit for a public PR: a fixed phrase chosen by the shape of the
/// error, never its text (hook output, hostnames, SQL and internal addresses stay on the
/// dashboard). The shapes are `sink::argocd::verdict`'s: `hook Kind/name failed: …`,
/// `resource Kind/name failed: …`, `<Condition>: …`, `Kind/name is degraded: …`; the hook
/// names are the helper chart's (`-migrate`, `-seed`, `-db-…`). The first failure decides.
pub fn what_failed(error: &str) -> &'static str {
    let first = error.split("; ").next().unwrap_or_default();
    if let Some(hook) = first.strip_prefix("hook ") {
        let name = hook.split(' ').next().unwrap_or_default();
        return if name.ends_with("-migrate") {
            "the migrations hook failed"
        } else if name.contains("-seed") {
            "the seed hook (loading the seed data) failed"
        } else if name.contains("-db-") {
            "the database setup hook failed"
        } else {
            "a sync hook failed"
        };
    }
    if first.starts_with("resource ") {
        return "Argo CD could not sync one of the preview's resources";
    }
    if first.starts_with("InvalidSpecError") {
        return "Argo CD refused the preview's Application";
    }
    if first.starts_with("ComparisonError") {
        return "Argo CD could not render the preview's manifests";
    }
    if first.contains(" is degraded") || first.contains("Application Degraded") {
        return "the preview deployed, but its app is unhealthy";
    }
    "the deployment failed"
}

/// Text from outside (logins, names) made inert in Markdown: no HTML, no mentions, no links.
pub fn escape(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .flat_map(|c| match c {
            '<' => "&lt;".chars().collect::<Vec<_>>(),
            '>' => "&gt;".chars().collect(),
            '&' => "&amp;".chars().collect(),
            '|' | '*' | '_' | '[' | ']' | '`' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect()
}

#[cfg(test)]
mod tests;

//! Every word previewd says on a pull request, as pure functions: the sticky status
//! comment, replies to commands, and the deployment descriptions. Snapshot-tested.

use crate::checks::Wait;
use crate::command::{Command, ParseError, ShaPrefix, ShareCap};
use crate::config::Access;
use crate::intent::OptOut;
use crate::preview::{Desired, EndReason, ObservedState, PreviewKey};

mod access;
mod gates;
use access::shared;
pub use access::way_in;
pub use gates::opted_out;

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

/// `/preview status` on a PR previewd has no preview for.
pub fn no_preview_status() -> String {
    "previewd has no preview for this pull request. A push (or closing and reopening the PR) starts one.".into()
}

/// `/preview help`.
pub fn help() -> String {
    "previewd commands (comment them on the PR):\n\n\
     | command | does |\n|---|---|\n\
     | `/preview status` | shows where the preview stands |\n\
     | `/preview extend 2d` | keeps it longer (durations like `36h`, `2d`, `1w`; up to the maximum lifetime) |\n\
     | `/preview destroy` | tears it down now |\n\
     | `/preview deploy` | deploys it: a draft, a PR the repository leaves out (label, paths, authors), a commit whose CI failed |\n\
     | `/preview redeploy` | applies it again and asks Argo CD to refresh |\n\
     | `/preview reseed` | loads the seed data again (with a template database: clones it again) |\n\
     | `/preview sleep` / `wake` | stops its app now, keeping its data / starts it again (opening the preview wakes it too) |\n\
     | `/preview refresh-template` | rebuilds the repository's template database from the default branch now |\n\
     | `/preview keep` / `unkeep` | pins it against expiry (up to the maximum lifetime) |\n\
     | `/preview approve <sha>` | fork PRs: deploys exactly that commit, if it is the head |\n\
     | `/preview share 24h` | makes a share link for someone without access (default `24h`, at most `7d` and never past the preview's expiry); the link is never posted here, a writer gets it from previewd's API |\n\
     | `/preview unshare` | revokes every share link of the preview |\n\
     | `/preview help` | this list |\n\n\
     The PR's author may run `status`, `extend`, `destroy`, `sleep` and `wake`; everything else needs write access."
        .into()
}

/// How a command ended, in the words its reply uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<'a> {
    Help,
    Status(String),
    Extended {
        until: i64,
        capped: bool,
        now: i64,
    },
    Destroying,
    AlreadyGone,
    Deploying,
    Redeploying,
    Reseeding,
    /// Put to sleep; asleep already; woken; awake already.
    Sleeping,
    AlreadyAsleep,
    Waking,
    AlreadyAwake,
    RefreshingTemplate,
    /// `refresh-template` in a repository without `database_template`.
    NoTemplate,
    /// `refresh-template` before any commit of the default branch is known.
    NoTemplateBase,
    Kept {
        until: i64,
        now: i64,
    },
    Unkept,
    KeepNotAllowed,
    Approved {
        sha: &'a str,
    },
    /// A fork's approval (or deploy) that names no commit: nothing is approved.
    ApprovalNeedsCommit {
        head: &'a str,
    },
    /// The named commit is not the head (a push landed, or a typo): nothing is approved.
    NotTheHead {
        named: ShaPrefix,
        head: &'a str,
    },
    NotAFork,
    ChangedSinceApproval,
    /// A share link was made, lasting until `until` (`cap` says what shortened it). Where a
    /// writer gets it: previewd's API, under `public_url` when one is set.
    Shared {
        until: i64,
        now: i64,
        cap: Option<ShareCap>,
        preview: &'a PreviewKey,
        public_url: Option<&'a str>,
    },
    /// The preview already has `max` valid share links: none was made.
    TooManyShares {
        max: i64,
    },
    /// The preview is due to end now: a link would not outlive it, so none was made.
    ShareExpiring,
    /// This many valid share links were revoked.
    Unshared {
        revoked: u64,
    },
    NoPreview,
    /// Parsed, but refused (who, and what they would need).
    Refused {
        actor: &'a str,
        command: Command,
    },
    Invalid(ParseError),
}

impl Outcome<'_> {
    /// Whether the command changed or showed something (a rocket), rather than being
    /// turned away for a reason (confused).
    pub fn did_something(&self) -> bool {
        !matches!(
            self,
            Self::AlreadyGone
                | Self::NotAFork
                | Self::ApprovalNeedsCommit { .. }
                | Self::NotTheHead { .. }
                | Self::ChangedSinceApproval
                | Self::NoPreview
                | Self::KeepNotAllowed
                | Self::NoTemplate
                | Self::NoTemplateBase
                | Self::TooManyShares { .. }
                | Self::ShareExpiring
                | Self::Refused { .. }
                | Self::Invalid(_)
        )
    }
}

/// The reply to a command: one short paragraph.
pub fn reply(outcome: &Outcome, actor: &str) -> String {
    let at = |actor: &str| format!("@{}", escape(actor));
    match outcome {
        Outcome::Help => help(),
        Outcome::Status(text) => text.replace(MARKER, "").trim_start().to_owned(),
        Outcome::Extended { until, capped, now } => format!(
            "{}: extended; the preview now expires {}.{}",
            at(actor),
            when(*until, *now),
            if *capped {
                " That is the maximum lifetime, so it cannot be extended further."
            } else {
                ""
            }
        ),
        Outcome::Destroying => format!("{}: tearing the preview down now.", at(actor)),
        Outcome::AlreadyGone => format!("{}: there is no preview to destroy.", at(actor)),
        Outcome::Sleeping => format!(
            "{}: the preview goes to sleep: its app stops, its data stays. Opening it (or \
             `/preview wake`) wakes it.",
            at(actor)
        ),
        Outcome::AlreadyAsleep => format!("{}: the preview is asleep already.", at(actor)),
        Outcome::Waking => format!(
            "{}: the preview is waking up; it serves again once its app is ready.",
            at(actor)
        ),
        Outcome::AlreadyAwake => format!("{}: the preview is awake.", at(actor)),
        Outcome::Deploying => format!("{}: deploying.", at(actor)),
        Outcome::Redeploying => format!(
            "{}: applying it again and asking Argo CD for a hard refresh.",
            at(actor)
        ),
        Outcome::Reseeding => format!(
            "{}: the seed data will be loaded again on the next sync.",
            at(actor)
        ),
        Outcome::RefreshingTemplate => format!(
            "{}: building the next generation of this repository's template database from the default branch; new previews and reseeds clone it once it is ready.",
            at(actor)
        ),
        Outcome::NoTemplateBase => format!(
            "{}: no commit of the default branch is known yet; the next push to it, or the next PR into it, builds the template.",
            at(actor)
        ),
        Outcome::NoTemplate => format!(
            "{}: this repository keeps no template database (`database_template`).",
            at(actor)
        ),
        Outcome::Kept { until, now } => format!(
            "{}: kept — it will not expire before {}.",
            at(actor),
            when(*until, *now)
        ),
        Outcome::KeepNotAllowed => format!(
            "{}: this repository does not allow keeping previews; `/preview extend` works up to the maximum lifetime.",
            at(actor)
        ),
        Outcome::Unkept => format!(
            "{}: no longer kept; it expires on its usual schedule.",
            at(actor)
        ),
        Outcome::Approved { sha } => format!(
            "{}: approved `{}`. Deploying exactly that commit; a new push needs a new approval.",
            at(actor),
            sha.get(..7).unwrap_or(sha)
        ),
        Outcome::ApprovalNeedsCommit { head } => format!(
            "{}: this PR comes from a fork, so a maintainer approves exactly the commit they reviewed: \
             `/preview approve <sha>` with at least 7 hex digits of its SHA. Nothing was approved. \
             The head is now `{}`.",
            at(actor),
            escape(head)
        ),
        Outcome::NotTheHead { named, head } => format!(
            "{}: `{}` is not the head of this PR, so nothing was approved (a push may have landed \
             since you looked). The head is now `{}`: review it, then approve it by its SHA.",
            at(actor),
            named.as_str(),
            escape(head)
        ),
        Outcome::NotAFork => format!(
            "{}: this PR is not from a fork, so it needs no approval.",
            at(actor)
        ),
        Outcome::ChangedSinceApproval => format!(
            "{}: the PR received a push after your comment, so this approval would cover code you have not seen. Review the new commit and approve again.",
            at(actor)
        ),
        Outcome::Shared {
            until,
            now,
            cap,
            preview,
            public_url,
        } => shared(&at(actor), *until, *now, *cap, preview, *public_url),
        Outcome::TooManyShares { max } => format!(
            "{}: this preview already has {max} valid share links, the most it may have, so none was made. \
             `/preview unshare` revokes them all.",
            at(actor)
        ),
        Outcome::ShareExpiring => format!(
            "{}: this preview is due to be torn down now, so a share link would not outlive it and none was made. \
             Extend it first (`/preview extend 1d`), then share it.",
            at(actor)
        ),
        Outcome::Unshared { revoked: 0 } => format!(
            "{}: this preview had no valid share link; nothing was revoked.",
            at(actor)
        ),
        Outcome::Unshared { revoked: 1 } => format!(
            "{}: revoked 1 share link. It no longer opens the preview, and a browser that entered with it is asked to sign in.",
            at(actor)
        ),
        Outcome::Unshared { revoked } => format!(
            "{}: revoked {revoked} share links. They no longer open the preview, and browsers that entered with them are asked to sign in.",
            at(actor)
        ),
        Outcome::NoPreview => format!(
            "{}: previewd has no preview for this PR. Push a commit (or close and reopen the PR) to start one.",
            at(actor)
        ),
        Outcome::Refused {
            actor: who,
            command,
        } => format!(
            "Sorry {}, `{}` needs write access to this repository{}.",
            at(who),
            verb(*command),
            if matches!(command, Command::Extend(_) | Command::Destroy) {
                " (or being the author of a PR that is not from a fork)"
            } else {
                ""
            }
        ),
        Outcome::Invalid(error) => {
            let error = error.to_string();
            let stop = if error.ends_with('?') { "" } else { "." };
            format!(
                "{}: {error}{stop} Comment `/preview help` for the list of commands.",
                at(actor)
            )
        }
    }
}

fn verb(command: Command) -> &'static str {
    match command {
        Command::Help => "help",
        Command::Status => "status",
        Command::Deploy => "deploy",
        Command::Redeploy => "redeploy",
        Command::Destroy => "destroy",
        Command::Extend(_) => "extend",
        Command::Keep => "keep",
        Command::Unkeep => "unkeep",
        Command::Reseed => "reseed",
        Command::RefreshTemplate => "refresh-template",
        Command::Approve(_) => "approve",
        Command::Share(_) => "share",
        Command::Unshare => "unshare",
        Command::Sleep => "sleep",
        Command::Wake => "wake",
    }
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

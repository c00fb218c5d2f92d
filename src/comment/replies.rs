//! What previewd answers a `/preview` command: the reply, and `help`.

use super::*;

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

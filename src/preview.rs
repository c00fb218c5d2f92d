//! The preview model: the newtypes that name a preview and the states it moves through.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

mod stored;
pub use stored::{CommandStatus, EndReason, GenState, HistoryKind, LedgerState, UnknownText};

/// A GitHub App installation, as the state holds its number: which credentials act on a
/// repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct InstallationId(pub i64);

impl InstallationId {
    /// The id GitHub's calls take; `None` for a number no installation has (a stored value
    /// out of range names none, and must not keep the row from being read).
    pub fn for_github(self) -> Option<u64> {
        u64::try_from(self.0).ok()
    }
}

/// `owner/name` of a GitHub repository, lower-cased: GitHub names are case-insensitive,
/// and a preview must not be duplicated because a payload spelled its repo differently.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RepoName(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a repository name; expected owner/name (letters, digits, '-', '_', '.')")]
pub struct BadRepoName(pub String);

impl RepoName {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn owner(&self) -> &str {
        self.0.split_once('/').map_or("", |(owner, _)| owner)
    }

    pub fn name(&self) -> &str {
        self.0.split_once('/').map_or("", |(_, name)| name)
    }
}

impl FromStr for RepoName {
    type Err = BadRepoName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let valid_part = |part: &str| {
            !part.is_empty()
                && part.len() <= 100
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        };
        match s.split_once('/') {
            Some((owner, name)) if valid_part(owner) && valid_part(name) => {
                Ok(Self(s.to_ascii_lowercase()))
            }
            _ => Err(BadRepoName(s.to_owned())),
        }
    }
}

impl TryFrom<String> for RepoName {
    type Error = BadRepoName;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<RepoName> for String {
    fn from(r: RepoName) -> Self {
        r.0
    }
}

impl fmt::Display for RepoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// GitHub allows 100 labels on an issue or PR: previewd reads no more.
pub const MAX_LABELS: usize = 100;

/// One preview per pull request: `owner/repo#number`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PreviewKey {
    pub repo: RepoName,
    pub number: u32,
}

impl PreviewKey {
    pub fn new(repo: RepoName, number: u32) -> Self {
        Self { repo, number }
    }
}

impl fmt::Display for PreviewKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.repo, self.number)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} does not name a preview; expected OWNER/REPO#NUMBER")]
pub struct BadPreviewKey(pub String);

impl FromStr for PreviewKey {
    type Err = BadPreviewKey;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadPreviewKey(s.to_owned());
        let (repo, number) = s.split_once('#').ok_or_else(bad)?;
        let number = number.parse().ok().filter(|n| *n > 0).ok_or_else(bad)?;
        Ok(Self::new(repo.parse().map_err(|_| bad())?, number))
    }
}

/// A full 40-hex commit SHA (64 for SHA-256 repositories), lower-case.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Sha(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a commit SHA")]
pub struct BadSha(pub String);

impl Sha {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn short(&self) -> &str {
        &self.0[..7]
    }
}

impl FromStr for Sha {
    type Err = BadSha;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Self(s.to_ascii_lowercase()))
        } else {
            Err(BadSha(s.to_owned()))
        }
    }
}

impl TryFrom<String> for Sha {
    type Error = BadSha;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Sha> for String {
    fn from(s: Sha) -> Self {
        s.0
    }
}

impl fmt::Display for Sha {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What previewd wants for a pull request (the `desired` column). Only `Deployed` puts
/// anything on a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "TEXT", rename_all = "snake_case")]
pub enum Desired {
    Deployed,
    /// A fork PR: nothing runs until an authorised user approves its head SHA.
    AwaitingApproval,
    /// A draft PR, while drafts are not deployed.
    Draft,
    /// No preview until the PR opts in (`trigger`, `paths`, `ignore_authors`); tracked so its
    /// sticky comment can say how.
    OptedOut,
    Absent,
}

impl Desired {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deployed => "deployed",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Draft => "draft",
            Self::OptedOut => "opted_out",
            Self::Absent => "absent",
        }
    }
}

impl fmt::Display for Desired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the reconciler last saw of a preview (the `observed` column); stored as the
/// snake_case names, so the values written before this type existed read back unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "TEXT", rename_all = "snake_case")]
pub enum ObservedState {
    /// Recorded, not reconciled yet.
    Pending,
    /// Waiting for a cluster with room.
    Queued,
    /// Written to the sink; nobody reports health (a directory), or not looked at since.
    Applied,
    /// Argo CD is syncing (or has not looked at) what previewd applied.
    Syncing,
    Ready,
    /// Asleep and settled: its app runs no pod until a request or `/preview wake` wakes it.
    Sleeping,
    /// Argo CD reports a failure (or the name is another's): `last_error` says what.
    Failed,
    /// previewd could not do its step (the sink, the state): retried.
    Error,
    /// A fork PR's head that no one approved: what runs stays as it was.
    AwaitingApproval,
    /// A draft, while drafts are not deployed: what runs stays as it was.
    Draft,
    /// No preview wanted yet: the sticky comment says how to get one.
    OptedOut,
    /// What needs no image is applied; the PR's image waits for `wait_for` on the head.
    WaitingForCi,
    /// A check `wait_for` names failed on the head (`last_error` names it, with its link).
    CiFailed,
    TearingDown,
    /// A teardown waiting past `sink.stuck_after` (reported once, never forced).
    TeardownStuck,
}

impl ObservedState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Queued => "queued",
            Self::Applied => "applied",
            Self::Syncing => "syncing",
            Self::Ready => "ready",
            Self::Sleeping => "sleeping",
            Self::Failed => "failed",
            Self::Error => "error",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Draft => "draft",
            Self::OptedOut => "opted_out",
            Self::WaitingForCi => "waiting_for_ci",
            Self::CiFailed => "ci_failed",
            Self::TearingDown => "tearing_down",
            Self::TeardownStuck => "teardown_stuck",
        }
    }
}

impl fmt::Display for ObservedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What rendering needs to know of one preview: the PR as last recorded, and where it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preview {
    pub key: PreviewKey,
    pub head_sha: Sha,
    pub author: String,
    pub title: String,
    pub fork: bool,
    /// Fork PRs: the head SHA a maintainer approved (the only one that may deploy).
    pub approved_sha: Option<Sha>,
    pub cluster: String,
    /// Bumped by `/preview reseed`: a database not seeded at this generation is seeded again.
    pub seed_generation: u32,
    /// Bumped by `/preview redeploy`: the Application is applied again, with a hard refresh.
    pub redeploy_generation: u32,
    /// CI built the PR's image (`wait_for`): until then nothing that runs it is rendered
    /// (migrations, seed, the app), only what needs no image.
    pub image_ready: bool,
    /// The template generation its database is cloned from (`database_template`); `None`:
    /// created empty and seeded.
    pub template: Option<CloneSource>,
    /// Put to sleep: rendered with its app at zero replicas (`render::sleep`).
    pub asleep: bool,
}

/// A template generation's database and the role that owns what is in it (#16).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloneSource {
    pub database: String,
    pub role: String,
}

impl Preview {
    /// A same-repository PR, for tests: `Preview::test().fork().at_sha("…")`.
    pub fn test() -> Self {
        Self {
            key: PreviewKey::new("octo/app".parse().expect("valid"), 7),
            head_sha: "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
                .parse()
                .expect("valid"),
            author: "alice".into(),
            title: "Add search".into(),
            fork: false,
            approved_sha: None,
            cluster: "in-cluster".into(),
            seed_generation: 1,
            redeploy_generation: 0,
            image_ready: true,
            template: None,
            asleep: false,
        }
    }

    /// Cloned from `database` (owned by a role of the same name).
    pub fn cloned_from(mut self, database: &str) -> Self {
        self.template = Some(CloneSource {
            database: database.into(),
            role: database.into(),
        });
        self
    }

    /// Put to sleep (`render::sleep`).
    pub fn asleep(mut self) -> Self {
        self.asleep = true;
        self
    }

    pub fn fork(mut self) -> Self {
        self.fork = true;
        self
    }

    /// Approves the current head SHA.
    pub fn approved(mut self) -> Self {
        self.approved_sha = Some(self.head_sha.clone());
        self
    }

    pub fn at_sha(mut self, sha: &str) -> Self {
        self.head_sha = sha.parse().expect("a full SHA");
        self
    }

    pub fn of(mut self, key: &str) -> Self {
        self.key = key.parse().expect("OWNER/REPO#N");
        self
    }

    pub fn titled(mut self, title: &str) -> Self {
        self.title = title.into();
        self
    }

    /// While CI has not built the image.
    pub fn before_ci(mut self) -> Self {
        self.image_ready = false;
        self
    }

    pub fn on(mut self, cluster: &str) -> Self {
        self.cluster = cluster.into();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_names_are_lower_cased_and_validated() {
        let repo: RepoName = "Codertocat/Hello-World".parse().unwrap();
        assert_eq!(repo.as_str(), "codertocat/hello-world");
        assert_eq!((repo.owner(), repo.name()), ("codertocat", "hello-world"));
        for bad in [
            "",
            "owner",
            "/name",
            "owner/",
            "a/b/c",
            "own er/x",
            "o/<script>",
        ] {
            assert!(bad.parse::<RepoName>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn preview_keys_round_trip() {
        let key: PreviewKey = "Octo/App#42".parse().unwrap();
        assert_eq!(key.to_string(), "octo/app#42");
        for bad in [
            "octo/app",
            "octo/app#",
            "octo/app#0",
            "octo/app#-1",
            "octo#3",
        ] {
            assert!(bad.parse::<PreviewKey>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn shas_must_be_full_hex() {
        let sha: Sha = "EC26C3E57CA3A959CA5AAD62DE7213C562F8C821".parse().unwrap();
        assert_eq!(sha.short(), "ec26c3e");
        assert!("ec26c3e".parse::<Sha>().is_err());
        assert!(
            "zz26c3e57ca3a959ca5aad62de7213c562f8c821"
                .parse::<Sha>()
                .is_err()
        );
    }
}

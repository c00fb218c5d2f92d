//! What previewd asks GitHub: pull requests, comments and reactions, a user's permission
//! (cached briefly), deployments and their statuses.

use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use super::transport::{Fetched, MAX_PAGES, PAGE};
use super::wire::{CollaboratorPermission, Comment, Id, Pull, encode, read, shape};
use super::{CommentInfo, GitHub, GitHubError, Permission, PullInfo};
use crate::preview::RepoName;

/// How long a permission answer is trusted.
const PERMISSION_TTL: Duration = Duration::from_secs(60);
/// At most this many answers are kept (the oldest go first).
const PERMISSION_CACHE: usize = 1024;
/// At most this many listing pages are kept with their `ETag`s (100 repositories of up to
/// 100 open PRs are 100 pages).
pub(super) const LISTINGS: usize = 1024;

impl GitHub {
    pub async fn pull(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        number: u32,
    ) -> Result<PullInfo, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/pulls/{number}");
        let pull: Pull = self.get(&client, &path).await?;
        Ok(pull.into())
    }

    /// Every open PR; any failed page fails the whole listing (a partial one must not be
    /// mistaken for "these are all"). Each page is asked for with the `ETag` of its last
    /// answer: a page GitHub says is unchanged (304) is the one kept, at no rate-limit cost.
    pub async fn open_pulls(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
    ) -> Result<Vec<PullInfo>, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/pulls?state=open");
        let mut all = Vec::new();
        for page in 1..=MAX_PAGES {
            let url = format!("{path}&per_page={PAGE}&page={page}");
            let kept = self.kept_listing(&url);
            let etag = kept.as_ref().map(|(etag, _)| etag.as_str());
            let found = match self.get_conditional(&client, &url, etag).await? {
                Fetched::NotModified => kept.map(|(_, pulls)| pulls).unwrap_or_default(),
                Fetched::Fresh { value, etag } => {
                    let Value::Array(items) = value else {
                        return Err(shape(&path, "not a list"));
                    };
                    let pulls = items
                        .into_iter()
                        .map(|p| Ok(read::<Pull>(&path, p)?.into()))
                        .collect::<Result<Vec<PullInfo>, GitHubError>>()?;
                    if let Some(etag) = etag {
                        self.keep_listing(url, etag, pulls.clone());
                    }
                    pulls
                }
            };
            let last = found.len() < PAGE;
            all.extend(found);
            if last {
                break;
            }
        }
        Ok(all)
    }

    fn kept_listing(&self, url: &str) -> Option<(String, Vec<PullInfo>)> {
        self.listings.lock().ok()?.get(url).cloned()
    }

    fn keep_listing(&self, url: String, etag: String, pulls: Vec<PullInfo>) {
        if let Ok(mut listings) = self.listings.lock() {
            if listings.len() >= LISTINGS && !listings.contains_key(&url) {
                listings.clear();
            }
            listings.insert(url, (etag, pulls));
        }
    }

    pub async fn comments(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        number: u32,
    ) -> Result<Vec<CommentInfo>, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/issues/{number}/comments");
        let comments = self.all_pages(&client, &path).await?;
        // A comment GitHub sends oddly (no author) is passed over, not the whole list.
        Ok(comments
            .into_iter()
            .filter_map(|c| serde_json::from_value::<Comment>(c).ok())
            .map(CommentInfo::from)
            .collect())
    }

    /// Not retried on a 5xx or a dropped connection: GitHub may have created it. The caller
    /// looks before it posts again.
    pub async fn create_comment(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        number: u32,
        body: &str,
    ) -> Result<u64, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/issues/{number}/comments");
        let created = self
            .call(&client, Method::POST, &path, Some(&json!({"body": body})))
            .await?;
        Ok(read::<Id>(&path, created)?.id)
    }

    pub async fn update_comment(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        id: u64,
        body: &str,
    ) -> Result<(), GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/issues/comments/{id}");
        self.call(&client, Method::PATCH, &path, Some(&json!({"body": body})))
            .await
            .map(drop)
    }

    /// `content`: `eyes`, `rocket`, `confused`, ... GitHub answers 200 for a reaction that
    /// exists, so this one is safe to resend.
    pub async fn react(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        comment_id: u64,
        content: &str,
    ) -> Result<(), GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/issues/comments/{comment_id}/reactions");
        let body = json!({"content": content});
        self.call_idempotent(&client, Method::POST, &path, Some(&body))
            .await
            .map(drop)
    }

    /// octocrab's typed call cannot read `write`/`read`/`none` (its enum lacks them), so
    /// the answer is read here. Cached for `PERMISSION_TTL`.
    pub async fn permission(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        login: &str,
    ) -> Result<Permission, GitHubError> {
        let key = (repo.to_string(), login.to_ascii_lowercase());
        let cached = self
            .permissions
            .lock()
            .expect("permissions")
            .get(&key)
            .copied();
        if let Some((at, permission)) = cached.filter(|(at, _)| at.elapsed() < PERMISSION_TTL) {
            tracing::debug!(?permission, age = ?at.elapsed(), "permission from the cache");
            return Ok(permission);
        }
        let permission = self.ask_permission(repo, installation, login).await?;
        let mut cache = self.permissions.lock().expect("permissions");
        if cache.len() >= PERMISSION_CACHE {
            cache.retain(|_, (at, _)| at.elapsed() < PERMISSION_TTL);
            if cache.len() >= PERMISSION_CACHE {
                let oldest = cache
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    cache.remove(&oldest);
                }
            }
        }
        cache.insert(key, (std::time::Instant::now(), permission));
        Ok(permission)
    }

    /// The permission as GitHub says it now, past the cache: the login keeps answers of its
    /// own for `login.access_cache`, and a person removed at GitHub must be out within it.
    pub async fn permission_now(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        login: &str,
    ) -> Result<Permission, GitHubError> {
        self.ask_permission(repo, installation, login).await
    }

    async fn ask_permission(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        login: &str,
    ) -> Result<Permission, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/collaborators/{login}/permission");
        let answer: CollaboratorPermission = match self.get(&client, &path).await {
            Err(e) if e.is_not_found() => return Ok(Permission::None),
            other => other?,
        };
        Ok(match answer.permission.as_deref() {
            Some("admin") => Permission::Admin,
            Some("write" | "maintain") => Permission::Write,
            Some("read" | "triage") => Permission::Read,
            _ => Permission::None,
        })
    }

    /// Whether `login` is a member of `org` (`GET /orgs/{org}/members/{username}`: 204 a
    /// member, 404 not, or not visible to previewd's installation of `repo`).
    pub async fn org_member(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        org: &str,
        login: &str,
    ) -> Result<bool, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/orgs/{org}/members/{login}");
        match self.call(&client, Method::GET, &path, None).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            // GitHub answers a requester outside the organisation with a 302 to the public
            // membership; octocrab does not follow it.
            Err(GitHubError::Status { status: 302, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deployments of `sha` to `environment`, newest first.
    pub async fn deployments(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        sha: &str,
        environment: &str,
    ) -> Result<Vec<u64>, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!(
            "/repos/{repo}/deployments?sha={sha}&environment={}",
            encode(environment)
        );
        let found: Vec<Id> = self.get(&client, &path).await?;
        Ok(found.into_iter().map(|d| d.id).collect())
    }

    /// A transient, non-production deployment of `sha` that never merges and waits for no
    /// status checks. Not retried blindly: the caller looks it up before creating again.
    pub async fn create_deployment(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        sha: &str,
        environment: &str,
        description: &str,
    ) -> Result<u64, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/deployments");
        let body = json!({
            "ref": sha,
            "environment": environment,
            "description": description,
            "auto_merge": false,
            "required_contexts": [],
            "transient_environment": true,
            "production_environment": false,
            "payload": {"previewd": true},
        });
        let created = self.call(&client, Method::POST, &path, Some(&body)).await?;
        serde_json::from_value::<Id>(created)
            .map(|d| d.id)
            .map_err(|_| shape(&path, "no deployment id (GitHub merged instead?)"))
    }

    /// `state`: `in_progress`, `success`, `failure`, `inactive`, ...; `log_url`: where the
    /// preview's details are (its dashboard page), GitHub's "View logs" link.
    #[allow(clippy::too_many_arguments)]
    pub async fn deployment_status(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        deployment: u64,
        state: &str,
        url: Option<&str>,
        log_url: Option<&str>,
        description: &str,
    ) -> Result<(), GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/deployments/{deployment}/statuses");
        let description: String = description.chars().take(140).collect();
        let mut body = json!({"state": state, "description": description, "auto_inactive": false});
        if let Some(url) = url {
            body["environment_url"] = json!(url);
        }
        if let Some(log_url) = log_url {
            body["log_url"] = json!(log_url);
        }
        // A repeated status changes nothing GitHub shows, so it may be resent.
        self.call_idempotent(&client, Method::POST, &path, Some(&body))
            .await
            .map(drop)
    }
}

//! Kubernetes and DNS names for a preview, derived from the repository and PR number only
//! (never the branch), so a rename or a force-push never deletes and recreates anything.
//! A preview's names are computed once, when it is created, and recorded with it: a change of
//! this rule or of the domain never renames (and so re-creates) a live preview.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::preview::{PreviewKey, RepoName};

/// Longest slug: CloudNativePG refuses a Cluster name over 50 characters
/// (cloudnative-pg internal/webhook/v1/cluster_webhook.go, validateName) and the chart's is
/// `<slug>-db`; the longest suffix the chart adds (`-seed-runner`) still fits a 63-character
/// label, and Helm's 53-character release name takes the slug itself.
pub const MAX_SLUG: usize = 47;

/// The longest slug before names were recorded (`Names::legacy`).
const LEGACY_MAX_SLUG: usize = 40;

/// Every preview namespace starts with this: a prefix previewd owns, so that the AppProjects'
/// and admission's globs match previews and nothing else (`*-pr-*` also matched `api-pr-x`).
pub const PREFIX: &str = "pv-";

/// Bytes of SHA-256 in a name: 64 bits. A 24-bit hash was collided in 34 s of Python
/// (`acme/payments-service-backend-1ab3d84` vs `acme/payments-service-backend`), which let
/// one repository's PR overwrite and delete another's preview.
const HASH_BYTES: usize = 8;

/// Every name one preview uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Names {
    /// `pv-owner-repo-<16 hex>-pr-7`: the namespace, the Helm release, and the prefix of
    /// every object. The hash of the full repository name keeps `acme-corp/web` and
    /// `acme/corp-web` (and `my_app` and `my-app`) apart.
    pub slug: String,
    /// The helper Application in Argo CD's namespace.
    pub application: String,
    /// The app's own Application (when its repository configures a chart).
    pub app_application: String,
    /// `<slug>.<domain>`
    pub host: String,
    /// PostgreSQL database and role name (`pv_owner_repo_<16 hex>_pr_7`).
    pub database: String,
    /// The repository as a label value (`owner.repo`), exact unless hashed.
    pub repo_label: String,
}

impl Names {
    /// The mail catcher's Deployment and Service in the preview namespace.
    pub fn mail_service(&self) -> String {
        format!("{}-mail", self.slug)
    }

    /// The names a preview created now gets.
    pub fn of(key: &PreviewKey, domain: &str) -> Self {
        let suffix = format!("-{}-pr-{}", hash(key.repo.as_str()), key.number);
        let repo = format!("{}-{}", key.repo.owner(), key.repo.name());
        let room = MAX_SLUG - PREFIX.len() - suffix.len();
        let slug = format!("{PREFIX}{}{suffix}", slug_part(&repo, room));
        Self::from_slug(slug, &key.repo, domain)
    }

    /// The names of generation `generation` of `repo`'s template database (#16): its
    /// namespace, Helm release and Application, and the database and its (per-generation)
    /// role. `-tpl-` where a preview has `-pr-`, so the apps' AppProject globs
    /// (`namespaces_of`) never match a template's namespace.
    pub fn template(repo: &RepoName, generation: u32, domain: &str) -> Self {
        let suffix = format!("-{}-tpl-{generation}", hash(repo.as_str()));
        let readable_repo = format!("{}-{}", repo.owner(), repo.name());
        let room = MAX_SLUG - PREFIX.len() - suffix.len();
        let slug = format!("{PREFIX}{}{suffix}", slug_part(&readable_repo, room));
        Self::from_slug(slug, repo, domain)
    }

    /// The names of a preview created before names were recorded (24-bit hash, no prefix):
    /// only to record what such a preview already has, never for a new one.
    pub fn legacy(key: &PreviewKey, domain: &str) -> Self {
        let suffix = format!("-{}-pr-{}", legacy_hash(key.repo.as_str()), key.number);
        let repo = format!("{}-{}", key.repo.owner(), key.repo.name());
        let slug = format!(
            "{}{suffix}",
            readable(&repo, LEGACY_MAX_SLUG - suffix.len())
        );
        let mut names = Self::from_slug(slug, &key.repo, domain);
        // The repository label it was labelled with: hashed as then, when it had to be.
        let exact = key.repo.as_str().replace('/', ".");
        if names.repo_label != exact {
            names.repo_label = hashed(&exact, 63, &legacy_hash(key.repo.as_str()));
        }
        names
    }

    /// The recorded names (JSON, as `to_json` wrote them), or, for a preview from before
    /// names were recorded, the ones it was created with.
    pub fn recorded(json: Option<&str>, key: &PreviewKey, domain: &str) -> anyhow::Result<Self> {
        match json {
            Some(json) => serde_json::from_str(json)
                .map_err(|e| anyhow::anyhow!("the recorded names of {key} are unreadable: {e}")),
            None => Ok(Self::legacy(key, domain)),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("names serialize")
    }

    fn from_slug(slug: String, repo: &RepoName, domain: &str) -> Self {
        let database = slug.replace('-', "_");
        let database = if database.starts_with(|c: char| c.is_ascii_digit()) {
            format!("db_{database}")
        } else {
            database
        };
        Self {
            application: format!("{slug}-helpers"),
            app_application: format!("{slug}-app"),
            host: format!("{slug}.{domain}"),
            database,
            repo_label: label_value(&repo.as_str().replace('/', "."), repo.as_str()),
            slug,
        }
    }
}

/// Every preview namespace matches this glob (previewd's own prefix).
pub const PREVIEW_NAMESPACES: &str = "pv-*";

/// The namespaces of `repo`'s previews, as an AppProject glob: the readable part of a slug
/// may be cut to fit, but the hash of the full repository name before `-pr-N` never is.
pub fn namespaces_of(repo: &crate::preview::RepoName) -> String {
    format!("{PREFIX}*-{}-pr-*", hash(repo.as_str()))
}

/// The namespaces of `repo`'s template generations (`Names::template`), as a glob: the
/// helpers' AppProject admits them, the apps' never does.
pub fn template_namespaces_of(repo: &RepoName) -> String {
    format!("{PREFIX}*-{}-tpl-*", hash(repo.as_str()))
}

/// The namespaces of previews created before names were recorded (`Names::legacy`): of
/// `repo`'s, or of every repository's. Only while such previews live (`chart.legacy_names`).
pub fn legacy_namespaces(repo: Option<&crate::preview::RepoName>) -> String {
    match repo {
        Some(repo) => format!("*-{}-pr-*", legacy_hash(repo.as_str())),
        None => "*-pr-*".into(),
    }
}

/// `text` as an RFC 1123 label of at most `max` characters. When the text had to change
/// (other characters, or too long), a short hash of `identity` is appended, so two inputs
/// that map to the same label still get different names, and the same input always the same.
pub fn label(text: &str, max: usize, identity: &str) -> String {
    let clean = readable(text, usize::MAX);
    if clean == text && clean.len() <= max {
        return clean;
    }
    hashed(text, max, &hash(identity))
}

/// The readable part of `text` and `hash`, within `max`.
fn hashed(text: &str, max: usize, hash: &str) -> String {
    format!(
        "{}-{hash}",
        readable(text, max.saturating_sub(hash.len() + 1))
    )
}

/// `text` lower-cased, other characters as `-`, cut to `max`: the readable part of a name
/// whose uniqueness comes from a hash beside it.
/// The readable part of a slug: `readable`, without the segments `pr` and `tpl` that begin
/// a slug's suffix. A repository named `a/<16 hex>-pr` would otherwise put
/// `-<16 hex>-pr-` inside its own namespaces, and the apps' AppProject glob of the
/// repository with that hash (`namespaces_of`: `pv-*-<hash>-pr-*`) would reach them.
fn slug_part(text: &str, max: usize) -> String {
    let readable = readable(text, max);
    let kept: Vec<&str> = readable
        .split('-')
        .filter(|segment| !matches!(*segment, "pr" | "tpl"))
        .collect();
    if kept.is_empty() {
        "x".into()
    } else {
        kept.join("-")
    }
}

fn readable(text: &str, max: usize) -> String {
    let mut clean = String::with_capacity(text.len());
    for c in text.chars().map(|c| c.to_ascii_lowercase()) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if !(c == '-' && (clean.is_empty() || clean.ends_with('-'))) {
            clean.push(c);
        }
    }
    let head = clean[..clean.len().min(max)].trim_end_matches('-');
    if head.is_empty() {
        "x".into()
    } else {
        head.to_owned()
    }
}

/// `text` as a label value (`[A-Za-z0-9._-]`, alphanumeric at both ends, at most 63), or a
/// hashed label when it cannot be one as it is.
pub fn label_value(text: &str, identity: &str) -> String {
    let valid = text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        text.to_owned()
    } else {
        label(text, 63, identity)
    }
}

fn hash(text: &str) -> String {
    hex::encode(&Sha256::digest(text.as_bytes())[..HASH_BYTES])
}

fn legacy_hash(text: &str) -> String {
    hex::encode(&Sha256::digest(text.as_bytes())[..3])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(key: &str) -> Names {
        Names::of(&key.parse().unwrap(), "preview.example.com")
    }

    #[test]
    fn simple_repositories_keep_readable_names() {
        let n = names("octo/app#7");
        let hash = hash("octo/app");
        assert_eq!(hash.len(), 16, "64 bits");
        assert_eq!(n.slug, format!("pv-octo-app-{hash}-pr-7"));
        assert_eq!(n.application, format!("pv-octo-app-{hash}-pr-7-helpers"));
        assert_eq!(
            n.host,
            format!("pv-octo-app-{hash}-pr-7.preview.example.com")
        );
        assert_eq!(n.database, format!("pv_octo_app_{hash}_pr_7"));
        assert_eq!(n.repo_label, "octo.app");
    }

    #[test]
    fn repositories_that_read_alike_never_share_a_name() {
        for (a, b) in [
            ("octo/my_app#7", "octo/my-app#7"),
            ("acme-corp/web#7", "acme/corp-web#7"),
            ("a/b.c#1", "a/b-c#1"),
        ] {
            assert_ne!(names(a).slug, names(b).slug, "{a} and {b}");
            assert_ne!(names(a).database, names(b).database, "{a} and {b}");
        }
        let underscore = names("octo/my_app#7");
        assert!(
            underscore.slug.starts_with("pv-octo-my-app-") && underscore.slug.ends_with("-pr-7"),
            "{}",
            underscore.slug
        );
        assert_eq!(
            underscore,
            names("Octo/My_App#7"),
            "GitHub names are case-insensitive"
        );
    }

    #[test]
    fn long_names_are_truncated_with_a_hash_and_keep_the_pr_number() {
        let long = format!("{}/{}", "o".repeat(39), "r".repeat(90));
        let a = Names::of(&format!("{long}#12345").parse().unwrap(), "p.example.com");
        let b = Names::of(&format!("{long}x#12345").parse().unwrap(), "p.example.com");
        assert!(
            a.slug.len() <= MAX_SLUG && a.slug.ends_with("-pr-12345"),
            "{}",
            a.slug
        );
        assert_ne!(a.slug, b.slug);
        assert!(a.database.len() <= 63 && a.repo_label.len() <= 63);
        for name in [&a.slug, &a.application, &a.repo_label] {
            assert!(crate::config::is_dns_label(name), "{name}");
        }
    }

    #[test]
    fn names_depend_only_on_repository_and_number() {
        assert_eq!(names("octo/app#7"), names("octo/app#7"));
        assert_ne!(names("octo/app#7").slug, names("octo/app#8").slug);
        assert_ne!(names("octo/app#7").slug, names("other/app#7").slug);
    }

    #[test]
    fn databases_never_start_with_a_digit() {
        assert!(
            names("1password/app#3")
                .database
                .starts_with("pv_1password_app_")
        );
        let legacy = Names::legacy(&"1password/app#3".parse().unwrap(), "p.example");
        assert!(legacy.database.starts_with("db_1password_app_"));
    }

    /// The pair the security review collided in 34 s under the 24-bit hash.
    #[test]
    fn the_repositories_that_collided_under_the_24_bit_hash_get_different_names() {
        let (a, b) = (
            "acme/payments-service-backend-1ab3d84#1",
            "acme/payments-service-backend#1",
        );
        let legacy = |k: &str| Names::legacy(&k.parse().unwrap(), "p.example");
        assert_eq!(legacy(a).slug, legacy(b).slug, "the 24-bit names collided");
        assert_ne!(names(a).slug, names(b).slug);
        assert_ne!(names(a).database, names(b).database);
        assert_ne!(names(a).host, names(b).host);
    }

    #[test]
    fn every_preview_namespace_has_previewds_prefix_and_its_repositorys_glob() {
        let repo: crate::preview::RepoName = "acme/payments-service-backend".parse().unwrap();
        let n = names("acme/payments-service-backend#123456");
        assert!(
            n.slug.starts_with(PREFIX) && n.slug.len() <= MAX_SLUG,
            "{}",
            n.slug
        );
        let glob = namespaces_of(&repo);
        let (head, tail) = glob.split_once('*').unwrap();
        let tail = tail.trim_end_matches('*');
        assert!(
            n.slug.starts_with(head) && n.slug.contains(tail),
            "{glob} vs {}",
            n.slug
        );
        assert!(!"api-pr-x".starts_with(PREVIEW_NAMESPACES.trim_end_matches('*')));
    }

    /// What previewd 0.1 named `octo/app#7` and a long repository's PR (from its snapshots):
    /// a live preview keeps exactly these.
    #[test]
    fn legacy_names_are_exactly_those_previews_were_created_with() {
        let legacy = Names::legacy(&"octo/app#7".parse().unwrap(), "preview.example.com");
        assert_eq!(legacy.slug, "octo-app-609ddd-pr-7");
        assert_eq!(legacy.repo_label, "octo.app");
        let long = format!(
            "{}/{}#98765",
            "o".repeat(39),
            "very-long-repository-name-".repeat(3).trim_end_matches('-')
        );
        let legacy = Names::legacy(&long.parse().unwrap(), "preview.example.com");
        assert_eq!(legacy.slug, "oooooooooooooooooooooooo-70c7ab-pr-98765");
        assert_eq!(
            legacy.repo_label,
            "ooooooooooooooooooooooooooooooooooooooo-very-long-reposi-70c7ab"
        );
        assert_eq!(legacy.database, "oooooooooooooooooooooooo_70c7ab_pr_98765");
    }

    #[test]
    fn recorded_names_win_over_the_current_rule_and_domain() {
        let key: PreviewKey = "octo/app#7".parse().unwrap();
        let then = Names::legacy(&key, "old.example");
        let json = then.to_json();
        assert_eq!(
            Names::recorded(Some(&json), &key, "new.example").unwrap(),
            then
        );
        assert_eq!(Names::recorded(None, &key, "old.example").unwrap(), then);
        assert!(Names::recorded(Some("{"), &key, "x").is_err());
    }

    #[test]
    fn repository_labels_are_exact_when_they_can_be() {
        assert_eq!(names("octo/app#1").repo_label, "octo.app");
        let trailing = names("octo/app-#1").repo_label;
        assert!(
            crate::config::is_dns_label(&trailing) && trailing.starts_with("octo-app-"),
            "{trailing}"
        );
    }
}

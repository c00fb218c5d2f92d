//! Kubernetes and DNS names for a preview, derived from the repository and PR number only
//! (never the branch), so a rename or a force-push never deletes and recreates anything.

use sha2::{Digest, Sha256};

use crate::preview::PreviewKey;

/// Longest slug: leaves room for the longest suffix the chart adds (`-seed-runner`) within
/// a 63-character label.
pub const MAX_SLUG: usize = 40;

/// Every name one preview uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// `owner-repo-1a2b3c-pr-7`: the namespace, the Helm release, and the prefix of every
    /// object. The hash of the full repository name keeps `acme-corp/web` and
    /// `acme/corp-web` (and `my_app` and `my-app`) apart.
    pub slug: String,
    /// The helper Application in Argo CD's namespace.
    pub application: String,
    /// The app's own Application (when its repository configures a chart).
    pub app_application: String,
    /// `<slug>.<domain>`
    pub host: String,
    /// PostgreSQL database and role name (`owner_repo_1a2b3c_pr_7`).
    pub database: String,
    /// The repository as a label value (`owner.repo`), exact unless hashed.
    pub repo_label: String,
}

impl Names {
    pub fn of(key: &PreviewKey, domain: &str) -> Self {
        let suffix = format!("-{}-pr-{}", short_hash(key.repo.as_str()), key.number);
        let repo = format!("{}-{}", key.repo.owner(), key.repo.name());
        let slug = format!("{}{suffix}", readable(&repo, MAX_SLUG - suffix.len()));
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
            repo_label: label_value(&key.repo.as_str().replace('/', "."), key.repo.as_str()),
            slug,
        }
    }
}

/// Every preview namespace matches this glob (the slug's suffix).
pub const PREVIEW_NAMESPACES: &str = "*-pr-*";

/// The namespaces of `repo`'s previews, as an AppProject glob: the readable part of a slug
/// may be cut to fit, but the hash of the full repository name before `-pr-N` never is.
pub fn namespaces_of(repo: &crate::preview::RepoName) -> String {
    format!("*-{}-pr-*", short_hash(repo.as_str()))
}

/// `text` as an RFC 1123 label of at most `max` characters. When the text had to change
/// (other characters, or too long), a short hash of `identity` is appended, so two inputs
/// that map to the same label still get different names, and the same input always the same.
pub fn label(text: &str, max: usize, identity: &str) -> String {
    let clean = readable(text, usize::MAX);
    if clean == text && clean.len() <= max {
        return clean;
    }
    let hash = short_hash(identity);
    format!(
        "{}-{hash}",
        readable(text, max.saturating_sub(hash.len() + 1))
    )
}

/// `text` lower-cased, other characters as `-`, cut to `max`: the readable part of a name
/// whose uniqueness comes from a hash beside it.
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

fn short_hash(text: &str) -> String {
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
        let hash = short_hash("octo/app");
        assert_eq!(n.slug, format!("octo-app-{hash}-pr-7"));
        assert_eq!(n.application, format!("octo-app-{hash}-pr-7-helpers"));
        assert_eq!(n.host, format!("octo-app-{hash}-pr-7.preview.example.com"));
        assert_eq!(n.database, format!("octo_app_{hash}_pr_7"));
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
            underscore.slug.starts_with("octo-my-app-") && underscore.slug.ends_with("-pr-7"),
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
                .starts_with("db_1password_app_")
        );
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

//! Validation of which PRs of a repository get a preview, and when its image may run:
//! `[[repos]]` `trigger`, `trigger_label`, `paths`, `ignore_authors` and `wait_for`.

use super::raw::RawRepo;
use super::validate::Validator;
use super::*;

/// GitHub refuses label names over 50 characters.
const MAX_LABEL: usize = 50;
/// Bounds on what each PR's look-ups and stored reports may hold.
const MAX_NAMES: usize = 20;
const MAX_NAME: usize = 200;

impl Validator {
    pub(super) fn gates(&self, i: usize, r: &RawRepo) -> Result<Gates, ConfigError> {
        let key = |field: &str| format!("repos[{i}].{field}");
        let trigger = match r.trigger.as_deref() {
            None | Some("auto") => Trigger::Auto,
            Some("label") => Trigger::Label,
            Some("comment") => Trigger::Comment,
            Some(other) => {
                return Err(self.invalid(
                    &key("trigger"),
                    format!("{other:?} is not a trigger"),
                    "auto, label or comment",
                ));
            }
        };
        let trigger_label = r.trigger_label.clone().unwrap_or_else(|| "preview".into());
        if trigger_label.trim().is_empty() || trigger_label.chars().count() > MAX_LABEL {
            return Err(self.invalid(
                &key("trigger_label"),
                format!("{trigger_label:?} is not a label GitHub allows"),
                "a label name of 1 to 50 characters",
            ));
        }
        let paths = match r.paths.as_slice() {
            [] => None,
            globs if globs.len() > MAX_NAMES * 5 => {
                return Err(self.invalid(
                    &key("paths"),
                    format!("{} globs", globs.len()),
                    "at most 100 globs",
                ));
            }
            globs => Some(crate::paths::Paths::new(globs).map_err(|why| {
                self.invalid(
                    &key("paths"),
                    why,
                    "globset globs from the repository's root, like services/api/**",
                )
            })?),
        };
        let mut ignore_authors = Vec::new();
        for login in &r.ignore_authors {
            if !is_login(login) {
                return Err(self.invalid(
                    &key("ignore_authors"),
                    format!("{login:?} is not a GitHub login"),
                    "logins like dependabot[bot] or renovate[bot]",
                ));
            }
            ignore_authors.push(login.to_ascii_lowercase());
        }
        if r.wait_for.len() > MAX_NAMES {
            return Err(self.invalid(
                &key("wait_for"),
                format!("{} names", r.wait_for.len()),
                "at most 20 check, status or workflow names",
            ));
        }
        for name in &r.wait_for {
            if name.trim().is_empty() || name.len() > MAX_NAME || name.contains(char::is_control) {
                return Err(self.invalid(
                    &key("wait_for"),
                    format!("{name:?} is not a check name"),
                    "check run, commit status or workflow names, like build-image",
                ));
            }
        }
        Ok(Gates {
            trigger,
            trigger_label,
            paths,
            ignore_authors,
            wait_for: r.wait_for.clone(),
        })
    }

    /// `paths` and `wait_for` ask GitHub (a PR's files, a commit's checks): without
    /// credentials they could never decide, and every preview would wait for ever.
    pub(super) fn gates_can_ask(
        &self,
        repos: &[RepoConfig],
        github: &GithubConfig,
    ) -> Result<(), ConfigError> {
        if github.credentials.is_some() {
            return Ok(());
        }
        for (i, repo) in repos.iter().enumerate() {
            let gates = &repo.policy.gates;
            let field = if gates.paths.is_some() {
                "paths"
            } else if !gates.wait_for.is_empty() {
                "wait_for"
            } else {
                continue;
            };
            return Err(self.invalid(
                &format!("repos[{i}].{field}"),
                "it asks GitHub (a PR's files, a commit's checks) but no GitHub credentials are set"
                    .into(),
                "github.token, or github.app_id + github.private_key_path",
            ));
        }
        Ok(())
    }
}

/// A GitHub login: letters, digits and single hyphens, up to 39 characters; an App's bot
/// account adds `[bot]`.
fn is_login(login: &str) -> bool {
    let name = login.strip_suffix("[bot]").unwrap_or(login);
    !name.is_empty()
        && name.len() <= 39
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "[github]\ntoken = \"t\"\n";

    fn error_of(toml: &str) -> String {
        Config::from_toml(toml, Vec::new())
            .expect_err("refused")
            .to_string()
    }

    fn gates_of(toml: &str) -> Gates {
        Config::from_toml(toml, Vec::new()).unwrap().repos[0]
            .policy
            .gates
            .clone()
    }

    #[test]
    fn a_repository_lets_every_pr_in_at_once_by_default() {
        let gates = gates_of("[[repos]]\nname = \"o/r\"\n");
        assert_eq!(gates, Gates::default());
        assert_eq!(gates.trigger, Trigger::Auto);
        assert_eq!(gates.trigger_label, "preview");
    }

    #[test]
    fn every_gate_is_read_from_its_repository() {
        let gates = gates_of(&format!(
            "{TOKEN}[[repos]]\nname = \"o/r\"\ntrigger = \"label\"\ntrigger_label = \"deploy me\"\n\
             paths = [\"services/api/**\"]\nignore_authors = [\"Dependabot[bot]\"]\n\
             wait_for = [\"build-image\"]\n"
        ));
        assert_eq!(gates.trigger, Trigger::Label);
        assert_eq!(gates.trigger_label, "deploy me");
        assert_eq!(
            gates.paths.as_ref().map(|p| p.globs().to_vec()),
            Some(vec!["services/api/**".to_string()])
        );
        assert!(gates.ignores("dependabot[bot]"));
        assert_eq!(gates.wait_for, ["build-image"]);
    }

    #[test]
    fn a_trigger_previewd_does_not_know_is_refused_naming_the_key() {
        let err = error_of("[[repos]]\nname = \"o/r\"\ntrigger = \"manual\"\n");
        assert!(err.contains("repos[0].trigger"), "{err}");
        assert!(err.contains("auto, label or comment"), "{err}");
    }

    #[test]
    fn a_glob_globset_refuses_is_refused_naming_the_key() {
        let err = error_of(&format!(
            "{TOKEN}[[repos]]\nname = \"o/r\"\npaths = [\"services/[api\"]\n"
        ));
        assert!(err.contains("repos[0].paths"), "{err}");
    }

    #[test]
    fn paths_and_wait_for_need_github_credentials_to_decide() {
        let paths = error_of("[[repos]]\nname = \"o/r\"\npaths = [\"api/**\"]\n");
        assert!(paths.contains("repos[0].paths"), "{paths}");
        assert!(paths.contains("github.token"), "{paths}");
        let wait = error_of("[[repos]]\nname = \"o/r\"\nwait_for = [\"build\"]\n");
        assert!(wait.contains("repos[0].wait_for"), "{wait}");
    }

    #[test]
    fn an_author_that_is_no_github_login_is_refused() {
        let err = error_of("[[repos]]\nname = \"o/r\"\nignore_authors = [\"a b\"]\n");
        assert!(err.contains("repos[0].ignore_authors"), "{err}");
    }

    #[test]
    fn check_names_are_bounded() {
        let long = "x".repeat(201);
        let err = error_of(&format!(
            "{TOKEN}[[repos]]\nname = \"o/r\"\nwait_for = [\"{long}\"]\n"
        ));
        assert!(err.contains("repos[0].wait_for"), "{err}");
        let many: Vec<String> = (0..21).map(|i| format!("\"c{i}\"")).collect();
        let err = error_of(&format!(
            "{TOKEN}[[repos]]\nname = \"o/r\"\nwait_for = [{}]\n",
            many.join(", ")
        ));
        assert!(err.contains("at most 20"), "{err}");
    }
}

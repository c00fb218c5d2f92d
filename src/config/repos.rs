//! Validation of what a repository gets: the policy (`[defaults]`, overridden per
//! `[[repos]]`: lifetimes, caps, keep) and the app's image, commands, seed and chart.

use super::keys::default_of;
use super::raw::{RawRepo, Values};
use super::validate::Validator;
use super::*;
use crate::duration;

/// `[[repos]] template_refresh` and `template_idle` when not set.
const TEMPLATE_REFRESH: &str = "24h";
const TEMPLATE_IDLE: &str = "14d";
/// `[[repos]] template_spares` when not set: two previews opened at once both get a spare.
const TEMPLATE_SPARES: u32 = 2;
/// Each spare is a whole copy of the template on the database server.
const MAX_TEMPLATE_SPARES: i64 = 10;

impl Validator {
    pub(super) fn app(&self, i: usize, r: &RawRepo) -> Result<AppConfig, ConfigError> {
        let key = |field: &str| format!("repos[{i}].{field}");
        if let Some(image) = r.image.as_deref().filter(|image| {
            image.is_empty() || image.contains(char::is_whitespace) || image.contains('@')
        }) {
            return Err(self.invalid(
                &key("image"),
                format!("{image:?} is not an image repository"),
                "a repository without tag, like ghcr.io/acme/shop",
            ));
        }
        let image_tag = match &r.image_tag {
            None => crate::config::image_tag::ImageTag::default(),
            Some(template) => {
                crate::config::image_tag::ImageTag::parse(template).map_err(|why| {
                    self.invalid(
                        &key("image_tag"),
                        why,
                        "a tag template of {sha}, {sha7} and {number}, like pr-{number}-{sha7}",
                    )
                })?
            }
        };
        if r.image.is_none() && !(r.migrate_command.is_empty() && r.seed_command.is_empty()) {
            return Err(self.invalid(
                &key("image"),
                "commands are set but no image runs them".into(),
                "the app's image repository",
            ));
        }
        if let Some(seed) = &r.seed {
            if !r.seed_command.is_empty() {
                return Err(self.invalid(
                    &key("seed"),
                    "both seed and seed_command are set".into(),
                    "one of them",
                ));
            }
            if crate::seeds::find(seed).is_none() {
                return Err(self.invalid(
                    &key("seed"),
                    format!("{seed:?} is not a seed set previewd ships"),
                    &crate::seeds::names().join(", "),
                ));
            }
        }
        let chart = match (&r.app_chart, &r.app_repo_url) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(self.invalid(
                    &key("app_chart"),
                    "app_repo_url is set but no chart path".into(),
                    "the path of the app's chart in that repository, like deploy/chart",
                ));
            }
            (Some(path), url) => {
                let path = path.trim_matches('/');
                if path.is_empty()
                    || path.split('/').any(|part| part.is_empty() || part == "..")
                    || path.contains(char::is_whitespace)
                {
                    return Err(self.invalid(
                        &key("app_chart"),
                        format!("{path:?} is not a path inside the repository"),
                        "a relative path like deploy/chart",
                    ));
                }
                let repo_url = match url {
                    Some(url) if url.starts_with("https://") || url.starts_with("git@") => {
                        url.clone()
                    }
                    Some(url) => {
                        return Err(self.invalid(
                            &key("app_repo_url"),
                            format!("{url:?} is not a Git URL Argo CD can clone"),
                            "https://... or git@...",
                        ));
                    }
                    None => format!("https://github.com/{}.git", r.name.to_ascii_lowercase()),
                };
                Some(AppChart {
                    repo_url,
                    path: path.to_owned(),
                })
            }
        };
        let template = self.template(i, r)?;
        if template.is_some() && image_tag.names_number() {
            return Err(self.invalid(
                &key("database_template"),
                format!("image_tag {image_tag} names {{number}}, which the default branch's image (the template's migrations and seed) has not"),
                "an image_tag of {sha} or {sha7}, or no database_template",
            ));
        }
        let service = r
            .app_service
            .as_deref()
            .map(|text| self.app_service(&key("app_service"), text))
            .transpose()?;
        let (mail, messaging) = self.services(i, r)?;
        Ok(AppConfig {
            service,
            template,
            mail,
            messaging,
            image: r.image.clone(),
            image_tag,
            migrate_command: r.migrate_command.clone(),
            seed: r.seed.clone(),
            seed_command: r.seed_command.clone(),
            chart,
        })
    }

    /// `database_template` and its timings (`templates_need_a_database` checks the mode).
    fn template(&self, i: usize, r: &RawRepo) -> Result<Option<TemplatePolicy>, ConfigError> {
        let key = |field: &str| format!("repos[{i}].{field}");
        if r.database_template != Some(true) {
            for (field, set) in [
                ("template_refresh", r.template_refresh.is_some()),
                ("template_idle", r.template_idle.is_some()),
                ("template_spares", r.template_spares.is_some()),
            ] {
                if set {
                    return Err(self.invalid(
                        &key(field),
                        "is set but database_template is not".into(),
                        "database_template = true, or no template keys",
                    ));
                }
            }
            return Ok(None);
        }
        let refresh = self.duration(
            &key("template_refresh"),
            r.template_refresh.as_deref(),
            TEMPLATE_REFRESH,
        )?;
        let idle = self.duration(
            &key("template_idle"),
            r.template_idle.as_deref(),
            TEMPLATE_IDLE,
        )?;
        let spares = match r.template_spares {
            None => TEMPLATE_SPARES,
            Some(n) => u32::try_from(n)
                .ok()
                .filter(|n| i64::from(*n) <= MAX_TEMPLATE_SPARES)
                .ok_or_else(|| {
                    self.invalid(
                        &key("template_spares"),
                        format!(
                            "{n} is not a number of spare clones from 0 to {MAX_TEMPLATE_SPARES}"
                        ),
                        "0 (every preview copies the template) to 10; each spare is a whole copy",
                    )
                })?,
        };
        Ok(Some(TemplatePolicy {
            refresh,
            idle,
            spares,
        }))
    }

    /// `base` is the `[defaults]` policy a `[[repos]]` entry inherits from.
    pub(super) fn policy(
        &self,
        section: &str,
        raw: &Values,
        base: Option<&Policy>,
    ) -> Result<Policy, ConfigError> {
        // Both `[defaults]` and a `[[repos]]` entry hold the keys declared as `defaults.*`.
        let text = |field: &str| raw.text(&format!("defaults.{field}"));
        let flag = |field: &str| raw.flag(&format!("defaults.{field}"));
        let fallback = |field: &str| -> String {
            base.map_or(
                default_of(&format!("defaults.{field}")).into(),
                |b| match field {
                    "ttl" => duration::format(b.ttl),
                    "warn_before" => duration::format(b.warn_before),
                    _ => duration::format(b.max_lifetime),
                },
            )
        };
        let key = |field: &str| format!("{section}.{field}");
        let ttl = self.duration(&key("ttl"), text("ttl").as_deref(), &fallback("ttl"))?;
        let warn_before = self.duration(
            &key("warn_before"),
            text("warn_before").as_deref(),
            &fallback("warn_before"),
        )?;
        let max_lifetime = self.duration(
            &key("max_lifetime"),
            text("max_lifetime").as_deref(),
            &fallback("max_lifetime"),
        )?;
        if ttl > max_lifetime {
            return Err(self.invalid(
                &key("ttl"),
                format!(
                    "{} is longer than max_lifetime {}",
                    duration::format(ttl),
                    duration::format(max_lifetime)
                ),
                "a ttl no longer than max_lifetime",
            ));
        }
        let domain = text("domain").unwrap_or_else(|| {
            base.map_or(default_of("defaults.domain").into(), |b| b.domain.clone())
        });
        if domain.len() > 200 || !is_dns_name(&domain) {
            return Err(self.invalid(
                &key("domain"),
                format!("{domain:?} is not a DNS name"),
                "a lower-case DNS name like preview.example.com",
            ));
        }
        // `[defaults]` falls back to the declared default, a `[[repos]]` entry to `[defaults]`.
        let at_cap = text("at_cap");
        let at_cap =
            (at_cap.as_deref()).or_else(|| base.is_none().then(|| default_of("defaults.at_cap")));
        Ok(Policy {
            ttl,
            domain,
            warn_before,
            max_lifetime,
            deploy_drafts: flag("deploy_drafts")
                .or(base.map(|b| b.deploy_drafts))
                .unwrap_or(default_of("defaults.deploy_drafts") == "true"),
            allow_keep: flag("allow_keep")
                .or(base.map(|b| b.allow_keep))
                .unwrap_or(default_of("defaults.allow_keep") == "true"),
            keep_for: match (text("keep_for"), base) {
                (Some(text), _) => self.duration(&key("keep_for"), Some(&text), "")?,
                (None, Some(b)) => b.keep_for,
                (None, None) => max_lifetime,
            },
            max_per_repo: self
                .cap(&key("max_per_repo"), text("max_per_repo").as_deref())?
                .or(base.and_then(|b| b.max_per_repo)),
            max_per_author: self
                .cap(&key("max_per_author"), text("max_per_author").as_deref())?
                .or(base.and_then(|b| b.max_per_author)),
            at_cap: match at_cap {
                None => base.map_or(AtCap::Queue, |b| b.at_cap),
                Some("queue") => AtCap::Queue,
                Some("evict") => AtCap::Evict,
                Some(other) => {
                    return Err(self.invalid(
                        &key("at_cap"),
                        format!("{other:?} is not a policy"),
                        "queue or evict",
                    ));
                }
            },
            access: match text("access") {
                Some(text) => self.access(&key("access"), &text)?,
                None => match base {
                    Some(b) => b.access,
                    None => self.access(&key("access"), default_of("defaults.access"))?,
                },
            },
            sleep_after: self.sleep_after(
                &key("sleep_after"),
                text("sleep_after").as_deref(),
                base.map(|b| b.sleep_after),
            )?,
            resources: self.resources(section, &text, base.map(|b| &b.resources))?,
            gates: Gates::default(),
        })
    }

    fn cap(&self, key: &str, text: Option<&str>) -> Result<Option<u32>, ConfigError> {
        text.map(|t| {
            t.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    self.invalid(key, format!("{t:?} is not a cap"), "a whole number above 0")
                })
        })
        .transpose()
    }
}

impl Validator {
    /// `database_template` is refused while `database.mode` is off: nothing to clone.
    pub(super) fn templates_need_a_database(
        &self,
        repos: &[RepoConfig],
        database: &DatabaseConfig,
    ) -> Result<(), ConfigError> {
        match repos.iter().position(|r| r.app.template.is_some()) {
            Some(i) if database.mode == DatabaseMode::Off => Err(self.invalid(
                &format!("repos[{i}].database_template"),
                "database.mode is off: there is no database to clone".into(),
                "database.mode = \"shared\" or \"cnpg\", or no database_template",
            )),
            _ => Ok(()),
        }
    }
}

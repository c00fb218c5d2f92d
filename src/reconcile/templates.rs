//! The template pass (#16): each repository's template generations started, applied,
//! watched and retired as `decide::plan` decides, and the generation each preview's
//! database is cloned from. The one place a generation's Application is written.

use anyhow::Context;

use self::decide::{Gen, GenState, Wanted};
use super::Reconciler;
use crate::config::DatabaseMode;
use crate::db::{self, PreviewRow, TemplateRow};
use crate::naming::Names;
use crate::plan::{Health, Observed};
use crate::preview::{CloneSource, HistoryKind, PreviewKey, RepoName};
use crate::render::SealedSecret;
use crate::render::template::{self as rendering, Generation};
use crate::sink::Owner;

/// How stale `template_repos.last_used_at` may get while a preview lives (seconds).
const USED_EVERY: i64 = 3600;

impl Reconciler {
    /// Every repository with a template, one after another; one repository's failure is
    /// logged and retried on the next pass, never another's.
    pub async fn templates(&self) -> anyhow::Result<()> {
        let now = self.clock.now();
        for repo in db::template_repos(&self.state).await? {
            if let Err(e) = self.template_of(&repo, now).await {
                tracing::warn!(repo, error = %format!("{e:#}"), "template pass failed; retrying on the next pass");
            }
        }
        Ok(())
    }

    async fn template_of(&self, repo: &str, now: i64) -> anyhow::Result<()> {
        let name: RepoName = repo.parse()?;
        let policy = self
            .config
            .repos
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| r.app.template);
        let wanted = db::template_repo(&self.state, repo).await?.map(|w| Wanted {
            base_sha: w.base_sha,
            refresh: w.refresh,
            destroy: w.destroy,
            last_used_at: w.last_used_at,
        });
        let rows = db::generations(&self.state, repo).await?;
        let mut gens = Vec::with_capacity(rows.len());
        for row in &rows {
            gens.push(Gen {
                id: row.id,
                generation: row.generation,
                base_sha: row.base_sha.clone(),
                state: row.state,
                created_at: row.created_at,
                clones_pending: db::clones_pending(&self.state, repo, row.generation).await?,
            });
        }
        let live = db::live_previews(&self.state, repo).await?;
        let plan = decide::plan(policy, wanted.as_ref(), &gens, live, now);
        if let Some(reason) = plan.destroy {
            db::destroy_template(&self.state, repo, reason, now).await?;
            tracing::info!(repo, reason, "template database to be dropped");
        }
        for id in &plan.time_out {
            let message = format!(
                "did not finish building within {}",
                crate::duration::format(decide::BUILD_DEADLINE)
            );
            tracing::warn!(repo, error = %message, "template build timed out");
            db::set_generation_state(&self.state, *id, GenState::Failed, Some(&message), now)
                .await?;
        }
        // A template destroyed while a preview still waits to clone it: that preview is
        // seeded instead (a clone that already ran stays; its seed record makes the seed a
        // no-op), never left naming a database that is gone.
        if wanted.as_ref().is_some_and(|w| w.destroy.is_some()) || plan.destroy.is_some() {
            for pending in gens
                .iter()
                .filter(|g| g.clones_pending > 0 && plan.retire.contains(&g.id))
            {
                db::seed_instead(&self.state, repo, pending.generation).await?;
            }
        }
        if let Some((generation, base_sha)) = &plan.build {
            self.start_generation(&name, *generation, base_sha, now)
                .await?;
        }
        for row in db::generations(&self.state, repo).await? {
            if plan.retire.contains(&row.id) {
                self.retire_generation(&name, &row, now).await?;
            } else if row.state == GenState::Building {
                self.build_generation(&name, &row, now).await?;
            }
        }
        // `template_idle` counts from the last preview: while any lives, the template is in
        // use (marked at most hourly: one write an hour per repository, not one a pass).
        if live > 0
            && wanted
                .as_ref()
                .is_some_and(|w| now - w.last_used_at >= USED_EVERY)
        {
            db::template_used(&self.state, repo, now).await?;
        }
        Ok(())
    }

    async fn start_generation(
        &self,
        repo: &RepoName,
        generation: i64,
        base_sha: &str,
        now: i64,
    ) -> anyhow::Result<()> {
        // One server holds every generation (`database.host`, or the CloudNativePG Cluster),
        // reached from the first cluster's provisioner; previews on any cluster clone it.
        let cluster = self
            .config
            .clusters
            .first()
            .context("no cluster is configured")?;
        let domain = &self
            .config
            .policy_for(repo)
            .unwrap_or(&self.config.defaults)
            .domain;
        let new = db::NewGeneration {
            repo: repo.as_str(),
            at_least: generation,
            base_sha,
            cluster: &cluster.name,
        };
        // Numbered past every generation the repository ever had (`db::start_generation`).
        let names = |n| Ok(Names::template(repo, u32::try_from(n)?, domain).to_json());
        let (_, generation) = db::start_generation(&self.state, new, names, now).await?;
        tracing::info!(%repo, generation, base_sha, "building a template generation");
        Ok(())
    }

    /// A recorded generation as rendering sees it, its names, and the owner its Application
    /// carries (`previewd.dev/pr: template-N`, never a PR's).
    async fn generation_of(&self, row: &TemplateRow) -> anyhow::Result<(Generation, Names, Owner)> {
        let names = row.names()?;
        let generation = Generation {
            repo: row.repo.parse()?,
            generation: u32::try_from(row.generation)?,
            base_sha: row.base_sha.parse()?,
            cluster: row.cluster.clone(),
        };
        let owner = Owner {
            repo: Some(names.repo_label.clone()),
            pr: Some(generation.pr_label()),
            instance: self.instance().await?.to_owned(),
        };
        Ok((generation, names, owner))
    }

    /// Applies a building generation and reads Argo CD's verdict on it: ready (previews clone
    /// it from now on) or failed (the current generation stays, and says so).
    async fn build_generation(
        &self,
        repo: &RepoName,
        row: &TemplateRow,
        now: i64,
    ) -> anyhow::Result<()> {
        let (generation, names, owner) = self.generation_of(row).await?;
        let sealed = self.generation_secrets(row, &names, now).await?;
        let rendered = rendering::template(
            &generation,
            &names,
            &self.config,
            &sealed,
            self.instance().await?,
        )?;
        let observed = self.observe(&names.application, &owner).await?;
        let verdict = match &observed {
            Observed::Foreign { owner } => Some(Err(format!(
                "Application {} belongs to {owner}",
                names.application
            ))),
            Observed::Present { hash, health }
                if hash.as_deref() == Some(&rendered.application.hash) =>
            {
                match health {
                    // Nobody reports health (a directory): applied is all previewd can know.
                    None | Some(Health::Ready) => Some(Ok(())),
                    Some(Health::Failed(message)) => Some(Err(message.clone())),
                    Some(Health::NeedsSync) => {
                        self.request_sync(&names.application, &owner).await?;
                        None
                    }
                    Some(Health::Progressing) => None,
                }
            }
            Observed::Deleting => None,
            Observed::Missing | Observed::Present { .. } => {
                db::record_generation_applied(&self.state, row.id, &rendered.entries, None, now)
                    .await?;
                let manifest = &rendered.application.manifest;
                let written = self.retry("apply", || {
                    self.sink.apply(&names.application, manifest, &owner)
                });
                if super::calls::stale(written.await)? {
                    // Decided again at the next look, on a read.
                    return Ok(());
                }
                db::record_generation_applied(
                    &self.state,
                    row.id,
                    &[],
                    Some(&rendered.application.hash),
                    now,
                )
                .await?;
                tracing::info!(%repo, generation = row.generation, "template generation applied");
                None
            }
        };
        match verdict {
            Some(Ok(())) => {
                db::set_generation_state(&self.state, row.id, GenState::Ready, None, now).await?;
                tracing::info!(%repo, generation = row.generation, "template generation ready");
            }
            Some(Err(message)) => {
                let message = format!("generation {} failed to build: {message}", row.generation);
                tracing::warn!(%repo, error = %message, "template build failed; previews keep the current generation or seed");
                db::set_generation_state(
                    &self.state,
                    row.id,
                    GenState::Failed,
                    Some(&message),
                    now,
                )
                .await?;
            }
            None => {}
        }
        Ok(())
    }

    /// Deletes a generation's Application (its cascade and PostDelete hook drop the
    /// database and its role), and forgets the generation once it is gone.
    async fn retire_generation(
        &self,
        repo: &RepoName,
        row: &TemplateRow,
        now: i64,
    ) -> anyhow::Result<()> {
        let (_, names, owner) = self.generation_of(row).await?;
        if row.state != GenState::Retiring {
            db::set_generation_state(
                &self.state,
                row.id,
                GenState::Retiring,
                row.message.as_deref(),
                now,
            )
            .await?;
        }
        let mut observed = self.observe(&names.application, &owner).await?;
        if matches!(observed, Observed::Present { .. }) {
            self.retry("delete", || self.sink.delete(&names.application, &owner))
                .await?;
            tracing::info!(%repo, generation = row.generation, "template generation retiring");
            // A sink without finalizers (a directory) is done at once.
            observed = self.observe(&names.application, &owner).await?;
        }
        // Gone, or the name is another's: nothing of this generation is left to delete.
        if matches!(observed, Observed::Missing | Observed::Foreign { .. }) {
            db::forget_generation(&self.state, row.id).await?;
            tracing::info!(%repo, generation = row.generation, "template generation dropped");
        }
        Ok(())
    }

    /// The generation's database Secrets sealed for its cluster: stored once, reused.
    async fn generation_secrets(
        &self,
        row: &TemplateRow,
        names: &Names,
        now: i64,
    ) -> anyhow::Result<Vec<SealedSecret>> {
        let stored = db::generation_secrets(&self.state, row.id).await?;
        if !stored.is_empty() {
            return Ok(stored);
        }
        let cert = self
            .certs
            .get(&row.cluster)
            .with_context(|| format!("no sealing certificate for cluster {}", row.cluster))?;
        let mut specs = crate::secrets::database(&self.config, names, &mut rand::rngs::OsRng);
        // With somewhere to report to, the size Job gets a token of its own (only its digest
        // is kept): it tells previewd the generation's size once it is sealed.
        let mut digest = None;
        if self.config.reachable_url.is_some() && !specs.is_empty() {
            let (spec, token_digest) =
                crate::secrets::template_report(&self.config, names, &mut rand::rngs::OsRng);
            specs.push(spec);
            digest = Some(token_digest);
        }
        let sealed = specs
            .iter()
            .map(|spec| crate::seal::seal_secret(cert, spec))
            .collect::<Result<Vec<_>, _>>()?;
        db::store_generation_secrets(
            &self.state,
            row.id,
            &sealed,
            digest.as_ref().map(|d| d.as_slice()),
            &cert.fingerprint,
            now,
        )
        .await?;
        Ok(sealed)
    }

    /// Where the preview's database comes from. Decided once per seed generation (a new
    /// preview, a reseed): the repository's current generation, or none (seeded) while none
    /// is ready, which the history says.
    pub(super) async fn clone_source(
        &self,
        row: &PreviewRow,
        key: &PreviewKey,
        now: i64,
    ) -> anyhow::Result<Option<CloneSource>> {
        if self.config.database.mode == DatabaseMode::Off {
            return Ok(None);
        }
        let templated = self.config.template_for(&key.repo).is_some();
        let decided = row.template_seed == Some(row.seed_generation);
        if decided && row.template_generation.is_none() {
            return Ok(None);
        }
        if !decided && !templated {
            // No template: seeded (usually decided with the placement already).
            db::decide_clone(&self.state, row.id, None, row.seed_generation).await?;
            return Ok(None);
        }
        let rows = db::generations(&self.state, key.repo.as_str()).await?;
        let generation = if decided {
            row.template_generation
        } else {
            // In cnpg mode each cluster has its own PostgreSQL (its CloudNativePG Cluster): a
            // generation is cloned only by previews on the cluster it was built on.
            let reachable = |g: &&TemplateRow| {
                self.config.database.mode != DatabaseMode::Cnpg
                    || row.cluster.as_deref() == Some(g.cluster.as_str())
            };
            let current = current_of(&rows);
            let cloned = current.filter(|g| templated && reachable(g));
            if templated {
                db::template_used(&self.state, key.repo.as_str(), now).await?;
                if cloned.is_none() {
                    let building = rows.iter().find(|g| g.state == GenState::Building);
                    let why = match (current, building) {
                        (Some(g), _) => format!(
                            "seeded: template generation {} lives on cluster {}'s database server",
                            g.generation, g.cluster
                        ),
                        (None, Some(g)) => format!(
                            "seeded: template generation {} is still building",
                            g.generation
                        ),
                        (None, None) => "seeded: no template generation is ready".into(),
                    };
                    db::add_history_now(&self.state, &row.key, HistoryKind::Template, &why, now)
                        .await?;
                }
            }
            let generation = cloned.map(|g| g.generation);
            db::decide_clone(&self.state, row.id, generation, row.seed_generation).await?;
            generation
        };
        let Some(generation) = generation else {
            return Ok(None);
        };
        // The generation's recorded names while it is recorded; its clone outlives it (the
        // chart's create Job touches the template only to clone), so after, the same rule.
        let names = match rows.iter().find(|g| g.generation == generation) {
            Some(row) => row.names()?,
            None => Names::template(&key.repo, u32::try_from(generation)?, ""),
        };
        Ok(Some(CloneSource {
            database: names.database.clone(),
            role: names.database,
        }))
    }
}

/// The generation previews clone now: the newest ready one of the recorded rows.
fn current_of(rows: &[TemplateRow]) -> Option<&TemplateRow> {
    rows.iter()
        .filter(|g| g.state == GenState::Ready)
        .max_by_key(|g| g.generation)
}

pub mod decide;

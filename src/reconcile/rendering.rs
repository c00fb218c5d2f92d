//! What a preview's Applications should be: rendered from its recorded inputs and its sealed
//! secrets, and remembered by their hashes with the inputs they came from. A full pass over
//! previews whose inputs did not change neither reads their sealed secrets nor renders them
//! again (rendering was a fifth of an idle pass over 5,000 previews, issue #17); a preview
//! with something to write is rendered whole. A preview's first rendering seals its secrets;
//! they are stored with the ledger's intent of the apply that first carries them, in one
//! commit (`db::record_intended`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;

use super::Reconciler;
use crate::db::{self, PreviewRow};
use crate::naming::Names;
use crate::preview::{Preview, PreviewKey};
use crate::render::{self, Rendered, SealedSecret};

/// A preview's rendering: its hashes, and the manifests when they were made.
pub(super) struct Rendering {
    preview: Preview,
    pub(super) helper_hash: String,
    pub(super) app_hash: Option<String>,
    whole: Option<Whole>,
}

/// A rendering's manifests, and the sealed values made for it when they are new.
pub(super) struct Whole {
    pub(super) rendered: Rendered,
    /// Sealed for this rendering and stored nowhere yet: to be stored with the intent of
    /// the apply that carries them. Dropped unstored when nothing is applied, they are
    /// sealed anew next time, and nothing anywhere holds them.
    pub(super) new_secrets: Option<db::NewSecrets>,
}

/// Each preview's last rendering, by the inputs it was made from. Rendering is a pure
/// function of the `Preview`, its `Names`, the configuration and the instance (fixed for
/// the process) and its sealed secrets, which are stored once and never replaced: equal
/// inputs make equal hashes. One exception: a first rendering nothing applied remembers
/// secrets never stored, so the next rendering seals anew and its hash differs from the one
/// recalled; that hash matched nothing applied, so no decision rests on it. Bounded by the
/// previews: forgotten at teardown.
#[derive(Default)]
pub(super) struct Memo {
    remembered: Mutex<HashMap<i64, Remembered>>,
    renders: AtomicU64,
}

struct Remembered {
    preview: Preview,
    names: Names,
    helper_hash: String,
    app_hash: Option<String>,
}

impl Memo {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Remembered>> {
        // Nothing that can panic runs under this lock; a poisoned map is still a map.
        self.remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn recall(
        &self,
        id: i64,
        preview: &Preview,
        names: &Names,
    ) -> Option<(String, Option<String>)> {
        let remembered = self.lock();
        let r = remembered.get(&id)?;
        (r.preview == *preview && r.names == *names)
            .then(|| (r.helper_hash.clone(), r.app_hash.clone()))
    }

    fn remember(&self, id: i64, preview: &Preview, names: &Names, rendered: &Rendered) {
        self.renders.fetch_add(1, Ordering::Relaxed);
        let remembered = Remembered {
            preview: preview.clone(),
            names: names.clone(),
            helper_hash: rendered.helper.hash.clone(),
            app_hash: rendered.app.as_ref().map(|a| a.hash.clone()),
        };
        self.lock().insert(id, remembered);
    }

    pub(super) fn forget(&self, id: i64) {
        self.lock().remove(&id);
    }
}

impl Reconciler {
    /// How many times a preview was rendered whole since this reconciler started.
    pub fn renders(&self) -> u64 {
        self.memo.renders.load(Ordering::Relaxed)
    }

    /// The preview's rendering (its hashes, the manifests too unless remembered); `None`
    /// while it waits for a cluster. `image_ready`: CI built the PR's image (else only what
    /// needs none).
    pub(super) async fn rendering(
        &self,
        row: &PreviewRow,
        key: &PreviewKey,
        names: &Names,
        now: i64,
        image_ready: bool,
    ) -> anyhow::Result<Option<Rendering>> {
        let Some(cluster) = row.cluster.clone() else {
            return Ok(None);
        };
        let preview = Preview {
            key: key.clone(),
            head_sha: row.head_sha.parse()?,
            author: row.author.clone(),
            title: row.title.clone(),
            fork: row.fork,
            approved_sha: row.approved_sha.as_deref().map(str::parse).transpose()?,
            cluster,
            seed_generation: u32::try_from(row.seed_generation)?,
            redeploy_generation: u32::try_from(row.redeploy_generation)?,
            image_ready,
            template: self.clone_source(row, key, now).await?,
            asleep: row.sleeping_since.is_some(),
        };
        if let Some((helper_hash, app_hash)) = self.memo.recall(row.id, &preview, names) {
            return Ok(Some(Rendering {
                preview,
                helper_hash,
                app_hash,
                whole: None,
            }));
        }
        let whole = self.render(row, names, &preview, now).await?;
        Ok(Some(Rendering {
            helper_hash: whole.rendered.helper.hash.clone(),
            app_hash: whole.rendered.app.as_ref().map(|a| a.hash.clone()),
            preview,
            whole: Some(whole),
        }))
    }

    /// The Applications to apply and the ledger they make.
    pub(super) async fn whole(
        &self,
        row: &PreviewRow,
        names: &Names,
        rendering: Rendering,
        now: i64,
    ) -> anyhow::Result<Whole> {
        match rendering.whole {
            Some(whole) => Ok(whole),
            None => self.render(row, names, &rendering.preview, now).await,
        }
    }

    async fn render(
        &self,
        row: &PreviewRow,
        names: &Names,
        preview: &Preview,
        now: i64,
    ) -> anyhow::Result<Whole> {
        let (sealed, new_secrets) = self
            .sealed_secrets(row, names, &preview.cluster, now)
            .await?;
        let instance = self.instance().await?;
        let rendered = render::preview(preview, names, &self.config, &sealed, instance)?;
        self.memo.remember(row.id, preview, names, &rendered);
        Ok(Whole {
            rendered,
            new_secrets,
        })
    }

    /// The preview's secrets sealed for its cluster: the stored ones, whichever of the
    /// cluster's certificates sealed them (the controller keeps its old keys, and the running
    /// pods have the passwords inside); new ones, generated only the first time, with what
    /// stores them.
    async fn sealed_secrets(
        &self,
        row: &PreviewRow,
        names: &Names,
        cluster: &str,
        now: i64,
    ) -> anyhow::Result<(Vec<SealedSecret>, Option<db::NewSecrets>)> {
        let cert = self
            .certs
            .get(cluster)
            .with_context(|| format!("no sealing certificate for cluster {cluster}"))?;
        let stored = db::sealed_secrets(&self.state, row.id).await?;
        if !stored.is_empty() {
            // Mail or messaging turned on after the preview was first sealed: theirs only.
            let app = self.config.app_for(&row.key.repo);
            let names_stored: Vec<&str> = stored.iter().map(|(s, _)| s.name.as_str()).collect();
            let added = crate::secrets::services_missing(
                &self.config,
                &app,
                names,
                &names_stored,
                &mut rand::rngs::OsRng,
            );
            if added.is_empty() {
                return Ok((stored.into_iter().map(|(secret, _)| secret).collect(), None));
            }
            let added = added
                .iter()
                .map(|spec| crate::seal::seal_secret(cert, spec))
                .collect::<Result<Vec<_>, _>>()?;
            let new = db::NewSecrets::adding(&stored, &added, &cert.fingerprint);
            let all = stored.into_iter().map(|(secret, _)| secret).chain(added);
            return Ok((all.collect(), Some(new)));
        }
        // A certificate that outlives any extension: no preview may run past max_lifetime.
        let repo = row.key.repo.clone();
        let policy = self
            .config
            .policy_for(&repo)
            .unwrap_or(&self.config.defaults);
        let valid_until = now.saturating_add(i64::try_from(policy.max_lifetime.as_secs())?);
        let specs = crate::secrets::for_preview(
            &self.config,
            &self.config.app_for(&repo),
            names,
            self.ca.as_ref(),
            now,
            valid_until,
            &mut rand::rngs::OsRng,
        )?;
        let sealed = specs
            .iter()
            .map(|spec| crate::seal::seal_secret(cert, spec))
            .collect::<Result<Vec<_>, _>>()?;
        let new = db::NewSecrets::new(&sealed, &cert.fingerprint);
        Ok((sealed, Some(new)))
    }
}

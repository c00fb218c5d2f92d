//! The watch of previewd's Applications (`KubeSink::watch`): a paged list, then the changes
//! since, each told to the caller by name and kept in `Watched`.

use anyhow::Context;

use super::kubernetes::{KubeSink, instance_selector};
use super::watched::Watched;

/// A watch that ends with no event sooner than this is an error, not a renewal.
const WATCH_AT_LEAST: std::time::Duration = std::time::Duration::from_secs(1);
/// How long the API server keeps one watch open (`timeoutSeconds`) before previewd opens the
/// next from its version.
const WATCH_SECONDS: u32 = 60;
/// A watch still open this long after it was asked for (or a page of its list still not
/// answered) is a dead connection (a half-open TCP connection never ends, and kube-client
/// sets no read timeout): what it keeps would go stale unnoticed while looks decide on it,
/// so it is an error, and listed afresh.
const WATCH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(90);
/// Applications a list for the watch reads at a time (the API server pages by `limit`), so
/// that a relist of thousands never holds them all at once.
const LIST_PAGE: u32 = 50;

impl KubeSink {
    /// Calls `changed` with the name of each of this state's Applications that Argo CD (or
    /// anyone) changes, as it happens, and keeps what it sees (`Watched`, for an idle pass
    /// to read instead of the API server): a list, paged, then a watch from its
    /// resourceVersion, renewed when the server ends it (`timeoutSeconds`) and listed afresh
    /// when its version has expired: the API server's watch cache answers a version older
    /// than it holds with `NewResourceExpired` (410, "too old resource version";
    /// k8s.io/apiserver pkg/storage/cacher/watch_cache.go), on which client-go's reflector
    /// lists again too. Returns only on an error (a 410 answering the watch request itself is
    /// one: the caller backs off and lists afresh); the caller retries. What was seen is
    /// forgotten when it returns.
    pub async fn watch(&self, instance: &str, changed: impl Fn(&str)) -> anyhow::Result<()> {
        use futures_util::TryStreamExt;
        use kube::api::{ListParams, WatchEvent, WatchParams};
        struct Forget<'a>(&'a Watched);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.lost();
            }
        }
        let _forget = Forget(&self.watched);
        let selector = instance_selector(instance);
        let mut version = String::new();
        loop {
            if version.is_empty() {
                self.watched.listing(instance);
                let mut params = ListParams::default().labels(&selector).limit(LIST_PAGE);
                loop {
                    let deadline = tokio::time::Instant::now() + WATCH_DEADLINE;
                    let page = tokio::time::timeout_at(deadline, self.api.list(&params))
                        .await
                        .map_err(|_| {
                            anyhow::anyhow!("a page of previewd's Applications never came")
                        })?
                        .context("listing previewd's Applications to watch them")?;
                    for app in &page.items {
                        self.watched.saw(app);
                        // A change the expired watch did not deliver is not lost.
                        if let Some(name) = &app.metadata.name {
                            changed(name);
                        }
                    }
                    version = page.metadata.resource_version.unwrap_or_default();
                    match page.metadata.continue_ {
                        Some(token) if !token.is_empty() => params = params.continue_token(&token),
                        _ => break,
                    }
                }
                self.watched.listed();
            }
            let params = WatchParams::default()
                .labels(&selector)
                .timeout(WATCH_SECONDS);
            let deadline = tokio::time::Instant::now() + WATCH_DEADLINE;
            let silent = || anyhow::anyhow!("the watch of previewd's Applications went silent");
            let events = tokio::time::timeout_at(deadline, self.api.watch(&params, &version))
                .await
                .map_err(|_| silent())?
                .context("watching previewd's Applications")?;
            let mut events = std::pin::pin!(events);
            let (opened, mut seen) = (std::time::Instant::now(), 0usize);
            while let Some(event) = tokio::time::timeout_at(deadline, events.try_next())
                .await
                .map_err(|_| silent())?
                .context("watching previewd's Applications")?
            {
                let object = match event {
                    WatchEvent::Added(app) | WatchEvent::Modified(app) => {
                        self.watched.saw(&app);
                        app.metadata
                    }
                    WatchEvent::Deleted(app) => {
                        if let Some(name) = &app.metadata.name {
                            self.watched.gone(name);
                        }
                        app.metadata
                    }
                    WatchEvent::Bookmark(mark) => {
                        version = mark.metadata.resource_version;
                        continue;
                    }
                    WatchEvent::Error(status) if status.code == 410 => {
                        version.clear();
                        break;
                    }
                    WatchEvent::Error(status) => {
                        anyhow::bail!("watching previewd's Applications: {}", status.message)
                    }
                };
                if let Some(v) = object.resource_version {
                    version = v;
                }
                seen += 1;
                if let Some(name) = &object.name {
                    changed(name);
                }
            }
            // A watch the server (or a proxy) ends at once with nothing in it would be opened
            // again at once, forever: an error, so that the caller backs off.
            if seen == 0 && opened.elapsed() < WATCH_AT_LEAST {
                anyhow::bail!("the API server ended the watch of previewd's Applications at once");
            }
        }
    }
}

//! `previewd deliver EVENT FILE`: one webhook delivery to the `previewd serve` this
//! configuration describes, as GitHub sends it — signed with the configured secret (never
//! on a command line), under a fresh delivery GUID. For trying previewd locally and for
//! replaying a payload copied from GitHub's "Recent Deliveries".

use std::path::Path;

use anyhow::{Context, bail};
use hmac::{Hmac, Mac};
use secrecy::ExposeSecret;
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::Config;

/// Largest answer read back; previewd's are a line of JSON.
const MAX_ANSWER: u64 = 64 * 1024;

/// The whole exchange, connecting included.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

pub async fn deliver(config: &Config, event: &str, file: &Path) -> anyhow::Result<()> {
    if event.is_empty() || !event.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
        bail!("{event:?} is not a GitHub event name (pull_request, issue_comment, …)");
    }
    let Some(secret) = &config.github.webhook_secret else {
        bail!(
            "no webhook secret is configured: set PREVIEWD_GITHUB_WEBHOOK_SECRET (or \
             github.webhook_secret) to the one `previewd serve` runs with"
        );
    };
    let body = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    // previewd answers a larger one 413 and closes while it is still being sent.
    if body.len() > crate::server::MAX_BODY {
        bail!(
            "{} is {} bytes; previewd takes deliveries of at most {} bytes",
            file.display(),
            body.len(),
            crate::server::MAX_BODY
        );
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose_secret().as_bytes())
        .context("the webhook secret as an HMAC key")?;
    mac.update(&body);
    let signature = hex::encode(mac.finalize().into_bytes());
    let mut guid = [0u8; 16];
    getrandom::fill(&mut guid).context("a delivery GUID")?;
    let guid = hex::encode(guid);
    let addr = config.listen;
    let head = format!(
        "POST /webhooks/github HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: previewd-deliver\r\n\
         Content-Type: application/json\r\nX-GitHub-Event: {event}\r\n\
         X-GitHub-Delivery: {guid}\r\nX-Hub-Signature-256: sha256={signature}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| {
                format!("connecting to previewd at {addr} (is `previewd serve` running?)")
            })?;
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body).await?;
        let mut answer = Vec::new();
        stream.take(MAX_ANSWER).read_to_end(&mut answer).await?;
        anyhow::Ok(answer)
    };
    let answer = tokio::time::timeout(DEADLINE, exchange)
        .await
        .map_err(|_| anyhow::anyhow!("previewd at {addr} did not answer within {DEADLINE:?}"))??;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.lines().next().unwrap_or("").trim();
    println!("{status}");
    println!("{}", body.trim());
    let code = status.split(' ').nth(1).unwrap_or("");
    if !code.starts_with('2') {
        bail!("previewd did not take the delivery ({status})");
    }
    Ok(())
}

//! `previewd config check [--reach]`: the file validated as `serve` would, the effective
//! configuration printed with each value's source (secrets masked), the clusters' sealing
//! certificates read; with `--reach`, GitHub's API and the Kubernetes API asked.

use std::path::Path;
use std::process::ExitCode;

use crate::clusters::LocalKeys;
use crate::config::{Config, Explained, GithubCredentials, SinkKind};

/// Exit 0 when everything checked holds, 2 for a configuration error, 1 when a system
/// named by a valid configuration cannot be reached.
pub fn run(path: Option<&Path>, reach: bool) -> ExitCode {
    let explained = match Explained::load(path, std::env::vars()) {
        Ok(explained) => explained,
        Err(e) => {
            eprintln!("previewd: {e}");
            return ExitCode::from(2);
        }
    };
    print!("{}", explained.text());
    let config = &explained.config;
    let Some(runtime) = super::runtime() else {
        return ExitCode::FAILURE;
    };
    let mut problems = runtime.block_on(async { offline_problems(config) });
    if let Err(e) = config.check_serving() {
        problems.push(format!("`previewd serve` would refuse to start: {e}"));
    }
    for problem in &problems {
        println!("problem: {problem}");
    }
    if !problems.is_empty() {
        return ExitCode::from(2);
    }
    if !reach {
        return ExitCode::SUCCESS;
    }
    let failures = runtime.block_on(reach_all(config));
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What `serve` reads at start and can be checked without the network: the GitHub App's
/// key, the configured preview CA, and each cluster's sealing certificate (the implicit
/// local pair and CA are made by `serve`, so they are not asked for here).
fn offline_problems(config: &Config) -> Vec<String> {
    let now = crate::clock::Clock::now(&crate::clock::SystemClock);
    let mut problems = Vec::new();
    if let Some(app @ GithubCredentials::App { .. }) = &config.github.credentials {
        if let Err(e) = crate::github::GitHub::new(&config.github.api_url, app) {
            problems.push(format!("the GitHub App's private key: {e:#}"));
        }
    }
    if config.tls.ca_cert.is_some() {
        if let Err(e) = crate::ca::from_config(config, now, LocalKeys::Existing) {
            problems.push(format!("the preview CA (tls.ca_cert, tls.ca_key): {e:#}"));
        }
    }
    let mut certs = crate::clusters::sealing_certs(config, now, LocalKeys::Existing);
    for cluster in config.clusters.iter().filter(|c| c.sealing_cert.is_some()) {
        match certs.remove(&cluster.name) {
            Some(Ok(cert)) => println!(
                "sealing certificate of {}: fingerprint {}",
                cluster.name, cert.fingerprint
            ),
            Some(Err(e)) => problems.push(format!(
                "cluster {}'s sealing certificate: {e:#}",
                cluster.name
            )),
            None => {}
        }
    }
    problems
}

/// Asks each system the configuration names; prints a line per answer, returns how many
/// failed.
async fn reach_all(config: &Config) -> usize {
    let mut failures = 0;
    let mut report = |what: String, result: anyhow::Result<String>| match result {
        Ok(detail) => println!("reached {what}: {detail}"),
        Err(e) => {
            failures += 1;
            println!("cannot reach {what}: {e:#}");
        }
    };
    let api = &config.github.api_url;
    report(
        format!("GitHub's API at {api}"),
        crate::github::GitHub::reach(api)
            .await
            .map(|()| "GET /meta answered".to_owned()),
    );
    if let Some(credentials) = &config.github.credentials {
        let what = match credentials {
            GithubCredentials::Token(_) => "GitHub with github.token",
            GithubCredentials::App { .. } => "GitHub as the App",
        };
        let login = async {
            let github = crate::github::GitHub::new(api, credentials)?;
            let login = github.login().await?;
            anyhow::Ok(format!("acting as {login}"))
        };
        report(what.to_owned(), login.await);
    }
    if config.sink.kind == SinkKind::Kubernetes {
        report(
            "Kubernetes (the Argo CD cluster)".to_owned(),
            kubernetes(config).await,
        );
    }
    failures
}

/// Connects as `serve` would and reports what previews need that the cluster lacks.
async fn kubernetes(config: &Config) -> anyhow::Result<String> {
    let sink = crate::sink::kubernetes::KubeSink::connect(&config.sink.argocd_namespace).await?;
    let (served, projects) = sink.served(&crate::requirements::needed(config)).await?;
    let missing = crate::requirements::missing(config, &served, projects.as_ref());
    anyhow::ensure!(missing.is_empty(), "it lacks {}", missing.join("; "));
    Ok("it serves everything previews need".to_owned())
}

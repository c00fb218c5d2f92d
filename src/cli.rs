//! The command line: subcommands, config loading, logging setup.

use std::path::{Path, PathBuf};

use anyhow::Context;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::Config;

#[derive(Debug, Parser)]
#[command(
    name = "previewd",
    version,
    about = "Preview environments for GitHub pull requests, delivered through Argo CD"
)]
pub struct Cli {
    /// TOML config file; without it, ./previewd.toml if present, else the embedded defaults
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the webhook server (and, as they land, the reconciler and sweeper)
    Serve,
    /// Print (or write) every manifest previewd would apply for a `pull_request` event; offline
    Render {
        /// A `pull_request` webhook payload (JSON), as GitHub sends it
        #[arg(long, value_name = "FILE")]
        event: PathBuf,
        /// Write one YAML file per Application into DIR instead of printing
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(cli.config.as_deref(), std::env::vars()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("previewd: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&config.log);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("previewd: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve => crate::server::serve(config).await,
            Command::Render { event, out } => render(&config, &event, out.as_deref()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("previewd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `previewd render`: the same decision and rendering the server makes, from a file.
fn render(config: &Config, event: &Path, out: Option<&Path>) -> anyhow::Result<()> {
    use crate::intent::{Change, Outcome};
    use crate::preview::Desired;
    use crate::webhook::{Delivery, Event};

    let body = std::fs::read(event).with_context(|| format!("reading {}", event.display()))?;
    let is_pull_request = serde_json::from_slice::<serde_json::Value>(&body)
        .with_context(|| format!("{} is not JSON", event.display()))?
        .get("pull_request")
        .is_some_and(serde_json::Value::is_object);
    if !is_pull_request {
        anyhow::bail!(
            "{} is not a pull_request event (it has no pull_request object)",
            event.display()
        );
    }
    let (action, payload) = crate::webhook::parse("pull_request", &body)
        .map_err(|e| anyhow::anyhow!("{}: {e}", event.display()))?;
    let Event::PullRequest(pr) = &payload else {
        anyhow::bail!(
            "{}: nothing to render ({})",
            event.display(),
            match &payload {
                Event::Ignored(why) => why.clone(),
                other => format!("{other:?}"),
            }
        );
    };
    let delivery = Delivery {
        hook_id: String::new(),
        guid: "render".into(),
        event: "pull_request".into(),
        action,
        payload: payload.clone(),
    };
    let intent = crate::intent::decide(
        &delivery,
        config,
        crate::clock::Clock::now(&crate::clock::SystemClock),
    );
    if intent.outcome == Outcome::Refused {
        anyhow::bail!("{}", intent.detail);
    }
    let Change::PullRequest(change) = &intent.change else {
        anyhow::bail!("{}", intent.detail)
    };
    // Placement across clusters is the reconciler's; offline, the first cluster stands in.
    let cluster = &config.clusters[0].name;
    let names = crate::naming::Names::of(
        &pr.key,
        &config
            .policy_for(&pr.key.repo)
            .unwrap_or(&config.defaults)
            .domain,
    );
    match change.desired {
        Some(Desired::Deployed) => {}
        Some(Desired::Absent) => {
            eprintln!(
                "{}: PR closed: previewd would delete Application {}/{}",
                pr.key, config.sink.argocd_namespace, names.application
            );
            return Ok(());
        }
        Some(Desired::AwaitingApproval) | Some(Desired::Draft) | None => {
            eprintln!(
                "{}: nothing to apply: {}",
                pr.key,
                if change.reason.is_empty() {
                    &intent.detail
                } else {
                    &change.reason
                }
            );
            return Ok(());
        }
    }
    let application = crate::render::helper_application(&pr.preview(cluster), config, &[])?;
    let yaml = crate::yaml::to_string(&application);
    match out {
        None => print!("---\n{yaml}"),
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let path = dir.join(format!("{}.yaml", names.application));
            std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|e| {
        eprintln!("previewd: log filter {filter:?} is invalid ({e}); using info");
        tracing_subscriber::EnvFilter::new("info")
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

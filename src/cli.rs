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
    /// Run the webhook server, the reconciler and the sweeper
    Serve,
    /// One sweep pass (expiries, warnings, pruning, orphans), then exit
    Sweep {
        /// Print what a real pass would do, and change nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// The tracked previews: repository, PR, author, state, cluster, time left
    List {
        /// The API's JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// One preview with its ledger and history (also once destroyed)
    Show {
        /// OWNER/REPO#N
        preview: String,
    },
    /// Tear a preview down; a running `previewd serve` does the work
    Destroy {
        /// OWNER/REPO#N
        preview: String,
        /// Who asks (recorded in the history)
        #[arg(long = "as", env = "USER", default_value = "operator")]
        actor: String,
        /// Return once recorded instead of following the teardown
        #[arg(long)]
        no_wait: bool,
    },
    /// The template databases (`database_template`): each generation, its base and state
    Templates,
    /// Drop every generation of a repository's template database; a running `previewd
    /// serve` does the work (the next preview or `/preview refresh-template` builds anew)
    DestroyTemplate {
        /// OWNER/REPO
        repo: String,
    },
    /// Print (or write) every manifest previewd would apply for a `pull_request` event, or
    /// the AppProjects the configuration needs; offline
    Render {
        /// A `pull_request` webhook payload (JSON), as GitHub sends it
        #[arg(long, value_name = "FILE", required_unless_present = "projects")]
        event: Option<PathBuf>,
        /// The two AppProjects (helpers and apps) for this configuration's clusters and repos
        #[arg(long, conflicts_with = "event")]
        projects: bool,
        /// Write one YAML file per Application (or `appprojects.yaml`) into DIR instead of printing
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Send one webhook delivery to the `previewd serve` of this configuration, signed with
    /// its webhook secret as GitHub signs it (to try previewd, or replay a payload)
    Deliver {
        /// The GitHub event (`X-GitHub-Event`): pull_request, issue_comment, …
        event: String,
        /// The payload (JSON), as GitHub sends it
        file: PathBuf,
    },
    /// Check the configuration: the file validated as `serve` would, and the effective
    /// values printed with where each came from
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Copy an SQLite state into the PostgreSQL state configured (`state`, or
    /// PREVIEWD_STATE): everything, in one transaction; refused while a previewd serve runs
    /// on either, or when the target holds anything
    MigrateState {
        /// The SQLite state to copy (stop the previewd serving it first)
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
    },
    /// Print a SealedSecret that the sealed-secrets controller holding CERT's key decrypts
    Seal {
        /// The controller's certificate (kubeseal --fetch-cert, or /v1/cert.pem)
        #[arg(long, value_name = "CERT.pem")]
        cert: PathBuf,
        #[arg(long)]
        namespace: String,
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "strict", value_parser = ["strict", "namespace-wide", "cluster-wide"])]
        scope: String,
        /// Secret type
        #[arg(long = "type", default_value = "Opaque")]
        type_: String,
        /// KEY=VALUE, or KEY=@FILE to read the value from a file (keeps it off the command line)
        #[arg(required = true, value_name = "KEY=VALUE")]
        values: Vec<String>,
    },
    /// Open SealedSecrets with the controller's private key(s) and print the Secrets
    Unseal {
        /// A controller private key (PEM); repeat for every key the controller holds
        #[arg(long = "key", required = true, value_name = "KEY.pem")]
        keys: Vec<PathBuf>,
        /// SealedSecret manifest(s), YAML or JSON; `-` for standard input
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Validate the file and the PREVIEWD_* variables, print the effective configuration
    /// (each value's source: default, file or env; secrets masked) and read the clusters'
    /// sealing certificates; exit 2 on a problem
    Check {
        /// Also ask GitHub's API (and, with the kubernetes sink, the Kubernetes API) whether
        /// they answer; exit 1 when one does not
        #[arg(long)]
        reach: bool,
    },
}

mod check;
mod deliver;
mod migrate;
pub mod operate;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Config {
        action: ConfigAction::Check { reach },
    } = cli.command
    {
        return check::run(cli.config.as_deref(), reach);
    }
    let config = match Config::load(cli.config.as_deref(), std::env::vars()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("previewd: {e}");
            return ExitCode::from(2);
        }
    };
    if matches!(cli.command, Command::Serve) {
        if let Err(e) = config.check_serving() {
            eprintln!("previewd: {e}");
            return ExitCode::from(2);
        }
    }
    init_logging(&config.log);
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve => crate::serve::serve(config).await,
            Command::Sweep { dry_run } => sweep(config, dry_run).await,
            Command::List { json } => crate::cli::operate::list(&config, json).await,
            Command::Show { preview } => crate::cli::operate::show(&config, &preview).await,
            Command::Destroy {
                preview,
                actor,
                no_wait,
            } => crate::cli::operate::destroy(&config, &preview, &actor, !no_wait).await,
            Command::Templates => crate::cli::operate::templates(&config).await,
            Command::DestroyTemplate { repo } => {
                crate::cli::operate::destroy_template(&config, &repo).await
            }
            Command::Render {
                event: Some(event),
                out,
                ..
            } => render(&config, &event, out.as_deref()).await,
            Command::Render { out, .. } => render_projects(&config, out.as_deref()),
            Command::Seal {
                cert,
                namespace,
                name,
                scope,
                type_,
                values,
            } => seal(&cert, &namespace, &name, &scope, type_, &values),
            Command::Unseal { keys, file } => unseal(&keys, &file),
            Command::MigrateState { from } => migrate::run(&config, &from).await,
            Command::Deliver { event, file } => deliver::deliver(&config, &event, &file).await,
            Command::Config { .. } => unreachable!("handled before the configuration loads"),
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

/// The async runtime every command runs on, or `None` (said on stderr).
///
/// One thread runs every task (issue #17). With a worker per core, work arriving on one
/// (a watch event, GitHub's answer) woke the other to steal it: an eighth of a push's
/// samples were workers parking and waking (futex, epoll_wait). Nothing holds this
/// thread long: inline reads do not wait (WAL), the intake commits here only when no
/// other writer holds the state (then one fsync), other SQLite writes run on blocking
/// threads, and a push is mostly waiting on the network.
fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            eprintln!("previewd: cannot start the async runtime: {e}");
            None
        }
    }
}

/// `previewd sweep [--dry-run]`: one pass under the lease; the plan is printed either way.
async fn sweep(config: Config, dry_run: bool) -> anyhow::Result<()> {
    let state = crate::db::State::open(&config.state).await?;
    let sink = crate::sink::Sink::from_config(&config).await?;
    let clock = std::sync::Arc::new(crate::clock::SystemClock);
    let sweeper = crate::sweep::Sweeper::new(state, config.clone(), clock).with_sink(sink);
    let mode = if dry_run {
        crate::sweep::Pass::DryRun
    } else {
        crate::sweep::Pass::Record
    };
    let Some((plan, report)) = sweeper.pass(mode).await? else {
        println!("another sweeper holds the lease: nothing done");
        return Ok(());
    };
    let prefix = if dry_run { "would " } else { "" };
    for line in plan.lines(config.remove_orphans) {
        println!("{prefix}{line}");
    }
    if !dry_run {
        println!(
            "done: {} expired, {} warned, {} delivery records pruned, {} orphans to remove; \
             a running `previewd serve` tears the expired ones down and removes the orphans",
            report.expired, report.warned, report.pruned, report.orphans_recorded
        );
    }
    Ok(())
}

/// `previewd render`: the same decision the server makes, from a file, and the one rendering
/// the reconciler applies (`render::preview`): every Application, labelled and hashed.
async fn render(config: &Config, event: &Path, out: Option<&Path>) -> anyhow::Result<()> {
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
    let names = &change.names;
    // A PR new to previewd: what its repository's gates make of it (offline, its files
    // cannot be listed, so `paths` holds it back).
    let desired = change
        .desired
        .map(|d| crate::intent::admitted(d, change, None).0);
    match desired {
        Some(Desired::Deployed) => {}
        Some(Desired::OptedOut) => {
            let why = change.opt_out.unwrap_or(crate::intent::OptOut::Paths);
            let policy = config.policy_for(&pr.key.repo).unwrap_or(&config.defaults);
            eprintln!(
                "{}: nothing to apply: {}",
                pr.key,
                crate::comment::opted_out(why, &policy.gates.trigger_label)
            );
            return Ok(());
        }
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
    let sealed = sealed_secrets(config, &pr.key.repo, cluster, names)?;
    let instance = instance(config).await?;
    let rendered = crate::render::preview(&pr.preview(cluster), names, config, &sealed, &instance)?;
    let applications = [
        (&names.application, Some(&rendered.helper)),
        (&names.app_application, rendered.app.as_ref()),
    ];
    for (name, application) in applications {
        let Some(application) = application else {
            continue;
        };
        let yaml = crate::yaml::to_string(&application.manifest);
        match out {
            None => print!("---\n{yaml}"),
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                let path = dir.join(format!("{name}.yaml"));
                std::fs::write(&path, yaml)
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}

/// The state's identity, which labels every Application (`render::LABEL_INSTANCE`): that of
/// the state `previewd serve` uses, when there is one; without one, there is no identity
/// yet, and the label is left empty rather than a state made for an offline command.
async fn instance(config: &Config) -> anyhow::Result<String> {
    if config.state.file().is_some_and(|file| !file.exists()) {
        eprintln!(
            "note: no state at {} yet: the instance label is left empty",
            config.state
        );
        return Ok(String::new());
    }
    // Read-only: an offline render neither migrates nor writes a running serve's state.
    match crate::db::read_instance_id(&config.state).await? {
        Some(id) => Ok(id),
        None => {
            eprintln!(
                "note: the state at {} has no instance id yet: the instance label is left empty",
                config.state
            );
            Ok(String::new())
        }
    }
}

/// `previewd render --projects`: the AppProjects, as one YAML stream.
fn render_projects(config: &Config, out: Option<&Path>) -> anyhow::Result<()> {
    let yaml: String = crate::projects::projects(config)
        .iter()
        .map(|project| format!("---\n{}", crate::yaml::to_string(project)))
        .collect();
    match out {
        None => print!("{yaml}"),
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let path = dir.join("appprojects.yaml");
            std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// The preview's secrets, generated and sealed for `cluster` when its certificate is at
/// hand; without one, rendering goes on without them and says so.
fn sealed_secrets(
    config: &Config,
    repo: &crate::preview::RepoName,
    cluster: &str,
    names: &crate::naming::Names,
) -> anyhow::Result<Vec<crate::render::SealedSecret>> {
    let now = crate::clock::Clock::now(&crate::clock::SystemClock);
    let mut certs =
        crate::clusters::sealing_certs(config, now, crate::clusters::LocalKeys::Existing);
    let cert = match certs.remove(cluster) {
        Some(Ok(cert)) => cert,
        Some(Err(e)) => {
            eprintln!("note: secrets left out ({e:#})");
            return Ok(Vec::new());
        }
        None => return Ok(Vec::new()),
    };
    let ca = match crate::ca::from_config(config, now, crate::clusters::LocalKeys::Existing) {
        Ok(ca) => ca,
        Err(e) => {
            eprintln!("note: TLS secret left out ({e:#})");
            None
        }
    };
    let lifetime = i64::try_from(config.defaults.max_lifetime.as_secs())?;
    crate::secrets::for_preview(
        config,
        &config.app_for(repo),
        names,
        ca.as_ref(),
        now,
        now.saturating_add(lifetime),
        &mut rand::rngs::OsRng,
    )?
    .iter()
    .map(|spec| Ok(crate::seal::seal_secret(&cert, spec)?))
    .collect()
}

/// `previewd seal`: one SealedSecret from KEY=VALUE pairs.
fn seal(
    cert: &Path,
    namespace: &str,
    name: &str,
    scope: &str,
    type_: String,
    values: &[String],
) -> anyhow::Result<()> {
    use crate::seal::{Scope, SealingCert, SecretSpec};

    for (what, value) in [("namespace", namespace), ("name", name)] {
        if !crate::config::is_dns_name(value) {
            anyhow::bail!("--{what} {value:?} is not a Kubernetes name");
        }
    }
    let pem =
        std::fs::read_to_string(cert).with_context(|| format!("reading {}", cert.display()))?;
    let now = crate::clock::Clock::now(&crate::clock::SystemClock);
    let cert = SealingCert::from_pem(&pem, now).with_context(|| cert.display().to_string())?;
    let mut data = std::collections::BTreeMap::new();
    for pair in values {
        let (key, value) = pair
            .split_once('=')
            .with_context(|| format!("{pair:?} is not KEY=VALUE"))?;
        if key.is_empty()
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            anyhow::bail!("{key:?} is not a valid Secret key (letters, digits, '-', '_', '.')");
        }
        let value = match value.strip_prefix('@') {
            Some(path) => std::fs::read(path)
                .with_context(|| format!("reading the value of {key} from {path}"))?,
            None => value.as_bytes().to_vec(),
        };
        if data.insert(key.to_owned(), value).is_some() {
            anyhow::bail!("{key} is given twice");
        }
    }
    let scope = Scope::parse(scope).context("unknown scope")?;
    let spec = SecretSpec {
        name: name.into(),
        namespace: namespace.into(),
        scope,
        type_,
        labels: Default::default(),
        data,
        // Every value given is sealed: previewd cannot know which are public.
        public: Default::default(),
        templates: Default::default(),
    };
    let sealed = crate::seal::seal_secret(&cert, &spec)?;
    print!(
        "---\n{}",
        crate::yaml::to_string(&crate::seal::sealed_secret_object(&sealed))
    );
    Ok(())
}

/// `previewd unseal`: the Secrets the controller would make, or the values that fail.
fn unseal(keys: &[PathBuf], file: &Path) -> anyhow::Result<()> {
    let keys = keys
        .iter()
        .map(|path| {
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            crate::seal::private_key_from_pem(&pem).with_context(|| path.display().to_string())
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let text = if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let mut failed = Vec::new();
    let mut opened = 0;
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let object: serde_json::Value = serde::Deserialize::deserialize(document)
            .with_context(|| format!("{} is not YAML", file.display()))?;
        if object["kind"] != "SealedSecret" {
            continue;
        }
        let at = format!(
            "{}/{}",
            object["metadata"]["namespace"].as_str().unwrap_or(""),
            object["metadata"]["name"].as_str().unwrap_or("")
        );
        match crate::seal::unseal_object(&keys, &object) {
            Ok(secret) => {
                opened += 1;
                print!("---\n{}", crate::yaml::to_string(&secret));
            }
            Err(failures) => failed.extend(
                failures
                    .into_iter()
                    .map(|(key, e)| format!("{at} {key}: {e}")),
            ),
        }
    }
    if !failed.is_empty() {
        anyhow::bail!(
            "{} value(s) do not unseal:\n  {}",
            failed.len(),
            failed.join("\n  ")
        );
    }
    if opened == 0 {
        anyhow::bail!("{} holds no SealedSecret", file.display());
    }
    Ok(())
}

fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|e| {
        eprintln!("previewd: log filter {filter:?} is invalid ({e}); using info");
        tracing_subscriber::EnvFilter::new("info")
    });
    // Colour only for a person at a terminal: a collector (kubelet, journald) would keep
    // the escape codes in every line.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

//! Every scalar configuration key, declared once. The file's known keys, the
//! `PREVIEWD_<SECTION>_<KEY>` variables, the plain defaults validation falls back to and the
//! table in docs/configuration.md are all derived from `KEYS`, so a key cannot be added to one and not the others.

/// How a key's value is written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    Text,
    /// `true` or `false` (`1`/`0` too, from the environment).
    Flag,
    /// An integer, or a string holding one (`app_id = 12345` and `app_id = "12345"`).
    Number,
}

/// What a key is when it is not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// This value: validation uses it, and docs/configuration.md shows it.
    Is(&'static str),
    /// Computed or absent; docs/configuration.md says what happens.
    Says(&'static str),
}

#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// As written in the file: `section.key`, or `key` at the top.
    pub name: &'static str,
    pub kind: Kind,
    pub fallback: Fallback,
    /// The table's "meaning" column.
    pub doc: &'static str,
}

use Fallback::{Is, Says};
use Kind::{Flag, Number, Text};

const fn key(name: &'static str, kind: Kind, fallback: Fallback, doc: &'static str) -> Key {
    Key {
        name,
        kind,
        fallback,
        doc,
    }
}

/// Every scalar key, in the table's order.
#[rustfmt::skip]
pub const KEYS: &[Key] = &[
    key("listen", Text, Is("127.0.0.1:8080"), "HTTP address"),
    key("state", Text, Is("previewd.db"), "SQLite file, created and migrated at start (one replica); or a PostgreSQL URL, `postgresql://user:password@host/db`, which several replicas share"),
    key("log", Text, Is("info"), "log filter (`debug`, `previewd=debug,info`, …)"),
    key("public_url", Text, Says("`http://<listen>` on a loopback `listen`, else none"),
        "where people open the dashboard; Deployment statuses link a preview's page there"),
    key("github.webhook_secret", Text, Says("none: every delivery is refused with 401"),
        "HMAC secret (at least 16 bytes)"),
    key("github.webhook_secret_file", Text, Says("none"),
        "a file holding the HMAC secret instead (one of the two)"),
    key("github.api_url", Text, Is("https://api.github.com"), "REST base (GHES or a test server)"),
    key("github.token", Text, Says("none: reporting to GitHub is off"),
        "a token to act with, or instead `github.app_id` + `github.private_key_path`"),
    key("github.app_id", Number, Says("none"), "the GitHub App's numeric ID"),
    key("github.private_key_path", Text, Says("none"), "the GitHub App's PEM private key"),
    key("github.resync_interval", Text, Is("10m"),
        "how often open PRs are listed to heal lost webhooks"),
    key("github.web_url", Text, Is("https://github.com"),
        "GitHub's web root (a GitHub Enterprise Server's root): where people sign in"),
    key("login.client_id", Text,
        Says("none: sign-in is off; only `access = \"public\"` previews and share links open"),
        "the OAuth client people sign in with: an OAuth App's, or the GitHub App's; its \
         callback URL is `<public_url>/auth/callback`"),
    key("login.client_secret", Text, Says("none"), "that client's secret (with `login.client_id`)"),
    key("login.session_secret", Text, Says("none: a key is made beside the state"),
        "at least 32 bytes sealing sessions, sign-in hand-offs and share links (the same on \
         every replica); changing it signs everyone out and voids every share link"),
    key("login.session_ttl", Text, Is("12h"), "a sign-in lasts this long"),
    key("login.access_cache", Text, Is("5m"),
        "a person's access to a repository is asked of GitHub at most this often: someone \
         removed there is out within it"),
    key("sink.kind", Text, Is("directory"), "`directory` or `kubernetes`"),
    key("sink.directory", Text, Is("rendered"), "one YAML file per Application (directory sink)"),
    key("sink.argocd_namespace", Text, Is("argocd"),
        "namespace of Application objects (kubernetes sink)"),
    key("sink.stuck_after", Text, Is("15m"),
        "a teardown still waiting this long is reported (never forced)"),
    key("defaults.ttl", Text, Is("72h"), "preview lifetime after the last push or extend"),
    key("defaults.domain", Text, Is("preview.localhost"), "previews are served at `<slug>.<domain>`"),
    key("defaults.warn_before", Text, Is("24h"), "expiry warning lead time"),
    key("defaults.max_lifetime", Text, Is("14d"), "no push, extend or keep goes past this"),
    key("defaults.deploy_drafts", Flag, Is("false"), "deploy draft PRs too"),
    key("defaults.allow_keep", Flag, Is("true"), "whether `/preview keep` may pin a preview"),
    key("defaults.keep_for", Text, Says("`max_lifetime`"), "how long `/preview keep` pins it"),
    key("defaults.max_per_repo", Number, Says("none"), "cap on live previews per repository"),
    key("defaults.max_per_author", Number, Says("none"), "cap on live previews per PR author"),
    key("defaults.at_cap", Text, Is("queue"),
        "at a cap: `queue` the newcomer, or `evict` the least recently active unpinned preview"),
    key("defaults.access", Text, Is("repo"),
        "who may open a preview: `repo` (people who can read the repository), `org` (members of \
         its owner organisation) or `public` (anyone); writers can also mint share links"),
    key("defaults.sleep_after", Text, Says("none: previews never sleep"),
        "a preview no request reached for this long sleeps: its app scaled to zero, its data \
         kept; the next request wakes it (the app chart must render its replicas from \
         `replicaCount` or `preview.asleep`)"),
    key("defaults.cpu", Text, Is("4"),
        "the CPU one preview namespace may request in all (its ResourceQuota `requests.cpu`)"),
    key("defaults.memory", Text, Is("8Gi"),
        "the memory one preview namespace may request and be limited to in all"),
    key("defaults.pods", Number, Is("20"), "the most pods one preview namespace may hold"),
    key("defaults.container_cpu", Text, Is("100m"),
        "the CPU request of a container that names none (its LimitRange default)"),
    key("defaults.container_memory", Text, Is("256Mi"),
        "the memory request and limit of a container that names none"),
    key("lease.enabled", Flag,
        Says("on with a PostgreSQL `state` and the kubernetes sink; off otherwise"),
        "stand for the Lease that says which replica runs the reconciler, the sweeper, resync \
         and the feedback worker (needs `sink.kind = \"kubernetes\"`); off, previewd runs as one \
         replica and says so at start"),
    key("lease.namespace", Text,
        Says("the pod's namespace (its service account's); required off Kubernetes"),
        "where the Lease lives"),
    key("lease.name", Text, Is("previewd"), "the Lease's name"),
    key("lease.identity", Text, Says("the host's name (the pod's); a random suffix is always added"),
        "who this replica says it is in the Lease"),
    key("lease.duration", Text, Is("12s"),
        "others take the Lease over after seeing it unchanged this long: a killed holder is \
         replaced within it plus `retry_period`"),
    key("lease.renew_deadline", Text, Is("8s"),
        "the holder writes only until its last renew's send time plus this (less than `duration`)"),
    key("lease.retry_period", Text, Is("2s"), "how often the Lease is read, and renewed by its holder"),
    key("sweep.interval", Text, Is("1m"), "sweeper period"),
    key("sweep.delivery_retention", Text, Is("7d"),
        "delivery records kept this long (GitHub redelivers up to 3 days back)"),
    key("sweep.remove_orphans", Flag, Is("false"),
        "remove previewd-labelled Applications without a preview (otherwise only reported)"),
    key("api.token", Text,
        Says("none: allowed only on a loopback `listen` (read-only and open there, destroy \
              through the API refused); `serve` refuses to start without it otherwise"),
        "bearer token for `/api`, the dashboard, API destroy, and `/metrics` off loopback"),
    key("metrics.listen", Text, Says("none"),
        "a second address serving only `/metrics`, without the token (for a Prometheus the \
         NetworkPolicy admits)"),
    key("chart.repo_url", Text, Is("https://github.com/previewd/previewd.git"),
        "where Argo CD finds the helpers' chart"),
    key("chart.path", Text, Is("helpers-chart"), "the chart's path in that repository"),
    key("chart.revision", Text, Says("`v<version>`"), "the chart's pinned revision (a tag or SHA)"),
    key("chart.project", Text, Is("previews"), "the helpers' AppProject"),
    key("chart.apps_project", Text, Is("preview-apps"), "the apps' AppProject (never the helpers')"),
    key("chart.legacy_names", Flag, Is("false"),
        "the AppProjects also admit the namespaces of previews created before names were \
         recorded (set it while any lives after an upgrade)"),
    key("database.mode", Text, Is("shared"),
        "`shared` (Job on a shared server), `cnpg` (CloudNativePG) or `off`"),
    key("database.namespace", Text, Says("`previewd-system` (`postgres` for cnpg)"),
        "provisioner namespace (shared) or the Cluster's namespace (cnpg)"),
    key("database.admin_secret", Text, Is("postgres-admin"),
        "the shared server's admin Secret (keys `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`)"),
    key("database.host", Text, Says("`postgres.<namespace>.svc`"),
        "the shared server as previews reach it"),
    key("database.port", Number, Is("5432"), "the shared server's port"),
    key("database.image", Text, Is("postgres:17-alpine"), "the psql image"),
    key("database.cnpg_cluster", Text, Is("shared-pg"), "the CloudNativePG Cluster"),
    key("database.drop_on_delete", Flag, Is("true"),
        "drop the database and role on teardown (`false` keeps them, in both modes)"),
    key("database.max_size", Text, Is("5GiB"),
        "the most a preview's database may hold (`MiB`, `GiB`, `TiB`): checked every 5 minutes \
         on the server; past it the database takes no more connections and the preview fails \
         saying so"),
    key("database.max_connections", Number, Is("20"),
        "the most sessions a preview's database role may hold (its `CONNECTION LIMIT`), so one \
         app cannot take every slot on the server"),
    key("database.server_size", Text, Says("none: spares are made without looking"),
        "the shared server's disk for databases: template spares are made only while every \
         database, the new spare included, fits within it"),
    key("tls.mode", Text, Is("cert-manager"), "`cert-manager`, `sealed` or `off`"),
    key("tls.issuer", Text, Is("previewd-previews"),
        "cert-manager issuer (prefer DNS-01 or a CA: Let's Encrypt allows 50 certificates per \
         domain per week)"),
    key("tls.issuer_kind", Text, Is("ClusterIssuer"), "`ClusterIssuer` or `Issuer`"),
    key("tls.ca_cert", Text, Says("none: a CA is made beside the state"),
        "the preview CA's certificate (sealed mode)"),
    key("tls.ca_key", Text, Says("none"), "the preview CA's key (with `tls.ca_cert`)"),
    key("dns.enabled", Flag, Is("true"), "DNSEndpoint for clusters with an `ingress_target`"),
    key("dns.ttl", Text, Is("5m"), "the DNS records' TTL"),
    key("mail.image", Text, Is("axllent/mailpit:v1.30.5"),
        "the mail catcher (Mailpit: SMTP, and a web inbox at `/__mail/` on the preview's host)"),
    key("mail.max_messages", Number, Is("500"), "messages a preview's catcher keeps (the oldest go)"),
    key("mail.ingress_namespace", Text, Is("ingress-nginx"),
        "the ingress controller's namespace: the only one whose pods reach a catcher's inbox \
         (a NetworkPolicy; the app's own namespace reaches its SMTP port)"),
    key("mail.relay_host", Text, Says("none: no mail ever leaves a preview"),
        "an SMTP relay for `[[repos]] mail_relay` recipients, accepting mail from the preview \
         namespaces without credentials"),
    key("mail.relay_port", Number, Is("587"), "the relay's port"),
    key("mail.relay_starttls", Flag, Is("true"), "STARTTLS to the relay"),
    key("messaging.mode", Text, Is("shared"),
        "`shared` (Jobs through a RabbitMQ's management API) or `operator` (the \
         messaging-topology-operator's `Vhost`, `User`, `Permission`)"),
    key("messaging.namespace", Text, Says("`previewd-system` (`rabbitmq` for operator)"),
        "shared: the provisioner namespace (admin Secret, Jobs); operator: the RabbitmqCluster's"),
    key("messaging.admin_secret", Text, Is("rabbitmq-admin"),
        "shared: the Secret with `RABBITMQ_MANAGEMENT_URL`, `RABBITMQ_ADMIN_USER`, \
         `RABBITMQ_ADMIN_PASSWORD`"),
    key("messaging.host", Text, Says("`rabbitmq.<namespace>.svc`"), "the broker as apps reach it"),
    key("messaging.port", Number, Is("5672"), "the broker's AMQP port"),
    key("messaging.image", Text, Is("curlimages/curl:8.17.0"), "shared: the Jobs' image (sh and curl)"),
    key("messaging.cluster", Text, Is("rabbitmq"), "operator: the RabbitmqCluster"),
    key("messaging.max_connections", Number, Is("20"), "connections a preview's vhost may hold"),
    key("messaging.max_channels", Number, Is("100"), "channels a preview's user may hold"),
    key("messaging.max_queues", Number, Is("20"), "queues a preview's vhost may hold"),
    key("messaging.max_queue_messages", Number, Is("1000"),
        "messages each queue of a preview may hold (`max_queue_size` counts bodies only, not \
         headers)"),
    key("messaging.max_queue_size", Text, Is("16MiB"),
        "bytes each queue of a preview may hold (`MiB`, `GiB`; an operator policy the app \
         cannot change; past it the oldest messages go. A stream is bounded only by whole \
         segments, 500 MB by default)"),
];

/// The array tables, whose fields are checked by their own structs; the table lists them
/// after the scalar keys: (keys, default, meaning).
#[rustfmt::skip]
const TABLES: &[(&str, &str, &str)] = &[
    ("`[[clusters]]` `name`, `server`, `sealing_cert`, `capacity`, `ingress_target`",
        "one cluster `in-cluster`", "placement targets"),
    ("`[[repos]]` `name` + any `defaults.*` key, `image`, `image_tag`, `migrate_command`, `seed`, `seed_command`",
        "none: every repository is accepted",
        "allow-list, per-repo policy, and the app's image, migrations and seed"),
    ("`[[repos]]` `trigger`, `trigger_label`", "`auto`, `preview`",
        "`auto`: every PR; `label`: only while the PR carries the label (removing it tears the \
         preview down); `comment`: only after a writer's `/preview deploy`"),
    ("`[[repos]]` `paths`", "none: every PR",
        "globs (`globset`, from the repository's root); a PR gets a preview only if it changes a \
         matching file, and keeps it once it has one"),
    ("`[[repos]]` `ignore_authors`", "none",
        "PR authors (like `dependabot[bot]`) whose PRs get a preview only on a writer's \
         `/preview deploy`"),
    ("`[[repos]]` `wait_for`", "none",
        "check runs, commit-status contexts or workflow names that must succeed on the head \
         SHA before migrations, seed commands or the app run; the rest is applied at once"),
    ("`[[repos]]` `database_template`, `template_refresh`, `template_idle`, `template_spares`", "`false`, `24h`, `14d`, `2`",
        "previews' databases are cloned from a per-repository template database, built (migrated \
         and seeded once) from the default branch's head; a push there rebuilds it at most every \
         `template_refresh` (a writer's `/preview refresh-template` at once); a template with no \
         preview for `template_idle` is dropped; each ready generation keeps `template_spares` \
         (0 to 10) whole copies made ahead, which a new preview or a reseed claims with a rename. \
         Needs `database.mode` `shared` or `cnpg`"),
    ("`[[repos]]` `app_service`", "none: no Ingress",
        "`NAME:PORT` (a port number or name): the app's Service the preview's Ingress sends \
         people to, behind the login; app charts may not publish an Ingress themselves"),
    ("`[[repos]]` `mail`, `mail_relay`", "`false`, none",
        "a mail catcher per preview (the app gets `SMTP_HOST`, `SMTP_PORT`, `SMTP_USERNAME`, \
         `SMTP_PASSWORD`); `mail_relay` names the only addresses mail is relayed to (through \
         `mail.relay_host`)"),
    ("`[[repos]]` `messaging`", "none",
        "`\"rabbitmq\"`: a vhost and user per preview on the broker of `[messaging]` (the app \
         gets `AMQP_URL` and its parts)"),
    ("`[[repos]]` `app_chart`, `app_repo_url`", "none; `https://github.com/<owner>/<repo>.git`",
        "the app's own chart (path in the repository): its Application follows the helpers' \
         health gate"),
];

/// Keys whose values are secrets: shown as set or not, never as written.
pub(super) const SECRETS: &[&str] = &[
    "github.webhook_secret",
    "github.token",
    "api.token",
    "login.client_secret",
    "login.session_secret",
];

pub fn is_secret(key: &str) -> bool {
    SECRETS.contains(&key)
}

/// `defaults.ttl` -> `PREVIEWD_DEFAULTS_TTL`.
pub fn env_name(key: &str) -> String {
    format!("PREVIEWD_{}", key.replace('.', "_").to_ascii_uppercase())
}

pub(super) fn find(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|key| key.name == name)
}

/// Whether `[name]` is a section of the file.
pub(super) fn is_section(name: &str) -> bool {
    KEYS.iter().any(|key| {
        key.name
            .split_once('.')
            .is_some_and(|(section, _)| section == name)
    })
}

/// The plain default of `name`. Panics for a key not declared with one: a bug, which every
/// test that loads a configuration finds.
pub(super) fn default_of(name: &str) -> &'static str {
    match find(name).map(|key| key.fallback) {
        Some(Is(value)) => value,
        other => panic!("config key {name} is not declared with a plain default: {other:?}"),
    }
}

pub const README_START: &str = "<!-- config-keys:start (generated from src/config/keys.rs) -->";
pub const README_END: &str = "<!-- config-keys:end -->";

/// docs/configuration.md's table, between its markers (`UPDATE_DOCS=1 cargo test --lib
/// config::` writes it there).
pub fn readme_table() -> String {
    let mut out = format!("{README_START}\n| key | default | meaning |\n|---|---|---|\n");
    for key in KEYS {
        let fallback = match key.fallback {
            Is(value) => format!("`{value}`"),
            Says(text) => text.to_owned(),
        };
        out += &format!("| `{}` | {fallback} | {} |\n", key.name, key.doc);
    }
    for (keys, fallback, doc) in TABLES {
        out += &format!("| {keys} | {fallback} | {doc} |\n");
    }
    out + README_END
}

//! helpers-chart/files/rabbitmq.sh, the hook Jobs' script, against a real RabbitMQ
//! (Debian's, started here): a preview's user works in its own vhost and nowhere else,
//! within its bounds; create is idempotent and never takes over what is not previewd's;
//! delete works with the app still connected; no secret reaches a process's argv.
//! The app is pika (tests/messaging/amqp.py), run with the test venv's Python.

#[path = "common/output.rs"]
mod output;
#[path = "common/rabbitmq.rs"]
mod rabbitmq;
pub(crate) use output::{failed, ok};

#[path = "messaging/bounds.rs"]
mod bounds;
#[path = "messaging/isolation.rs"]
mod isolation;
#[path = "messaging/ownership.rs"]
mod ownership;
#[path = "messaging/provisioning.rs"]
mod provisioning;
#[path = "messaging/teardown.rs"]
mod teardown;

use std::process::{Command, Output, Stdio};

use previewd::naming::Names;
use rabbitmq::Broker;

pub(crate) const MAX_CONNECTIONS: u32 = 3;
pub(crate) const MAX_QUEUES: u32 = 4;
pub(crate) const MAX_QUEUE_BYTES: u32 = 10_000;
pub(crate) const MAX_QUEUE_MESSAGES: u32 = 20;
pub(crate) const MAX_CHANNELS: u32 = 8;

/// One preview's side of the broker: its slug (vhost and user), and the password whose
/// hash previewd seals for the create Job.
pub(crate) struct Preview {
    pub(crate) key: String,
    pub(crate) slug: String,
    pub(crate) password: String,
    pub(crate) hash: String,
}

impl Preview {
    /// `key` is `owner/repo#number`; every test uses repositories of its own.
    pub(crate) fn of(key: &str) -> Self {
        let slug = Names::of(&key.parse().unwrap(), "example.com").slug;
        let password = format!("pw-{:016x}", rand::random::<u64>());
        let hash = previewd::secrets::rabbitmq_password_hash(&password, rand::random());
        Self {
            key: key.to_owned(),
            slug,
            password,
            hash,
        }
    }

    pub(crate) fn broker(&self) -> &'static Broker {
        Broker::shared()
    }

    /// The Job's environment beyond the admin Secret: the delete Job's (`create` false) or
    /// the create Job's.
    pub(crate) fn env(&self, create: bool) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("VHOST", self.slug.clone()),
            ("PREVIEW_USER", self.slug.clone()),
            ("PREVIEW", self.key.clone()),
        ];
        if create {
            env.extend([
                ("PASSWORD_HASH", self.hash.clone()),
                ("MAX_CONNECTIONS", MAX_CONNECTIONS.to_string()),
                ("MAX_QUEUES", MAX_QUEUES.to_string()),
                ("MAX_QUEUE_BYTES", MAX_QUEUE_BYTES.to_string()),
                ("MAX_QUEUE_MESSAGES", MAX_QUEUE_MESSAGES.to_string()),
                ("MAX_CHANNELS", MAX_CHANNELS.to_string()),
            ]);
        }
        env
    }

    pub(crate) fn run_create(&self) -> Output {
        self.broker().script("create", &self.env(true))
    }

    pub(crate) fn run_delete(&self) -> Output {
        self.broker().script("delete", &self.env(false))
    }

    /// The create Job, which must succeed.
    pub(crate) fn create(&self) -> String {
        ok(&self.run_create(), &format!("create {}", self.key))
    }

    /// The delete Job, which must succeed.
    pub(crate) fn delete(&self) -> String {
        ok(&self.run_delete(), &format!("delete {}", self.key))
    }

    /// The app: amqp.py's `action` as this preview's user on `vhost`.
    pub(crate) fn amqp_on(&self, vhost: &str, action: &str, args: &[u32]) -> serde_json::Value {
        let output = self.app(vhost, action, args).output().unwrap();
        last_line(&output)
    }

    /// The app on its own vhost.
    pub(crate) fn amqp(&self, action: &str, args: &[u32]) -> serde_json::Value {
        self.amqp_on(&self.slug, action, args)
    }

    /// amqp.py as this preview's user on `vhost`, not yet run.
    pub(crate) fn app(&self, vhost: &str, action: &str, args: &[u32]) -> Command {
        let python = std::env::var("PREVIEWD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let mut command = Command::new(python);
        command
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/messaging/amqp.py"
            ))
            .arg(action)
            .args(args.iter().map(u32::to_string))
            .env("AMQP_PORT", self.broker().amqp_port.to_string())
            .env("AMQP_USER", &self.slug)
            .env("AMQP_PASSWORD", &self.password)
            .env("AMQP_VHOST", vhost)
            .stdin(Stdio::null());
        command
    }

    /// A management API request as this preview's user: its status.
    pub(crate) fn api(&self, method: &str, path: &str, body: Option<&str>) -> u16 {
        self.broker()
            .api(&self.slug, &self.password, method, path, body)
            .0
    }

    /// Everything the broker holds of this preview, as the admin sees it.
    pub(crate) fn state(&self) -> Vec<(u16, String)> {
        let (vhost, user) = (&self.slug, &self.slug);
        [
            format!("/api/vhosts/{vhost}"),
            format!("/api/users/{user}"),
            format!("/api/users/{user}/permissions"),
            format!("/api/vhost-limits/{vhost}"),
            format!("/api/user-limits/{user}"),
            format!("/api/operator-policies/{vhost}"),
            format!("/api/policies/{vhost}"),
        ]
        .iter()
        .map(|path| self.broker().admin("GET", path, None))
        .collect()
    }
}

/// The last line amqp.py printed, as JSON.
pub(crate) fn last_line(output: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("ModuleNotFoundError"),
        "amqp.py needs pika (tests/requirements.txt): run scripts/test\n{stderr}"
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|_| panic!("amqp.py printed no JSON: {stdout}{stderr}"))
}

//! A throwaway RabbitMQ (Debian's `rabbitmq-server`) with the management plugin, in a
//! temporary directory, on free loopback ports, with a node name and epmd of its own.
//! One broker serves a whole test binary (`Broker::shared`); tests keep apart by vhost.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
pub const ADMIN_USER: &str = "previewd-test-admin";
/// With a `"`, a `\` and a space: what curl's config syntax must escape.
pub const ADMIN_PASSWORD: &str = "admin \"pass\\word\" zebra-quokka";
const BOOTSTRAP_USER: &str = "bootstrap";
const BOOTSTRAP_PASSWORD: &str = "bootstrap-5f0c2e";

pub struct Broker {
    pub dir: PathBuf,
    pub amqp_port: u16,
    pub management_port: u16,
    /// The watchdog shell that started epmd and the broker. It kills both (their process
    /// groups) and removes `dir` when its stdin closes: when this is dropped, or when the
    /// test process ends however it ends (a static is never dropped).
    watchdog: Mutex<Option<(Child, ChildStdin)>>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Broker {
    /// The test binary's broker, started on first use.
    pub fn shared() -> &'static Broker {
        static BROKER: OnceLock<Broker> = OnceLock::new();
        BROKER.get_or_init(Broker::start)
    }

    pub fn start() -> Broker {
        assert!(
            Path::new(SERVER).exists(),
            "{SERVER} is missing: run scripts/test, which installs Debian's rabbitmq-server"
        );
        let dir = tempfile::Builder::new()
            .prefix("previewd-rabbitmq-")
            .tempdir()
            .unwrap()
            .keep();
        let (amqp_port, management_port, dist_port, epmd_port) =
            (free_port(), free_port(), free_port(), free_port());
        let file = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let plugins = file("enabled_plugins", "[rabbitmq_management].\n");
        // The config's user only makes the admin the tests use (an administrator, as an
        // operator's would be, and not guest), whose password the config syntax could
        // not hold.
        let config = file(
            "rabbitmq.conf",
            &format!(
                "listeners.tcp.default = 127.0.0.1:{amqp_port}\n\
                 management.tcp.port = {management_port}\n\
                 management.tcp.ip = 127.0.0.1\n\
                 default_user = {BOOTSTRAP_USER}\n\
                 default_pass = {BOOTSTRAP_PASSWORD}\n\
                 default_user_tags.administrator = true\n\
                 default_permissions.configure = .*\n\
                 default_permissions.read = .*\n\
                 default_permissions.write = .*\n\
                 collect_statistics_interval = 500\n\
                 log.console = false\n\
                 log.file.level = info\n"
            ),
        );
        let env_file = file("rabbitmq-env.conf", "");
        // Job control is off in a script, so `setsid` gives epmd and the broker (with the
        // Erlang VM and its helpers) process groups of their own, which the watchdog kills
        // whole; `read` returns when the test process's end of the pipe closes.
        let script = r#"
            setsid epmd -port "$ERL_EPMD_PORT" </dev/null >"$DIR/epmd.log" 2>&1 &
            epmd=$!
            setsid "$SERVER" </dev/null >"$DIR/server.log" 2>&1 &
            broker=$!
            read -r _ || true
            kill -s KILL -- "-$broker" 2>/dev/null || kill -s KILL "$broker"
            kill -s KILL -- "-$epmd" 2>/dev/null || kill -s KILL "$epmd"
            wait
            rm -rf "$DIR"
        "#;
        let mut child = Command::new("sh")
            .args(["-c", script])
            .env("DIR", &dir)
            .env("SERVER", SERVER)
            // The cookie lands in $HOME.
            .env("HOME", &dir)
            .env("ERL_EPMD_PORT", epmd_port.to_string())
            .env(
                "RABBITMQ_NODENAME",
                format!("previewd-test-{}@localhost", std::process::id()),
            )
            .env("RABBITMQ_DIST_PORT", dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_CONFIG_FILE", &config)
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", dir.join("advanced.config"))
            .env("RABBITMQ_CONF_ENV_FILE", &env_file)
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", &plugins)
            .env("RABBITMQ_PID_FILE", dir.join("rabbitmq.pid"))
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let broker = Broker {
            dir,
            amqp_port,
            management_port,
            watchdog: Mutex::new(Some((child, stdin))),
        };
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let bootstrap = |method, path, body: serde_json::Value| {
                let body = body.to_string();
                broker.api(
                    BOOTSTRAP_USER,
                    BOOTSTRAP_PASSWORD,
                    method,
                    path,
                    Some(&body),
                )
            };
            if broker
                .api(
                    BOOTSTRAP_USER,
                    BOOTSTRAP_PASSWORD,
                    "GET",
                    "/api/overview",
                    None,
                )
                .0
                == 200
            {
                let admin = format!("/api/users/{ADMIN_USER}");
                let made = bootstrap(
                    "PUT",
                    &admin,
                    serde_json::json!({"password": ADMIN_PASSWORD, "tags": "administrator"}),
                );
                assert_eq!(made.0, 201, "making the admin: {}", made.1);
                let all = serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"});
                let granted = bootstrap("PUT", &format!("/api/permissions/%2F/{ADMIN_USER}"), all);
                assert_eq!(granted.0, 201, "granting the admin: {}", granted.1);
                let (status, body) =
                    broker.admin("DELETE", &format!("/api/users/{BOOTSTRAP_USER}"), None);
                assert_eq!(status, 204, "deleting the bootstrap user: {body}");
                return broker;
            }
            assert!(
                Instant::now() < until,
                "RabbitMQ did not answer on /api/overview within 60 s: {}",
                broker.logs()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The broker's own output and log, for a failure message.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for name in ["server.log", "epmd.log"] {
            text += &std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        }
        if let Ok(entries) = std::fs::read_dir(self.dir.join("log")) {
            for entry in entries.flatten() {
                text += &std::fs::read_to_string(entry.path()).unwrap_or_default();
            }
        }
        text
    }

    pub fn management_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.management_port)
    }

    /// A management API request as `user`: (status, body). The request goes through curl,
    /// the credentials on its stdin.
    pub fn api(
        &self,
        user: &str,
        password: &str,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, String) {
        let mut command = Command::new("curl");
        command
            .args(["--disable", "--silent", "--show-error", "--max-time", "30"])
            .args(["--config", "-", "--request", method])
            .args(["--header", "content-type: application/json"])
            .args(["--write-out", "\n%{http_code}"])
            .arg(format!("{}{path}", self.management_url()));
        if let Some(body) = body {
            command.args(["--data-binary", body]);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let escaped = format!("{user}:{password}")
            .replace('\\', "\\\\")
            .replace('"', "\\\"");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("user = \"{escaped}\"\n").as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        (status.trim().parse().unwrap_or(0), body.to_owned())
    }

    /// A management API request as the administrator.
    pub fn admin(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        self.api(ADMIN_USER, ADMIN_PASSWORD, method, path, body)
    }

    /// A GET as the administrator that must answer 200, as JSON.
    pub fn get(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.admin("GET", path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// The script as the chart's Job runs it: `sh /scripts/rabbitmq.sh <action>` with
    /// busybox's sh and the system curl, the admin Secret's keys and `env` as the
    /// environment, and nothing else.
    pub fn script(&self, action: &str, env: &[(&str, String)]) -> Output {
        self.script_with_path(action, env, "/usr/bin:/bin")
    }

    pub fn script_with_path(&self, action: &str, env: &[(&str, String)], path: &str) -> Output {
        let tmp = tempfile::tempdir().unwrap();
        Command::new("busybox")
            .arg("sh")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/helpers-chart/files/rabbitmq.sh"
            ))
            .arg(action)
            .env_clear()
            .env("PATH", path)
            .env("TMPDIR", tmp.path())
            .env("RABBITMQ_MANAGEMENT_URL", self.management_url())
            .env("RABBITMQ_ADMIN_USER", ADMIN_USER)
            .env("RABBITMQ_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some((mut child, stdin)) = self.watchdog.lock().unwrap().take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

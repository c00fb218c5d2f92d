//! A real nginx (Debian's `/usr/sbin/nginx`) configured as ingress-nginx configures itself
//! for an Ingress with `nginx.ingress.kubernetes.io/auth-url`, `auth-signin` and
//! `auth-response-headers`, for tests of previewd as its forward-auth endpoint.
//!
//! What is mirrored, from kubernetes/ingress-nginx at
//! dbb11b92ddb77bee9c35e462479129354c84f939 (2026-03-20); nginx.tmpl is
//! `rootfs/etc/nginx/template/nginx.tmpl`, template.go
//! `internal/ingress/controller/template/template.go`:
//!
//! - the auth location, nginx.tmpl 1006-1127: `location = /_external-auth-<base64url of the
//!   path>-<pathType>` (template.go `buildAuthLocation`, 556-575), `internal`, access log
//!   off, `proxy_intercept_errors off`, `proxy_pass_request_body off`,
//!   `Content-Length ""`, `X-Forwarded-Proto ""`, `X-Request-ID $req_id`, `Host` the auth
//!   URL's host name without its port (`internal/ingress/annotations/authreq/main.go` 486:
//!   `authURL.Hostname()`), `X-Original-URL $scheme://$http_host$request_uri`,
//!   `X-Original-Method`, `X-Sent-From "nginx-ingress-controller"`, `X-Real-IP`,
//!   `X-Forwarded-For $remote_addr`, `X-Auth-Request-Redirect $request_uri`, the default
//!   proxy buffers, `proxy_http_version 1.1`, and `set $target <auth-url>; proxy_pass
//!   $target;` (no `auth-keepalive`, the default: the plain `auth_request` path);
//! - the sign-in location, nginx.tmpl 1129-1148: a named location (`@` + a hash of the path
//!   and the sign-in URL, `buildAuthSignURLLocation`, template.go 1204-1209) that adds
//!   `Set-Cookie $auth_cookie` and returns 302 to the sign-in URL with
//!   `rd=$pass_access_scheme://$http_host$escaped_request_uri` (`buildAuthSignURL`,
//!   template.go 1183-1202: `&rd=` when the URL has a query already, as is when it names
//!   `rd` itself; `auth-signin-redirect-param` renames `rd`);
//! - the app's location, nginx.tmpl 1150-1451: `set $pass_access_scheme $scheme`,
//!   `$pass_server_port`, `$best_http_host`, `$pass_port` (1190-1199, then Lua's rewrite,
//!   `rootfs/etc/nginx/lua/lua_ingress.lua` 112-155), `auth_request`, `auth_request_set
//!   $auth_cookie $upstream_http_set_cookie`, `add_header Set-Cookie $auth_cookie` (`always`
//!   with `auth-always-set-cookie`), per response header `auth_request_set $authHeaderN
//!   $upstream_http_<name>` and `proxy_set_header '<Name>' $authHeaderN`
//!   (`buildAuthResponseHeaders`, template.go 599-617), `set_escape_uri $escaped_request_uri
//!   $request_uri`, `error_page 401 = @<signin>` (1221-1252), then the headers to the app:
//!   `Host $best_http_host`, `Upgrade`, `Connection $connection_upgrade`, `X-Request-ID`,
//!   `X-Real-IP`, `X-Forwarded-For`, `-Host`, `-Port`, `-Proto`, `-Scheme`, `X-Scheme`,
//!   `X-Original-Forwarded-For`, `X-Original-Forwarded-Host`, `Proxy ""` (1282-1326), the
//!   default timeouts, buffers, `proxy_next_upstream`, `proxy_redirect off` (1328-1426);
//! - the http block's defaults (nginx.tmpl 250-275, 302-303, 380-398, 453-454; the defaults
//!   of `internal/ingress/controller/config/config.go` 782-891): keep-alive 75 s,
//!   `underscores_in_headers off`, `ignore_invalid_headers on`, the `$connection_upgrade`
//!   and `$req_id` maps, the app's upstream with `keepalive 320` (518-540), one `server`
//!   per host (636-665) and a default server answering 404 (669-680); with
//!   `use-forwarded-headers`, the real-IP module (79-91) and Lua's trust of
//!   `X-Forwarded-Proto`/`-Port`/`-Host`.
//!
//! What is not: the Lua balancer (`proxy_pass` goes to a plain upstream of the app's
//! address), OpenTelemetry, ModSecurity, metrics, `more_clear_headers Server` (nginx's own
//! `Server: nginx` stays), the sign-in location's name (a SHA-256 here, SHA-1 there: a
//! name only), HTTPS redirects and TLS itself (nginx listens plain HTTP on 127.0.0.1;
//! `https()` stands for ingress-nginx's TLS listener, see there), and the auth cache and
//! keep-alive annotations. Debian's nginx is 1.22; ingress-nginx ships a newer one, which
//! joins repeated upstream headers where 1.22 keeps the first (`$upstream_http_set_cookie`
//! is the auth answer's first `Set-Cookie` only here). `set_escape_uri` comes from Debian's
//! `libnginx-mod-http-set-misc` (the same set-misc module ingress-nginx builds in).

#![allow(dead_code)]

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const NGINX: &str = "/usr/sbin/nginx";
const MODULES: &str = "/usr/lib/nginx/modules";
/// set-misc (for `set_escape_uri`) and the devel kit it needs, from Debian's
/// `libnginx-mod-http-set-misc`.
const SET_MISC: [&str; 2] = ["ndk_http_module.so", "ngx_http_set_misc_module.so"];

/// One Ingress (its hosts, its paths) with ingress-nginx's external-auth annotations, to
/// start as a real nginx. `Nginx::ingress(hosts, app)` makes one.
#[derive(Clone, Debug)]
pub struct Ingress {
    hosts: Vec<String>,
    /// Prefix paths: (path, upstream `ip:port`, whether the auth annotations apply).
    paths: Vec<(String, String, bool)>,
    auth_url: Option<String>,
    auth_signin: Option<String>,
    redirect_param: String,
    response_headers: Vec<String>,
    always_set_cookie: bool,
    https: bool,
    forwarded_headers: bool,
    workers: usize,
}

/// A running nginx, stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Nginx {
    /// `127.0.0.1:<port>`, where it listens (plain HTTP; send `Host:` for a host).
    pub addr: String,
    /// Its prefix: `nginx.conf`, `error.log`, `access.log`, `nginx.pid`, temp paths.
    pub dir: tempfile::TempDir,
    /// The configuration it runs.
    pub config: String,
    child: Child,
}

impl Nginx {
    /// The Ingress of `hosts` sending path `/` (Prefix) to the app at `upstream`
    /// (`127.0.0.1:port`), with no auth until `auth_url` is set.
    pub fn ingress(hosts: &[&str], upstream: &str) -> Ingress {
        Ingress {
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            paths: vec![("/".into(), upstream.into(), true)],
            auth_url: None,
            auth_signin: None,
            redirect_param: "rd".into(),
            response_headers: vec![],
            always_set_cookie: false,
            https: false,
            forwarded_headers: false,
            workers: 1,
        }
    }

    /// `GET path` for `host`.
    pub async fn get(&self, host: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send("GET", host, path, headers, b"").await
    }

    /// One request on its own connection; panics when nginx does not answer.
    pub async fn send(
        &self,
        method: &str,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        request(&self.addr, method, host, path, headers, body)
            .await
            .unwrap_or_else(|e| panic!("nginx at {}: {e}\n{}", self.addr, self.error_log()))
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM (fast shutdown: the master stops its workers, then exits); a SIGKILLed
        // master would leave its workers behind.
        let _ = Command::new("sh")
            .args(["-c", &format!("kill -TERM {}", self.child.id())])
            .status();
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Ingress {
    /// `nginx.ingress.kubernetes.io/auth-url` (its host must be an IP address: nginx
    /// resolves a name in a `proxy_pass` variable only with a `resolver`).
    pub fn auth_url(mut self, url: &str) -> Self {
        self.auth_url = Some(url.into());
        self
    }

    /// `nginx.ingress.kubernetes.io/auth-signin`.
    pub fn auth_signin(mut self, url: &str) -> Self {
        self.auth_signin = Some(url.into());
        self
    }

    /// `nginx.ingress.kubernetes.io/auth-signin-redirect-param` (default `rd`).
    pub fn auth_signin_redirect_param(mut self, param: &str) -> Self {
        self.redirect_param = param.into();
        self
    }

    /// `nginx.ingress.kubernetes.io/auth-response-headers`.
    pub fn auth_response_headers(mut self, headers: &[&str]) -> Self {
        self.response_headers = headers.iter().map(|h| (*h).to_owned()).collect();
        self
    }

    /// `nginx.ingress.kubernetes.io/auth-always-set-cookie: "true"`.
    pub fn auth_always_set_cookie(mut self) -> Self {
        self.always_set_cookie = true;
        self
    }

    /// The same server without any auth annotation (a baseline).
    pub fn without_auth(mut self) -> Self {
        self.auth_url = None;
        self.auth_signin = None;
        self.response_headers.clear();
        self
    }

    /// Another Ingress on the same hosts, without the auth annotations: Prefix `path` to
    /// `upstream` (ingress-nginx merges both into one server, a location each).
    pub fn path_without_auth(mut self, path: &str, upstream: &str) -> Self {
        self.paths.push((path.into(), upstream.into(), false));
        self
    }

    /// The client reached ingress-nginx over TLS (its 443 listener, the Ingress's `tls:`):
    /// where the template has `$scheme` it is `https` (`X-Original-URL`,
    /// `$pass_access_scheme`, so `rd` and `X-Forwarded-Proto`), and the listener's port is
    /// 443. nginx itself still listens plain HTTP.
    pub fn https(mut self) -> Self {
        self.https = true;
        self
    }

    /// ingress-nginx's `use-forwarded-headers: "true"` (behind another proxy):
    /// `X-Forwarded-Proto`, `-Port` and `-Host` from the client are trusted for
    /// `$pass_access_scheme`, `$pass_port` and `$best_http_host` (`rd` and the headers to the
    /// app, but not `X-Original-URL`, which keeps `$scheme`), and the client address comes
    /// from `X-Forwarded-For` (real-IP module, every source trusted, the default
    /// `proxy-real-ip-cidr`).
    pub fn use_forwarded_headers(mut self) -> Self {
        self.forwarded_headers = true;
        self
    }

    /// `worker_processes` (1 unless set; ingress-nginx's default is one per CPU).
    pub fn worker_processes(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    fn has_auth(&self) -> bool {
        self.auth_url.is_some()
    }

    fn needs_set_misc(&self) -> bool {
        self.has_auth() && self.auth_signin.is_some()
    }

    /// The `nginx.conf` for listening on `127.0.0.1:port` with `dir` as the prefix.
    pub fn config(&self, port: u16, dir: &Path, root: bool) -> String {
        let d = dir.display();
        let mut c = String::new();
        let w = &mut c;
        writeln!(
            w,
            "# ingress-nginx's template for one Ingress (tests/common/nginx.rs)"
        )
        .unwrap();
        if root {
            // Workers as root: the prefix is a private temporary directory.
            writeln!(w, "user root;").unwrap();
        }
        writeln!(w, "worker_processes {};", self.workers).unwrap();
        writeln!(w, "pid {d}/nginx.pid;").unwrap();
        writeln!(w, "error_log {d}/error.log notice;").unwrap();
        if self.needs_set_misc() {
            for module in SET_MISC {
                writeln!(w, "load_module {MODULES}/{module};").unwrap();
            }
        }
        writeln!(
            w,
            "events {{\n    multi_accept on;\n    worker_connections 16384;\n    use epoll;\n}}"
        )
        .unwrap();
        writeln!(w, "http {{").unwrap();
        for line in [
            "aio threads;",
            "tcp_nopush on;",
            "tcp_nodelay on;",
            "log_subrequest on;",
            "reset_timedout_connection on;",
            "keepalive_timeout 75s;",
            "keepalive_requests 1000;",
            "client_header_buffer_size 1k;",
            "client_header_timeout 60s;",
            "large_client_header_buffers 4 8k;",
            "client_body_buffer_size 8k;",
            "client_body_timeout 60s;",
            "underscores_in_headers off;",
            "ignore_invalid_headers on;",
            "default_type text/html;",
            "server_tokens off;",
            // Preview hosts are ~70 characters; ingress-nginx sizes this itself.
            "server_names_hash_bucket_size 256;",
            "uninitialized_variable_warn off;",
            "server_name_in_redirect off;",
            "port_in_redirect off;",
        ] {
            writeln!(w, "    {line}").unwrap();
        }
        for (directive, sub) in [
            ("client_body_temp_path", "client-body"),
            ("proxy_temp_path", "proxy-temp"),
            ("fastcgi_temp_path", "fastcgi-temp"),
            ("uwsgi_temp_path", "uwsgi-temp"),
            ("scgi_temp_path", "scgi-temp"),
        ] {
            writeln!(w, "    {directive} {d}/{sub};").unwrap();
        }
        writeln!(
            w,
            "    log_format upstreaminfo '$remote_addr - $remote_user [$time_local] \"$request\" \
             $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" $request_length \
             $request_time $upstream_addr $upstream_response_length $upstream_response_time \
             $upstream_status $req_id';"
        )
        .unwrap();
        writeln!(w, "    access_log {d}/access.log upstreaminfo;").unwrap();
        writeln!(
            w,
            "    map $http_upgrade $connection_upgrade {{\n        default upgrade;\n        '' '';\n    }}"
        )
        .unwrap();
        writeln!(
            w,
            "    map $http_x_request_id $req_id {{\n        default $http_x_request_id;\n        \"\" $request_id;\n    }}"
        )
        .unwrap();
        let scheme = if self.https { "https" } else { "$scheme" };
        let listener_port = if self.https { 443 } else { 80 };
        if self.forwarded_headers {
            writeln!(
                w,
                "    real_ip_header X-Forwarded-For;\n    real_ip_recursive on;\n    \
                 set_real_ip_from 0.0.0.0/0;\n    set_real_ip_from ::/0;"
            )
            .unwrap();
            writeln!(
                w,
                "    map $http_x_forwarded_proto $forwarded_access_scheme {{\n        \
                 default $http_x_forwarded_proto;\n        \"\" {scheme};\n    }}"
            )
            .unwrap();
            writeln!(
                w,
                "    map $http_x_forwarded_port $forwarded_server_port {{\n        \
                 default $http_x_forwarded_port;\n        \"\" {listener_port};\n    }}"
            )
            .unwrap();
            writeln!(
                w,
                "    map $http_x_forwarded_host $forwarded_best_http_host {{\n        \
                 default $http_x_forwarded_host;\n        \"\" $http_host;\n        \
                 \"~^\\s*(?<first_forwarded_host>[^,\\s]+)\" $first_forwarded_host;\n    }}"
            )
            .unwrap();
        }
        let mut upstreams: Vec<&str> = vec![];
        for (_, upstream, _) in &self.paths {
            if !upstreams.contains(&upstream.as_str()) {
                upstreams.push(upstream);
            }
        }
        for (i, upstream) in upstreams.iter().enumerate() {
            writeln!(
                w,
                "    upstream upstream_balancer_{i} {{\n        server {upstream};\n        \
                 keepalive 320;\n        keepalive_time 1h;\n        keepalive_timeout 60s;\n        \
                 keepalive_requests 10000;\n    }}"
            )
            .unwrap();
        }
        for host in &self.hosts {
            writeln!(w, "    server {{").unwrap();
            writeln!(w, "        server_name \"{host}\";").unwrap();
            writeln!(w, "        listen 127.0.0.1:{port};").unwrap();
            for (path, upstream, auth) in &self.paths {
                let index = upstreams.iter().position(|u| u == upstream).unwrap();
                self.locations(w, path, index, *auth && self.has_auth());
            }
            writeln!(w, "    }}").unwrap();
        }
        writeln!(
            w,
            "    server {{\n        listen 127.0.0.1:{port} default_server;\n        \
             access_log off;\n        location / {{\n            return 404;\n        }}\n    }}"
        )
        .unwrap();
        writeln!(w, "}}").unwrap();
        c
    }

    /// The auth location, the sign-in location and the location of `path` (Prefix).
    fn locations(&self, w: &mut String, path: &str, upstream: usize, auth: bool) {
        let scheme = if self.https { "https" } else { "$scheme" };
        let auth_path = format!(
            "/_external-auth-{}-Prefix",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(path)
        );
        let signin = self
            .auth_signin
            .as_ref()
            .filter(|_| auth)
            .map(|url| (sign_in_location(path, url), url));
        if auth {
            let url = self.auth_url.as_deref().unwrap();
            let host = url
                .parse::<http::Uri>()
                .ok()
                .and_then(|u| u.host().map(str::to_owned))
                .unwrap_or_else(|| panic!("auth-url {url:?} has no host"));
            writeln!(w, "        location = {auth_path} {{").unwrap();
            for line in [
                "internal;".to_owned(),
                "access_log off;".into(),
                "proxy_intercept_errors off;".into(),
                "proxy_pass_request_body off;".into(),
                "proxy_set_header Content-Length \"\";".into(),
                "proxy_set_header X-Forwarded-Proto \"\";".into(),
                "proxy_set_header X-Request-ID $req_id;".into(),
                format!("proxy_set_header Host {host};"),
                format!("proxy_set_header X-Original-URL {scheme}://$http_host$request_uri;"),
                "proxy_set_header X-Original-Method $request_method;".into(),
                "proxy_set_header X-Sent-From \"nginx-ingress-controller\";".into(),
                "proxy_set_header X-Real-IP $remote_addr;".into(),
                "proxy_set_header X-Forwarded-For $remote_addr;".into(),
                "proxy_set_header X-Auth-Request-Redirect $request_uri;".into(),
                "proxy_buffering off;".into(),
                "proxy_buffer_size 4k;".into(),
                "proxy_buffers 4 4k;".into(),
                "proxy_request_buffering on;".into(),
                "proxy_ssl_server_name on;".into(),
                "proxy_pass_request_headers on;".into(),
                "client_max_body_size 1m;".into(),
                "client_body_buffer_size 8k;".into(),
                "proxy_http_version 1.1;".into(),
                format!("set $target \"{url}\";"),
                "proxy_pass $target;".into(),
            ] {
                writeln!(w, "            {line}").unwrap();
            }
            writeln!(w, "        }}").unwrap();
        }
        if let Some((name, url)) = &signin {
            let target = sign_in_url(url, &self.redirect_param);
            writeln!(
                w,
                "        location {name} {{\n            internal;\n            \
                 add_header Set-Cookie $auth_cookie;\n            return 302 {target};\n        }}"
            )
            .unwrap();
        }
        writeln!(w, "        location \"{path}\" {{").unwrap();
        let (access_scheme, server_port, best_host) = if self.forwarded_headers {
            (
                "$forwarded_access_scheme".to_owned(),
                "$forwarded_server_port".to_owned(),
                "$forwarded_best_http_host",
            )
        } else {
            (
                scheme.to_owned(),
                if self.https { "443" } else { "80" }.to_owned(),
                "$http_host",
            )
        };
        let mut lines = vec![
            "port_in_redirect off;".to_owned(),
            format!("set $pass_access_scheme {access_scheme};"),
            format!("set $pass_server_port {server_port};"),
            format!("set $best_http_host {best_host};"),
            "set $pass_port $pass_server_port;".into(),
        ];
        if auth {
            let always = if self.always_set_cookie {
                " always"
            } else {
                ""
            };
            lines.extend([
                "# this location requires authentication".to_owned(),
                format!("auth_request {auth_path};"),
                "auth_request_set $auth_cookie $upstream_http_set_cookie;".into(),
                format!("add_header Set-Cookie $auth_cookie{always};"),
            ]);
            for (i, header) in self.response_headers.iter().enumerate() {
                let var = header.to_lowercase().replace('-', "_");
                lines.push(format!(
                    "auth_request_set $authHeader{i} $upstream_http_{var};"
                ));
                lines.push(format!("proxy_set_header '{header}' $authHeader{i};"));
            }
            if let Some((name, _)) = &signin {
                lines.push("set_escape_uri $escaped_request_uri $request_uri;".into());
                lines.push(format!("error_page 401 = {name};"));
            }
        }
        lines.extend(
            [
                "client_max_body_size 1m;",
                "client_body_buffer_size 8k;",
                "proxy_set_header Host $best_http_host;",
                "proxy_set_header Upgrade $http_upgrade;",
                "proxy_set_header Connection $connection_upgrade;",
                "proxy_set_header X-Request-ID $req_id;",
                "proxy_set_header X-Real-IP $remote_addr;",
                "proxy_set_header X-Forwarded-For $remote_addr;",
                "proxy_set_header X-Forwarded-Host $best_http_host;",
                "proxy_set_header X-Forwarded-Port $pass_port;",
                "proxy_set_header X-Forwarded-Proto $pass_access_scheme;",
                "proxy_set_header X-Forwarded-Scheme $pass_access_scheme;",
                "proxy_set_header X-Scheme $pass_access_scheme;",
                "proxy_set_header X-Original-Forwarded-For $http_x_forwarded_for;",
                "proxy_set_header X-Original-Forwarded-Host $http_x_forwarded_host;",
                "proxy_set_header Proxy \"\";",
                "proxy_connect_timeout 5s;",
                "proxy_send_timeout 60s;",
                "proxy_read_timeout 60s;",
                "proxy_buffering off;",
                "proxy_buffer_size 4k;",
                "proxy_buffers 4 4k;",
                "proxy_request_buffering on;",
                "proxy_http_version 1.1;",
                "proxy_cookie_domain off;",
                "proxy_cookie_path off;",
                "proxy_next_upstream error timeout;",
                "proxy_next_upstream_timeout 0;",
                "proxy_next_upstream_tries 3;",
            ]
            .map(str::to_owned),
        );
        lines.push(format!("proxy_pass http://upstream_balancer_{upstream};"));
        lines.push("proxy_redirect off;".into());
        for line in lines {
            writeln!(w, "            {line}").unwrap();
        }
        writeln!(w, "        }}").unwrap();
    }

    /// Starts nginx on a free port of 127.0.0.1 and waits until it accepts connections.
    pub async fn start(self) -> Nginx {
        assert!(
            Path::new(NGINX).exists(),
            "{NGINX} is missing: run scripts/test (Debian: apt-get install nginx-light)"
        );
        if self.needs_set_misc() {
            for module in SET_MISC {
                assert!(
                    Path::new(MODULES).join(module).exists(),
                    "{MODULES}/{module} is missing (set_escape_uri, as ingress-nginx's sign-in \
                     redirect uses it): run scripts/test (Debian: apt-get install \
                     libnginx-mod-http-set-misc)"
                );
            }
        }
        let mut last = String::new();
        for _ in 0..5 {
            match self.try_start().await {
                Ok(nginx) => return nginx,
                Err(log) if log.contains("Address already in use") => last = log,
                Err(log) => panic!("nginx did not start:\n{log}"),
            }
        }
        panic!("nginx found no free port:\n{last}");
    }

    async fn try_start(&self) -> Result<Nginx, String> {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::metadata(dir.path()).unwrap().uid() == 0;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = self.config(port, dir.path(), root);
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, &config).unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        let prefix = format!("{}/", dir.path().display());
        let mut child = Command::new(NGINX)
            .arg("-p")
            .arg(&prefix)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("{NGINX}: {e}"));
        let pid_file: PathBuf = dir.path().join("nginx.pid");
        let addr = format!("127.0.0.1:{port}");
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let read =
                    |name| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
                return Err(format!(
                    "{status}\n{}{}\n--- nginx.conf\n{config}",
                    read("stderr.log"),
                    read("error.log")
                ));
            }
            // The pid file is written once the listening sockets are nginx's own.
            let ours = std::fs::read_to_string(&pid_file)
                .is_ok_and(|pid| pid.trim() == child.id().to_string());
            if ours && tokio::net::TcpStream::connect(&addr).await.is_ok() {
                return Ok(Nginx {
                    addr,
                    dir,
                    config,
                    child,
                });
            }
            if Instant::now() > until {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("not accepting connections on {addr} after 10 s"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// `buildAuthSignURLLocation`'s name (a SHA-256 where ingress-nginx takes a SHA-1).
fn sign_in_location(path: &str, url: &str) -> String {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(path.as_bytes());
    hash.update(url.as_bytes());
    format!("@{}", &hex::encode(hash.finalize())[..40])
}

/// `buildAuthSignURL`: the sign-in URL with the return address in `param`.
fn sign_in_url(url: &str, param: &str) -> String {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or("");
    let rd = "$pass_access_scheme://$http_host$escaped_request_uri";
    if query.is_empty() {
        format!("{url}?{param}={rd}")
    } else if query.split('&').any(|pair| {
        pair.split_once('=')
            .is_some_and(|(k, v)| k == param && !v.is_empty())
    }) {
        url.to_owned()
    } else {
        format!("{url}&{param}={rd}")
    }
}

/// An HTTP answer as received.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    /// In order, names as sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// The first `name` header (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers_named(name).into_iter().next()
    }

    /// Every `name` header, in order.
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 request on its own connection (`Connection: close`) to `addr`, for `host`;
/// the answer with its headers (a chunked body decoded). Async, so that servers on the
/// test's own runtime keep answering meanwhile.
pub async fn request(
    addr: &str,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Reply> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .map_err(|_| std::io::Error::other("no complete answer within 10 s"))??;
    parse(&raw)
}

fn parse(raw: &[u8]) -> std::io::Result<Reply> {
    let bad =
        |what: &str| std::io::Error::other(format!("{what}: {:?}", String::from_utf8_lossy(raw)));
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        let (mut decoded, mut rest) = (Vec::new(), &body[..]);
        loop {
            let line_end = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or_else(|| bad("a chunk without its size line"))?;
            let size_text = String::from_utf8_lossy(&rest[..line_end]);
            let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
                .map_err(|_| bad("a bad chunk size"))?;
            rest = &rest[line_end + 2..];
            if size == 0 {
                break;
            }
            if rest.len() < size + 2 {
                return Err(bad("a truncated chunk"));
            }
            decoded.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
        body = decoded;
    }
    Ok(Reply {
        status,
        headers,
        body,
    })
}

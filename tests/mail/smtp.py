"""The SMTP parties of tests/mail.rs, in the standard library only.

  smtp.py catcher  a stand-in for a preview's Mailpit (v1.30.5), configured only from the
                   environment helpers-chart/templates/mail.yaml gives Mailpit
  smtp.py relay    the operator's relay (`mail.relay_host`): accepts any mail, unauthenticated,
                   and records the envelope and bytes it got in the JSON-lines file $RELAY_STORE
  smtp.py send     the app: smtplib, logging in with SMTP_HOST/SMTP_PORT/SMTP_USERNAME/
                   SMTP_PASSWORD from its environment, as an app reads the mail Secret

The catcher is a port of the parts of Mailpit a preview uses, read from its source at tag
v1.30.5 (axllent/mailpit): the session of internal/smtpd/smtpd.go (serve, the AUTH PLAIN and
LOGIN exchanges, extractAndValidateAddress with its rcptToRE/mailFromRE, readData,
makeHeaders, makeEHLOResponse), SaveToDatabase and authHandler of internal/smtpd/main.go,
autoRelayMessage and Relay of internal/smtpd/relay.go, credentialsFromString of
internal/auth/auth.go, the env reading of cmd/root.go (getEnabledFromEnv) and the checks of
config/config.go VerifyConfig and config/validators.go validateRelayConfig. It is not
aiosmtpd: aiosmtpd parses `RCPT TO:<"qa"@example.com>` to `qa@example.com`, Mailpit keeps the
text between the brackets as sent, and that text is what the relay pattern is matched against.

Both servers print `listening <port>` on stdout once they accept connections; their log
goes to stderr. The catcher's "database" (MP_DATABASE) is a JSON-lines file here, one line
per stored message, written before the client hears 250, as Mailpit stores before answering.
"""

import base64
import email.utils
import json
import os
import re
import smtplib
import socket
import socketserver
import ssl
import sys
import threading
import time
import uuid
from email.message import EmailMessage
from email.parser import BytesHeaderParser

HOSTNAME = socket.gethostname()

# internal/smtpd/smtpd.go
RCPT_TO_RE = re.compile(r"(?i)TO: ?<([^<>\v]+)>( |$)(.*)?")
MAIL_FROM_RE = re.compile(r"(?i)FROM: ?<(|[^<>\v]+)>( |$)(.*)?")
MAIL_FROM_SIZE_RE = re.compile(r"(^| |,)[Ss][Ii][Zz][Ee]=(.*?)($|,| )")
MAX_RECIPIENTS = 100  # Server.MaxRecipients when config.SMTPMaxRecipients is its default

# What previewd's `render::services::allowed_recipients` makes: `^(a|b|...)$` where each
# address has every ASCII punctuation character escaped with `\` and is otherwise letters
# and digits (config refuses anything else in `mail_relay`).
LITERAL = r"(?:[A-Za-z0-9]|\\[!-/:-@\[-`{-~])+"
PREVIEWD_PATTERN = re.compile(r"\^\(" + LITERAL + r"(?:\|" + LITERAL + r")*\)\$")

# Every variable the stand-in reads. Any other MP_* variable is refused: a setting the
# Deployment gains must be ported here before the tests pass again.
KNOWN = {
    "MP_SMTP_BIND_ADDR",
    "MP_SMTP_AUTH",
    "MP_SMTP_AUTH_ALLOW_INSECURE",
    "MP_MAX_MESSAGES",
    "MP_MAX_MESSAGE_SIZE",
    "MP_WEBROOT",
    "MP_DATABASE",
    "MP_SMTP_RELAY_HOST",
    "MP_SMTP_RELAY_PORT",
    "MP_SMTP_RELAY_STARTTLS",
    "MP_SMTP_RELAY_AUTH",
    "MP_SMTP_RELAY_ALLOWED_RECIPIENTS",
    "MP_SMTP_RELAY_MATCHING",
}


def log(*parts):
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


def fail(message, code=1):
    """Mailpit exits 1 with its message when VerifyConfig fails."""
    log(message)
    sys.exit(code)


def enabled(name):
    """cmd/root.go getEnabledFromEnv."""
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


class Catcher:
    """The configuration Mailpit builds from its environment, and what it does with a message."""

    stamp = True  # makeHeaders: the Received line Mailpit puts on top

    def __init__(self):
        unknown = sorted(k for k in os.environ if k.startswith("MP_") and k not in KNOWN)
        if unknown:
            fail(f"the stand-in does not implement {', '.join(unknown)}", 2)
        self.bind = os.environ.get("MP_SMTP_BIND_ADDR", "[::]:1025")
        self.database = os.environ.get("MP_DATABASE") or fail(
            "the stand-in needs MP_DATABASE (its JSON-lines store)", 2
        )
        self.max_size = int(os.environ.get("MP_MAX_MESSAGE_SIZE", "50")) * 1024 * 1024
        # MP_MAX_MESSAGES and MP_WEBROOT concern Mailpit's pruning and web UI, which the
        # stand-in does not have; they are read so that a bad value still fails.
        int(os.environ.get("MP_MAX_MESSAGES", "500"))
        os.environ.get("MP_WEBROOT", "/")

        # internal/auth/auth.go credentialsFromString: entries split on any whitespace;
        # htpasswd lines `user:password`, bad lines silently skipped. Mailpit also accepts
        # hashed passwords (go-htpasswd's DefaultSystems); previewd seals a plain one, and
        # the stand-in refuses the hashed forms rather than compare them as plain text.
        self.credentials = {}
        for entry in re.split(r"\s+", os.environ.get("MP_SMTP_AUTH", "")):
            if ":" not in entry:
                continue
            user, password = entry.split(":", 1)
            if password.startswith(("$", "{")):
                fail(f"the stand-in compares plain passwords only, not {password[:4]}...", 2)
            self.credentials[user] = password
        self.auth_required = bool(self.credentials)  # main.go: srv.AuthRequired = true
        # config.go VerifyConfig: the stand-in has no TLS certificate (Mailpit's
        # MP_SMTP_TLS_CERT), so credentials need the insecure switch, or Mailpit won't start.
        if self.credentials and not enabled("MP_SMTP_AUTH_ALLOW_INSECURE"):
            fail(
                "[smtp] authentication requires STARTTLS or TLS encryption, run with "
                "`--smtp-auth-allow-insecure` to allow insecure authentication"
            )

        # cmd/root.go, then validators.go validateRelayConfig and config.go's RELAY_MATCHING.
        self.relay_host = os.environ.get("MP_SMTP_RELAY_HOST", "")
        self.relay_port = int(os.environ.get("MP_SMTP_RELAY_PORT") or 0) or 25
        self.relay_starttls = enabled("MP_SMTP_RELAY_STARTTLS")
        auth = os.environ.get("MP_SMTP_RELAY_AUTH", "").lower()
        if self.relay_host:
            if auth in ("", "none", "false"):
                pass
            elif auth in ("plain", "login") or auth.startswith("cram"):
                fail(f"the stand-in relays without authentication only, not {auth}", 2)
            else:
                fail(f"[relay] authentication method not supported: {auth}")
        matching = os.environ.get("MP_SMTP_RELAY_MATCHING", "")
        allowed = os.environ.get("MP_SMTP_RELAY_ALLOWED_RECIPIENTS", "")
        if matching and not self.relay_host:
            fail("[relay] a relay configuration must be set to auto-relay any messages")
        # MP_SMTP_RELAY_ALLOWED_RECIPIENTS is consulted only when a message is released by
        # hand (server/apiv1/release.go), never by auto-relay; the stand-in has no release,
        # so it only checks the pattern compiles, as validateRelayConfig does.
        for pattern in (matching, allowed):
            # Go's regexp (RE2) and Python's re agree on these patterns: `^(...)$` around an
            # alternation of literals in which every punctuation character is `\`-escaped
            # (both read `\@`, `\.`, `\-`, `\+` as the character itself, and `.` appears only
            # escaped), letters and digits match themselves case-sensitively in both, and
            # `|` inside the anchored group means "one of these, whole" in both. The one
            # difference, Python's `$` also matching before a final "\n", cannot arise: an
            # envelope address comes from one command line, and rcptToRE excludes \v and
            # the line's own ending. On any other pattern they could differ, so the stand-in
            # refuses to guess.
            if pattern and not PREVIEWD_PATTERN.fullmatch(pattern):
                fail(f"the stand-in matches previewd's escaped, anchored patterns only: {pattern!r}", 2)
        self.matching = re.compile(matching) if matching else None
        self.lock = threading.Lock()

    def authenticate(self, mechanism, user, password):
        """main.go authHandler: the htpasswd file's Match."""
        allow = user in self.credentials and self.credentials[user] == password
        log("[smtpd]", "allow" if allow else "deny", mechanism, f"login:{user!r}")
        return allow

    def deliver(self, sender, to, data, user):
        """main.go SaveToDatabase: fix the headers, auto-relay, store. Returns the id."""
        data = data.replace(b"\r\r\n", b"\r\n")
        headers = BytesHeaderParser().parsebytes(data)
        return_path = (headers.get("Return-Path") or "").strip("<>")
        if return_path != sender:
            data = set_header(data, "Return-Path", f"<{sender}>")
        message_id = (headers.get("Message-ID") or "").strip("<>")
        if not message_id:
            message_id = uuid.uuid4().hex[:22] + "@mailpit"
            data = f"Message-ID: <{message_id}>\r\n".encode() + data
        relayed = self.auto_relay(sender, to, data)
        # Addresses of the envelope missing from To/Cc/Bcc are added to Bcc (main.go,
        # including its overwrite of an existing Bcc with ", " + it).
        in_headers = {
            a.lower()
            for _, a in email.utils.getaddresses(
                headers.get_all("To", []) + headers.get_all("Cc", []) + headers.get_all("Bcc", [])
            )
        }
        missing = [a for a in to if "@" in a and a.lower() not in in_headers]
        if missing:
            bcc = ", " + headers["Bcc"] if headers.get("Bcc") else ", ".join(missing)
            data = set_header(data, "Bcc", bcc)
        record = {
            "id": message_id,
            "from": sender,
            "to": to,
            "user": user,
            "relayed_to": relayed,
            "data": data.decode("latin-1"),
        }
        with self.lock, open(self.database, "a") as store:
            store.write(json.dumps(record) + "\n")
        return message_id

    def auto_relay(self, sender, to, data):
        """relay.go autoRelayMessage: with RELAY_MATCHING, only the envelope recipients the
        pattern matches (Go's MatchString: unanchored, case-sensitive; `re.search` here) are
        relayed to; the message is stored whatever happens. No blocked-recipients or
        RELAY_ALL here: the Deployment sets neither."""
        if self.matching is None:
            return []
        chosen = [t for t in to if self.matching.search(t)]
        if not chosen:
            return []
        try:
            relay(self, sender, chosen, data)
        except Exception as error:  # logged, not forwarded (no MP_SMTP_RELAY_FWD_SMTP_ERRORS)
            log("[relay] error:", error)
            return []
        log(f"[relay] auto-relay message to {', '.join(chosen)} from {sender}")
        return chosen


def set_header(data, name, value):
    """tools/headers.go SetMessageHeader: replace the first such header (with its folded
    lines), or prepend one."""
    lines = data.split(b"\r\n")
    start = None
    for i, line in enumerate(lines):
        if line == b"":
            break
        if line.lower().startswith(name.lower().encode() + b":"):
            start = i
            break
    if start is None:
        return f"{name}: {value}\r\n".encode() + data
    end = start + 1
    while end < len(lines) and lines[end][:1] in (b" ", b"\t"):
        end += 1
    old = b"\r\n".join(lines[start:end]) + b"\r\n"
    return data.replace(old, f"{name}: {value}\r\n".encode(), 1)


def relay(catcher, sender, to, data):
    """relay.go Relay: one connection per message, EHLO with the hostname, STARTTLS if
    asked (verifying the relay's certificate against its host name), MAIL, each RCPT (a
    refused one is logged and skipped), DATA with the bytes as they were stored."""
    with smtplib.SMTP(catcher.relay_host, catcher.relay_port, local_hostname=HOSTNAME, timeout=30) as client:
        client.ehlo()
        if catcher.relay_starttls:
            client.starttls(context=ssl.create_default_context())
            client.ehlo()
        code, reply = client.mail(sender)
        if code != 250:
            raise smtplib.SMTPSenderRefused(code, reply, sender)
        for address in to:
            code, reply = client.rcpt(address)
            if code not in (250, 251):
                log(f"error response to RCPT command for {address}: {code} {reply!r}")
        client.data(data)


class Session(socketserver.StreamRequestHandler):
    """smtpd.go serve(), for the commands a client of a preview's catcher can send."""

    catcher = None  # a Catcher, or for the relay a Recorder

    def write(self, line):
        self.wfile.write(line.encode() + b"\r\n")
        self.wfile.flush()

    def read_line(self):
        raw = self.rfile.readline(65536)
        if not raw:
            raise EOFError
        return raw.rstrip(b"\r\n").decode("utf-8", "surrogateescape").strip(" \t\r\n\v\f")

    def read_data(self, max_size):
        data = b""
        while True:
            line = self.rfile.readline()
            if not line:
                raise EOFError
            if line == b".\r\n":
                return data
            if line.startswith(b"."):
                line = line[1:]
            data += line
            if len(data) > max_size:
                return None

    @staticmethod
    def parse_line(line):
        verb, _, args = line.partition(" ")
        return verb.upper(), args.strip()

    def handle(self):
        c = self.catcher
        auth = bool(c.credentials)
        got_ehlo, sender, got_from, to = False, "", False, None
        authenticated, user, remote_name = False, None, ""
        self.write(f"220 {HOSTNAME} Mailpit ESMTP Service ready")
        while True:
            try:
                line = self.read_line()
            except (EOFError, ConnectionError):
                return
            verb, args = self.parse_line(line)
            if verb in ("HELO", "EHLO"):
                remote_name = args
                if verb == "HELO":
                    self.write(f"250 {HOSTNAME} greets {args}")
                else:
                    lines = [f"{HOSTNAME} greets {args}", f"SIZE {c.max_size}"]
                    if auth:
                        lines.append("AUTH PLAIN LOGIN")  # CRAM-MD5 off (main.go AuthMechs)
                    lines += ["ENHANCEDSTATUSCODES", "8BITMIME", "SMTPUTF8"]
                    for i, text in enumerate(lines):
                        self.write(f"250{' ' if i == len(lines) - 1 else '-'}{text}")
                got_ehlo, sender, got_from, to = True, "", False, None
            elif verb == "MAIL":
                if auth and c.auth_required and not authenticated:
                    self.write("530 5.7.0 Authentication required")
                    continue
                if not got_ehlo:
                    self.write("503 5.5.1 Bad sequence of commands (HELO/EHLO required before MAIL)")
                    continue
                if to is not None:
                    self.write("503 5.5.1 Bad sequence of commands (RSET/HELO/EHLO required before MAIL)")
                    continue
                match, error = extract(MAIL_FROM_RE, args)
                if match is None:
                    self.write(error or "501 5.5.4 Syntax error in parameters or arguments (invalid FROM parameter)")
                else:
                    size = MAIL_FROM_SIZE_RE.search(match.group(3) or "") if match.group(2) else None
                    if size and not size.group(2).isdigit():
                        self.write("501 5.5.4 Syntax error in parameters or arguments (invalid SIZE parameter)")
                    elif size and int(size.group(2)) > c.max_size:
                        self.write(f"552 5.3.4 Requested mail action aborted: exceeded storage allocation ({c.max_size})")
                    else:
                        sender, got_from = match.group(1), True
                        self.write("250 2.1.0 Ok")
                to = None
            elif verb == "RCPT":
                if auth and c.auth_required and not authenticated:
                    self.write("530 5.7.0 Authentication required")
                    continue
                if not got_from:
                    self.write("503 5.5.1 Bad sequence of commands (MAIL required before RCPT)")
                    continue
                match, error = extract(RCPT_TO_RE, args)
                if match is None:
                    self.write(error or "501 5.5.4 Syntax error in parameters or arguments (invalid TO parameter)")
                elif len(to or []) >= MAX_RECIPIENTS:
                    self.write("452 4.5.3 Too many recipients")
                else:
                    # As sent: Mailpit keeps match[1], no case folding, no unquoting.
                    to = (to or []) + [match.group(1)]
                    self.write("250 2.1.5 Ok")
            elif verb == "DATA":
                if auth and c.auth_required and not authenticated:
                    self.write("530 5.7.0 Authentication required")
                    continue
                if not got_from or not to:
                    self.write("503 5.5.1 Bad sequence of commands (MAIL & RCPT required before DATA)")
                    continue
                self.write("354 Start mail input; end with <CR><LF>.<CR><LF>")
                try:
                    data = self.read_data(c.max_size)
                except (EOFError, ConnectionError):
                    return
                if data is None:
                    self.write(f"552 5.3.4 Requested mail action aborted: exceeded storage allocation ({c.max_size})")
                    continue
                peer = self.client_address[0]
                received = (
                    f"Received: from {remote_name} ({peer} [{peer}])\r\n"
                    f"        by {HOSTNAME} (Mailpit) with SMTP\r\n"
                    f"        for <{to[0]}>; {email.utils.formatdate(localtime=True)}\r\n"
                ).encode() if c.stamp else b""
                try:
                    message_id = c.deliver(sender, to, received + data, user)
                except Exception as error:
                    log("[smtpd] error storing message:", error)
                    self.write("451 4.3.5 Unable to process mail")
                    continue
                self.write(f"250 2.0.0 Ok: queued as {message_id}")
                sender, got_from, to = "", False, None
            elif verb == "QUIT":
                self.write(f"221 2.0.0 {HOSTNAME} Mailpit ESMTP Service closing transmission channel")
                return
            elif verb == "RSET":
                self.write("250 2.0.0 Ok")
                sender, got_from, to = "", False, None
            elif verb == "NOOP":
                self.write("250 2.0.0 Ok")
            elif verb in ("HELP", "VRFY", "EXPN"):
                self.write("502 5.5.1 Command not implemented")
            elif verb == "STARTTLS":
                # No MP_SMTP_TLS_CERT in the Deployment: Mailpit has no TLS config.
                self.write("501 5.5.2 Syntax error (no parameters allowed)" if args else "502 5.5.1 Command not implemented")
            elif verb == "AUTH":
                if not auth:
                    self.write("502 5.5.1 Command not implemented")
                    continue
                if authenticated:
                    self.write("503 5.5.1 Bad sequence of commands (already authenticated for this session)")
                    continue
                if got_from or to:
                    self.write("503 5.5.1 Bad sequence of commands (AUTH not permitted during mail transaction)")
                    continue
                mechanism, initial = self.parse_line(args)
                if mechanism == "":
                    self.write("501 5.5.4 Malformed AUTH input (argument required)")
                    continue
                if mechanism not in ("PLAIN", "LOGIN"):
                    self.write("504 5.5.4 Unrecognized authentication type")
                    continue
                try:
                    login = self.auth_plain(initial) if mechanism == "PLAIN" else self.auth_login(initial)
                except (EOFError, ConnectionError):
                    return
                except ValueError as error:
                    self.write(str(error))
                    continue
                authenticated = c.authenticate(mechanism, *login)
                user = login[0] if authenticated else None
                self.write("235 2.7.0 Authentication successful" if authenticated else "535 5.7.8 Authentication credentials invalid")
            else:
                self.write("500 5.5.2 Syntax error, command unrecognized")

    def decode(self, text):
        try:
            return base64.b64decode(text, validate=True).decode("utf-8", "surrogateescape")
        except ValueError:
            raise ValueError("501 5.5.2 Syntax error (unable to decode)")

    def auth_plain(self, initial):
        if initial == "":
            self.write("334 ")
            initial = self.read_line()
        parts = self.decode(initial).split("\0")
        if len(parts) != 3:
            raise ValueError("501 5.5.2 Syntax error (unable to parse)")
        return parts[1], parts[2]

    def auth_login(self, initial):
        if initial == "":
            self.write("334 " + base64.b64encode(b"Username:").decode())
            initial = self.read_line()
        user = self.decode(initial)
        self.write("334 " + base64.b64encode(b"Password:").decode())
        return user, self.decode(self.read_line())


def extract(regex, args):
    """smtpd.go extractAndValidateAddress. Go's mail.ParseAddress is approximated by
    Python's email.utils.parseaddr (the difference only decides which malformed addresses
    get 553)."""
    match = regex.search(args)
    if match is None:
        return None, None
    address = match.group(1)
    if " " in address:
        return None, "553 5.1.3 The address is not a valid RFC 5321 address"
    if address:
        parsed = email.utils.parseaddr(address)[1]
        if "@" not in parsed:
            return None, "553 5.1.3 The address is not a valid RFC 5321 address"
        if len(parsed) > 1024:
            return None, "500 The address is too long"
    return match, None


class Recorder:
    """The operator's relay: no login, every recipient accepted, each message recorded."""

    credentials = {}
    auth_required = False
    max_size = 50 * 1024 * 1024
    stamp = False  # records the bytes exactly as Mailpit sent them, no Received line of its own

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()

    def deliver(self, sender, to, data, user):
        with self.lock, open(self.path, "a") as store:
            store.write(json.dumps({"from": sender, "to": to, "data": data.decode("latin-1")}) + "\n")
        return uuid.uuid4().hex


def serve(catcher, bind):
    host, _, port = bind.rpartition(":")
    host = host.strip("[]") or "::"

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    handler = type("Handler", (Session,), {"catcher": catcher})
    with Server((host, int(port)), handler) as server:
        print("listening", server.server_address[1], flush=True)
        server.serve_forever()


def send(argv):
    """The app. `send [--auth plain|login|none] [--password P] FROM TO...`; prints each
    command's reply code and text as JSON."""
    mechanism, password = "plain", os.environ["SMTP_PASSWORD"]
    while argv[0].startswith("--"):
        flag, value, argv = argv[0], argv[1], argv[2:]
        if flag == "--auth":
            mechanism = value
        elif flag == "--password":
            password = value
    sender, recipients = argv[0], argv[1:]
    message = EmailMessage()
    message["From"] = f"Octo App <{sender}>"
    message["To"] = ", ".join(recipients)
    message["Subject"] = "Confirm your sign-up"
    message.set_content("Welcome! Confirm your address: https://app.example/confirm/42\n")
    data = message.as_bytes(policy=message.policy.clone(linesep="\r\n"))
    result = {}
    client = smtplib.SMTP(os.environ["SMTP_HOST"], int(os.environ["SMTP_PORT"]), timeout=10)
    client.ehlo("app.preview")
    result["ehlo_auth"] = client.esmtp_features.get("auth", "")
    if mechanism != "none":
        client.user, client.password = os.environ["SMTP_USERNAME"], password
        method = client.auth_plain if mechanism == "plain" else client.auth_login
        try:
            result["auth"] = list(client.auth(mechanism.upper(), method))
        except smtplib.SMTPAuthenticationError as error:
            result["auth"] = [error.smtp_code, error.smtp_error]
    result["mail"] = list(client.mail(sender))
    result["rcpt"] = [list(client.rcpt(r)) for r in recipients]
    try:
        result["data"] = list(client.data(data))
    except smtplib.SMTPDataError as error:
        result["data"] = [error.smtp_code, error.smtp_error]
    client.quit()
    print(json.dumps(result, default=lambda b: b.decode("latin-1")))


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "catcher":
        catcher = Catcher()
        serve(catcher, catcher.bind)
    elif role == "relay":
        serve(Recorder(os.environ["RELAY_STORE"]), os.environ.get("RELAY_BIND", "127.0.0.1:0"))
    elif role == "send":
        send(sys.argv[2:])
    else:
        sys.exit(f"unknown role {role}")

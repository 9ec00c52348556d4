//! What the binary's end-to-end tests share: the `cairn` command with a clean environment, and
//! starting `cairn serve` as a child process.

// Each test binary compiles its own copy of this module and uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The `cairn` binary on store `db`, with no `CAIRN_…` variable of the test's own environment
/// (a developer's `CAIRN_CONFIG` or tokens must not change what a test sees).
pub(crate) fn cairn(db: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("CAIRN_") {
            cmd.env_remove(var);
        }
    }
    cmd.args(["--database", db]);
    cmd
}

/// A running `cairn serve`.
pub(crate) struct Serving {
    pub(crate) child: Child,
    /// Everything the server wrote to stderr so far (its log).
    pub(crate) stderr: Arc<Mutex<Vec<u8>>>,
    /// The address it printed as `listening on ADDR`.
    pub(crate) addr: String,
}

/// Spawns `cmd` (a `cairn … serve --listen 127.0.0.1:0 …` command) with its output piped and
/// drained for the whole run (the server never blocks on a full pipe), and waits up to `within`
/// for its first line, `listening on ADDR`. Panics with the server's stderr when it exits or
/// prints anything else first.
pub(crate) fn serve(cmd: &mut Command, within: Duration) -> Serving {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cairn serve");
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let sink = stderr.clone();
    let mut pipe = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next().and_then(Result::ok));
        for _ in lines {}
    });
    let first = rx
        .recv_timeout(within)
        .expect("the server prints its address in time");
    let log =
        |stderr: &Mutex<Vec<u8>>| String::from_utf8_lossy(&stderr.lock().unwrap()).into_owned();
    let Some(first) = first else {
        let status = child.wait().unwrap();
        panic!(
            "the server exited ({status:?}) before listening: {}",
            log(&stderr)
        );
    };
    let Some(addr) = first.strip_prefix("listening on ") else {
        panic!(
            "first line is `listening on ADDR`: {first:?}; stderr: {}",
            log(&stderr)
        );
    };
    let addr = addr.to_owned();
    Serving {
        child,
        stderr,
        addr,
    }
}

/// Runs `case` on a store URL naming a fresh schema (`prefix` plus a unique suffix) of the test
/// Postgres server — failing, never skipping, when no server can be found — and drops the
/// schema afterwards, whether the case passed or panicked (the panic is then passed on).
pub(crate) fn on_postgres(prefix: &str, case: impl FnOnce(&str)) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pg = rt
        .block_on(cairn::testkit::postgres::testkit::test_server_url())
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name(prefix);
    let sep = if pg.contains('?') { '&' } else { '?' };
    let url = format!("{pg}{sep}cairn_schema={schema}");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(&url)));
    rt.block_on(drop_schema(&pg, &schema));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The two stores a CLI test runs on: a SQLite file in a fresh temporary directory and a fresh
/// schema (`prefix` plus a unique suffix) of the test Postgres server — failing, never
/// skipping, when no server can be found. Returns the directory (kept alive by the caller), the
/// two URLs, the server's URL and the schema, for [`drop_schema`] at the end.
pub(crate) async fn sqlite_and_postgres(
    prefix: &str,
) -> (tempfile::TempDir, Vec<String>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name(prefix);
    let sep = if pg.contains('?') { '&' } else { '?' };
    let urls = vec![
        dir.path().join("spool.db").display().to_string(),
        format!("{pg}{sep}cairn_schema={schema}"),
    ];
    (dir, urls, pg, schema)
}

/// Makes the store at `url` as an older build would: cairn's set up to `revision`.
pub(crate) async fn made_by_an_older_build(url: &str, revision: &str) {
    let parsed = cairn::DatabaseUrl::parse(url).unwrap();
    let raw = cairn::testkit::migration_backend(&parsed, true).unwrap();
    cairn::testkit::Runner::new(cairn::migrate::cairn_set().up_to(revision).unwrap())
        .open(raw.as_ref())
        .await
        .expect("the older build creates its store");
}

/// Drops `schema` on the Postgres server at `pg`.
pub(crate) async fn drop_schema(pg: &str, schema: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(pg).await.unwrap();
    sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
}

/// A running `cairn serve` with one bearer token, for tests that speak its JSON API; killed
/// when dropped.
pub(crate) struct ApiServer {
    child: Child,
    /// `http://ADDR`.
    pub(crate) base: String,
    token: &'static str,
    agent: ureq::Agent,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ApiServer {
    /// Serves store `db` on a loopback port with `token` as its only API token and no
    /// backfill, and waits up to `within` until `/healthz` answers 200.
    pub(crate) fn start(db: &str, token: &'static str, within: Duration) -> Self {
        let mut cmd = cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .env("CAIRN_AUTH__TOKENS", token)
            .env("CAIRN_BACKFILL__ENABLED", "false");
        let serving = serve(&mut cmd, within);
        let server = Self {
            child: serving.child,
            base: format!("http://{}", serving.addr),
            token,
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(within))
                .build()
                .into(),
        };
        let deadline = std::time::Instant::now() + within;
        while server.send("GET", "/healthz", None).0 != 200 {
            assert!(
                std::time::Instant::now() < deadline,
                "healthz answers in time"
            );
            std::thread::yield_now();
        }
        server
    }

    /// Sends `method path` with `body` as JSON and the token; the status and the body as JSON
    /// (`Null` when it is not JSON).
    pub(crate) fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("Content-Type", "application/json")
            .header("Authorization", format!("Bearer {}", self.token));
        let body = body.map(serde_json::Value::to_string).unwrap_or_default();
        let mut resp = self
            .agent
            .run(req.body(body).unwrap())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }

    /// Sends SIGTERM and waits up to `within` for the exit; the exit status, or `None` when
    /// the server is still running at the deadline (it is then killed when dropped).
    pub(crate) fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
        wait_until(&mut self.child, within)
    }

    /// `GET path` with the token; the body as text (`/metrics`).
    pub(crate) fn send_text(&self, path: &str) -> String {
        let mut resp = self
            .agent
            .get(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {}", self.token))
            .call()
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        resp.body_mut().read_to_string().unwrap_or_default()
    }

    /// `POST /v1/batch` with `ops`.
    pub(crate) fn batch(&self, ops: serde_json::Value) -> (u16, serde_json::Value) {
        self.send(
            "POST",
            "/v1/batch",
            Some(&serde_json::json!({ "ops": ops })),
        )
    }
}

/// Waits up to `within` for `child` to exit: its status, or `None` at the deadline.
pub(crate) fn wait_until(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `cmd` to its end or for at most `within`, whichever comes first: its exit status
/// (`None` when it was still running at the deadline and was killed), stdout and stderr.
pub(crate) fn run_within(
    cmd: &mut Command,
    within: Duration,
) -> (Option<std::process::ExitStatus>, String, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cairn");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let status = wait_until(&mut child, within);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    (status, out.join().unwrap(), err.join().unwrap())
}

/// A command's output as text (lossy).
pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The stdout of a command that must have succeeded; its exit code and both streams otherwise.
pub(crate) fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The wall clock in microseconds since the Unix epoch, as the server reads it.
pub(crate) fn now_us() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(since.as_micros()).expect("in range")
}

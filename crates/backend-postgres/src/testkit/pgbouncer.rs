//! A private PgBouncer in transaction mode in front of the test server (issue 44 item 2), as
//! Debian's `pgbouncer` 1.18 package runs it: `pool_mode = transaction`,
//! `ignore_startup_parameters = extra_float_digits`, a few server connections per database and
//! user so that every client's transactions really move between server sessions; and
//! `server_round_robin = 1`, so that they move every time they can: with PgBouncer's default
//! (the most recently used idle session first) a message sent outside a transaction usually
//! lands on the session it left, and a bug that relies on that (an extended-protocol exchange
//! split across two sessions, SQLSTATE 26000) failed only in CI, now and then.
//!
//! One PgBouncer per test process, started on first use on a free loopback port with its ini
//! and user list in a temp dir; a watchdog shell (its own process group) stops it and removes
//! the directory when the test process exits for any reason (its stdin reaches EOF), as the
//! throwaway cluster's does ([`super::provision`]).
//!
//! A missing `pgbouncer` fails the test with one line saying what to install: the pooler tests
//! never pass without a pooler.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;

use super::{test_server_url, PgHarness};

/// Server connections PgBouncer keeps per (database, user): fewer than the clients the tests
/// open (a store's pool is 8, and most cases open two or more stores), so sessions are shared
/// and reused. With 4, cases where several openers wait for the migration lock (each waiting in
/// a transaction, so holding a server connection) timed out waiting for one.
pub const PGBOUNCER_POOL_SIZE: u32 = 8;

static PGBOUNCER: OnceCell<std::result::Result<String, String>> = OnceCell::const_new();

/// The URL of the test PgBouncer (transaction mode) in front of [`test_server_url`]'s server,
/// without cairn's `cairn_pooler` parameter: `postgres://USER@127.0.0.1:PORT/DB`. Started once
/// per process.
///
/// # Errors
/// When no test server can be found, or `pgbouncer` is missing (the message says
/// `apt-get install pgbouncer`) or does not start (the message quotes its log's last line).
pub async fn pgbouncer_url() -> std::result::Result<String, String> {
    PGBOUNCER
        .get_or_init(|| async {
            let server = test_server_url().await?;
            tokio::task::spawn_blocking(move || start(&server))
                .await
                .map_err(|e| format!("starting pgbouncer panicked: {e}"))?
        })
        .await
        .clone()
}

static APART: OnceCell<std::result::Result<String, String>> = OnceCell::const_new();

/// A second PgBouncer like [`pgbouncer_url`]'s, for tests that leave session state on its server
/// connections (a store opened without declaring the pooler), so the other tests' server
/// sessions never see it.
///
/// # Errors
/// As [`pgbouncer_url`].
pub async fn pgbouncer_url_apart() -> std::result::Result<String, String> {
    APART
        .get_or_init(|| async {
            let server = test_server_url().await?;
            tokio::task::spawn_blocking(move || start(&server))
                .await
                .map_err(|e| format!("starting pgbouncer panicked: {e}"))?
        })
        .await
        .clone()
}

/// [`pgbouncer_url`] with `?cairn_pooler=transaction`: what a store behind it is opened with.
///
/// # Panics
/// As [`pgbouncer_url`]'s errors: a pooler test fails without a pooler.
pub async fn pgbouncer_store_url() -> String {
    match pgbouncer_url().await {
        Ok(url) => format!("{url}?{}=transaction", crate::POOLER_PARAM),
        Err(msg) => panic!("{msg}"),
    }
}

/// A fresh conformance harness whose stores connect through the test PgBouncer in transaction
/// mode (declared with `?cairn_pooler=transaction`); its own writers and its cleanup connect
/// straight to the server.
///
/// # Panics
/// When no server or no `pgbouncer` can be found.
pub async fn pgbouncer_harness() -> PgHarness {
    PgHarness::through(pgbouncer_store_url().await).await
}

/// Where `pgbouncer` is: `/usr/sbin/pgbouncer` (Debian's package), else on `PATH`.
fn find_pgbouncer() -> Option<PathBuf> {
    let debian = Path::new("/usr/sbin/pgbouncer");
    if debian.is_file() {
        return Some(debian.to_owned());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("pgbouncer"))
        .find(|p| p.is_file())
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Starts PgBouncer with `$2` (the ini) as `$1` (run through `runuser -u postgres` when `$1` is
/// 1: PgBouncer refuses to run as root), waits for stdin's EOF (the test process's exit), then
/// stops it and removes `$3`.
const WATCHDOG_SCRIPT: &str = r#"if [ "$1" = 1 ]; then runuser -u postgres -- "$2" "$3/pgbouncer.ini" </dev/null >/dev/null 2>&1 &
else "$2" "$3/pgbouncer.ini" </dev/null >/dev/null 2>&1 & fi
child=$!
read _ignored
kill "$child" 2>/dev/null
wait "$child" 2>/dev/null
rm -rf "$3""#;

/// Writes the ini and user list, starts PgBouncer under its watchdog and waits until it
/// accepts connections.
fn start(server: &str) -> std::result::Result<String, String> {
    use std::os::unix::process::CommandExt;

    let bin = find_pgbouncer().ok_or(
        "pgbouncer not found at /usr/sbin/pgbouncer or on PATH: the pooler tests need it; \
         install it with `apt-get install pgbouncer`",
    )?;
    let server = url::Url::parse(server).map_err(|_| "the test server URL does not parse")?;
    let host = server.host_str().unwrap_or("127.0.0.1").to_owned();
    let port = server.port().unwrap_or(5432);
    let user = match server.username() {
        "" => "postgres".to_owned(),
        u => u.to_owned(),
    };
    let db = match server.path().trim_start_matches('/') {
        "" => user.clone(),
        d => d.to_owned(),
    };
    let password = server.password().map(str::to_owned);

    let as_postgres = running_as_root();
    let dir = tempfile::Builder::new()
        .prefix("cairn-pgbouncer-")
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir: {e}"))?
        .keep();
    let cleanup = |e: String| {
        let _ = std::fs::remove_dir_all(&dir);
        e
    };
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| cleanup(format!("no free port: {e}")))?
        .port();
    let server_password = password
        .as_deref()
        .map(|p| format!(" password={p}"))
        .unwrap_or_default();
    let ini = format!(
        "[databases]\n\
         * = host={host} port={port}{server_password}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {listen}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {dir}/userlist.txt\n\
         pool_mode = transaction\n\
         default_pool_size = {PGBOUNCER_POOL_SIZE}\n\
         min_pool_size = 0\n\
         server_round_robin = 1\n\
         reserve_pool_size = 0\n\
         max_client_conn = 2000\n\
         ignore_startup_parameters = extra_float_digits\n\
         query_wait_timeout = 60\n\
         logfile = {dir}/pgbouncer.log\n\
         pidfile = {dir}/pgbouncer.pid\n",
        dir = dir.display(),
    );
    let userlist = format!("\"{user}\" \"{}\"\n", password.as_deref().unwrap_or(""));
    std::fs::write(dir.join("pgbouncer.ini"), ini)
        .and_then(|()| std::fs::write(dir.join("userlist.txt"), userlist))
        .map_err(|e| cleanup(format!("cannot write pgbouncer's config: {e}")))?;
    if as_postgres {
        let out = Command::new("chown")
            .args(["-R", "postgres:"])
            .arg(&dir)
            .output()
            .map_err(|e| cleanup(format!("cannot run chown: {e}")))?;
        if !out.status.success() {
            return Err(cleanup("chown of pgbouncer's temp dir failed".into()));
        }
    }
    let mut watchdog = Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG_SCRIPT)
        .arg("cairn-pgbouncer-watchdog")
        .arg(if as_postgres { "1" } else { "0" })
        .arg(&bin)
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group: a Ctrl-C to the test run must not kill it before it cleans up.
        .process_group(0)
        .spawn()
        .map_err(|e| cleanup(format!("cannot start pgbouncer's watchdog: {e}")))?;

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", listen)).is_ok() {
            break;
        }
        if Instant::now() >= deadline || matches!(watchdog.try_wait(), Ok(Some(_))) {
            let log = std::fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default();
            let last = log.lines().last().unwrap_or("(no log)").trim().to_owned();
            drop(watchdog.stdin.take());
            let _ = watchdog.wait();
            return Err(format!(
                "pgbouncer did not accept connections on 127.0.0.1:{listen} within 20 s: {last}"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    keep_stdin(watchdog);
    Ok(format!("postgres://{user}@127.0.0.1:{listen}/{db}"))
}

/// Keeps the watchdog's stdin open for the life of the process; its EOF is the stop signal.
fn keep_stdin(mut watchdog: std::process::Child) {
    static WATCHDOGS: OnceLock<Mutex<Vec<std::process::ChildStdin>>> = OnceLock::new();
    if let Some(stdin) = watchdog.stdin.take() {
        WATCHDOGS
            .get_or_init(|| Mutex::new(Vec::new()))
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(stdin);
    }
}

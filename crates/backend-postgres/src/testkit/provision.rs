//! Test-server provisioning (DESIGN §7): an explicit URL, a local server, a private
//! throwaway cluster, or a throwaway container.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tokio::sync::OnceCell;

use crate::error::map;

/// Environment variable naming the test server (`postgres://user@host:port/db`).
pub const TEST_URL_ENV: &str = "CAIRN_TEST_POSTGRES_URL";

const LOCAL_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

static SERVER_URL: OnceCell<std::result::Result<String, String>> = OnceCell::const_new();

/// Finds a Postgres server for the tests, once per process, in DESIGN §7 order:
/// `CAIRN_TEST_POSTGRES_URL`; a server on `127.0.0.1:5432` (user `postgres`, trust auth); a
/// private throwaway cluster started with `initdb`/`pg_ctl` from `PATH` or
/// `/usr/lib/postgresql/*/bin` (stopped and removed when the process exits); a throwaway
/// container started with testcontainers when a Docker engine answers
/// ([`start_docker_postgres`]).
///
/// # Errors
/// A message saying what was tried and how to get a server (never containing a URL).
pub async fn test_server_url() -> std::result::Result<String, String> {
    SERVER_URL
        .get_or_init(|| discover(std::env::var(TEST_URL_ENV).ok()))
        .await
        .clone()
}

/// The §7 search; `explicit` is the value of [`TEST_URL_ENV`].
async fn discover(explicit: Option<String>) -> std::result::Result<String, String> {
    let mut tried = Vec::new();
    if let Some(url) = explicit {
        if !url.is_empty() {
            // An explicit choice is not second-guessed: fall through to nothing else.
            return match probe_server(&url, Duration::from_secs(10)).await {
                Ok(()) => Ok(url),
                Err(e) => Err(format!(
                    "{TEST_URL_ENV} is set but its server cannot be used: {e}; fix or unset it"
                )),
            };
        }
    }
    tried.push(format!("{TEST_URL_ENV} (not set)"));
    match probe_server(LOCAL_URL, Duration::from_secs(2)).await {
        Ok(()) => return Ok(LOCAL_URL.to_owned()),
        Err(e) => tried.push(format!("127.0.0.1:5432 as user postgres ({e})")),
    }
    match tokio::task::spawn_blocking(start_private_cluster).await {
        Ok(Ok(cluster)) => {
            let url = cluster.url.clone();
            match probe_server(&url, Duration::from_secs(10)).await {
                Ok(()) => {
                    keep_watchdog(cluster);
                    return Ok(url);
                }
                Err(e) => {
                    cluster.stop();
                    tried.push(format!(
                        "a private initdb/pg_ctl cluster (started, but {e})"
                    ));
                }
            }
        }
        Ok(Err(e)) => tried.push(format!("a private initdb/pg_ctl cluster ({e})")),
        Err(e) => tried.push(format!("a private initdb/pg_ctl cluster ({e})")),
    }
    match start_docker_postgres().await {
        Ok(url) => return Ok(url),
        Err(e) => tried.push(format!("testcontainers ({e})")),
    }
    Err(format!(
        "no PostgreSQL server for the cairn Postgres tests. Tried: {}. To fix: set \
         {TEST_URL_ENV}=postgres://USER@HOST:PORT/DB, or start a server on 127.0.0.1:5432 that \
         accepts user postgres without a password (Debian: `pg_ctlcluster --skip-systemctl-redirect \
         <version> main start`), or install the PostgreSQL server binaries (initdb, pg_ctl) on \
         PATH or under /usr/lib/postgresql/<version>/bin",
        tried.join("; ")
    ))
}

/// Connects once and disconnects; the error text never includes the URL.
async fn probe_server(url: &str, within: Duration) -> std::result::Result<(), String> {
    let opts = PgConnectOptions::from_str(url).map_err(|_| "unparsable URL".to_owned())?;
    match tokio::time::timeout(within, PgConnection::connect_with(&opts)).await {
        Err(_) => Err(format!("no answer within {within:?}")),
        Ok(Err(e)) => Err(map(e).to_string()),
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
    }
}

/// The image the testcontainers fallback runs.
const DOCKER_IMAGE: (&str, &str) = ("postgres", "16-alpine");

/// Removes the container named by `$1` once stdin closes (when the test process exits).
const CONTAINER_WATCHDOG_SCRIPT: &str = r#"read _ignored
docker rm -f "$1" >/dev/null 2>&1"#;

/// The last provisioning step (DESIGN §7): a throwaway PostgreSQL container started with
/// testcontainers when a Docker engine answers (`DOCKER_HOST` or the default socket). A
/// watchdog process removes the container when the test process exits. Returns the container's
/// URL once it accepts connections.
///
/// # Errors
/// A one-line reason: no Docker engine answered, the image could not be started, or the server
/// did not accept connections within a minute.
pub async fn start_docker_postgres() -> std::result::Result<String, String> {
    use std::os::unix::process::CommandExt;
    use testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers::runners::AsyncRunner;
    use testcontainers::{GenericImage, ImageExt};

    let container = GenericImage::new(DOCKER_IMAGE.0, DOCKER_IMAGE.1)
        .with_exposed_port(5432.tcp())
        .with_wait_for(WaitFor::message_on_stderr(
            "database system is ready to accept connections",
        ))
        .with_env_var("POSTGRES_HOST_AUTH_METHOD", "trust")
        .start()
        .await
        .map_err(|e| format!("no Docker engine answered or the container failed to start: {e}"))?;
    let watchdog = Command::new("sh")
        .arg("-c")
        .arg(CONTAINER_WATCHDOG_SCRIPT)
        .arg("cairn-pg-container-watchdog")
        .arg(container.id())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the container watchdog: {e}"))?;
    keep_watchdog_stdin(watchdog);
    let host = container.get_host().await.map_err(|e| e.to_string())?;
    let port = container
        .get_host_port_ipv4(5432.tcp())
        .await
        .map_err(|e| e.to_string())?;
    // The watchdog owns the container's removal now; dropping the handle here would stop the
    // container while the tests still use it.
    std::mem::forget(container);
    let url = format!("postgres://postgres@{host}:{port}/postgres");
    // The image restarts its server once after initialising: poll until it accepts.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match probe_server(&url, Duration::from_secs(5)).await {
            Ok(()) => return Ok(url),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!(
                    "the container's server did not accept connections: {e}"
                ))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// A throwaway cluster in a temp dir, stopped and removed by its watchdog.
struct PrivateCluster {
    url: String,
    watchdog: std::process::Child,
}

impl PrivateCluster {
    /// Closes the watchdog's stdin, which makes it stop the cluster and remove its directory,
    /// and waits for it.
    fn stop(mut self) {
        drop(self.watchdog.stdin.take());
        let _ = self.watchdog.wait();
    }
}

/// Keeps the watchdog's stdin open until the process exits; its EOF is the stop signal.
fn keep_watchdog(cluster: PrivateCluster) {
    keep_watchdog_stdin(cluster.watchdog);
}

/// Keeps a watchdog's stdin open for the life of the process.
pub(super) fn keep_watchdog_stdin(mut watchdog: std::process::Child) {
    static WATCHDOGS: OnceLock<Mutex<Vec<std::process::ChildStdin>>> = OnceLock::new();
    if let Some(stdin) = watchdog.stdin.take() {
        WATCHDOGS
            .get_or_init(|| Mutex::new(Vec::new()))
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(stdin);
    }
}

pub(super) fn find_pg_bin() -> Option<PathBuf> {
    let has_tools = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        if let Some(dir) = std::env::split_paths(&path).find(|d| has_tools(d)) {
            return Some(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, d)| has_tools(d))
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d)
}

pub(super) fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `initdb` refuses to run as root: as root, the cluster belongs to user `postgres`.
pub(super) fn pg_command(as_postgres: bool, tool: &Path) -> Command {
    if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(tool);
        c
    } else {
        Command::new(tool)
    }
}

pub(super) fn run(mut cmd: Command, what: &str) -> std::result::Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("").trim().to_owned();
        Err(format!("{what} failed ({}): {last}", out.status))
    }
}

/// Stops the cluster and removes its directory once its stdin reaches EOF, i.e. when the test
/// process exits for any reason. `$1` = 1 to run pg_ctl as user postgres, `$2` pg_ctl, `$3`
/// data dir, `$4` the directory to remove.
pub(super) const WATCHDOG_SCRIPT: &str = r#"read _ignored
if [ "$1" = 1 ]; then runuser -u postgres -- "$2" -D "$3" -m immediate -w stop >/dev/null 2>&1
else "$2" -D "$3" -m immediate -w stop >/dev/null 2>&1; fi
rm -rf "$4""#;

fn start_private_cluster() -> std::result::Result<PrivateCluster, String> {
    let bin = find_pg_bin()
        .ok_or("initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")?;
    let as_postgres = running_as_root();
    let dir = tempfile::Builder::new()
        .prefix("cairn-pg-")
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir: {e}"))?
        .keep();
    let data = dir.join("data");
    let cleanup = |e: String| {
        let _ = std::fs::remove_dir_all(&dir);
        e
    };
    if as_postgres {
        let mut chown = Command::new("chown");
        chown.arg("postgres:").arg(&dir);
        run(chown, "chown").map_err(cleanup)?;
    }
    let mut initdb = pg_command(as_postgres, &bin.join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
        .arg("--no-locale");
    run(initdb, "initdb").map_err(cleanup)?;

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| cleanup(format!("no free port: {e}")))?
        .port();
    let mut start = pg_command(as_postgres, &bin.join("pg_ctl"));
    start
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(dir.join("server.log"))
        .args(["-w", "-t", "60", "-o"])
        .arg(format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            dir.display()
        ))
        .arg("start");
    run(start, "pg_ctl start").map_err(cleanup)?;

    let watchdog =
        spawn_watchdog("cairn-pg-watchdog", as_postgres, &bin, &data, &dir).map_err(cleanup)?;
    Ok(PrivateCluster {
        url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        watchdog,
    })
}

/// Starts the watchdog (shown as `name`) of the cluster `bin`'s `pg_ctl` started on `data` in
/// `dir`: it stops the cluster and removes `dir` when the test process's end closes its stdin.
/// When it cannot start, the cluster is stopped at once and the reason returned.
pub(super) fn spawn_watchdog(
    name: &str,
    as_postgres: bool,
    bin: &Path,
    data: &Path,
    dir: &Path,
) -> Result<std::process::Child, String> {
    use std::os::unix::process::CommandExt;
    let watchdog = Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG_SCRIPT)
        .arg(name)
        .arg(if as_postgres { "1" } else { "0" })
        .arg(bin.join("pg_ctl"))
        .arg(data)
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group: a Ctrl-C to the test run must not kill it before it cleans up.
        .process_group(0)
        .spawn();
    watchdog.map_err(|e| {
        let mut stop = pg_command(as_postgres, &bin.join("pg_ctl"));
        stop.arg("-D").arg(data).args(["-m", "immediate", "stop"]);
        let _ = run(stop, "pg_ctl stop");
        format!("cannot start the cluster watchdog: {e}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_explicit_url_without_a_server_fails_with_a_how_to_and_no_secret() {
        let err = discover(Some("postgres://someone:s3cret@127.0.0.1:1/db".into()))
            .await
            .unwrap_err();
        assert!(err.contains(TEST_URL_ENV), "{err}");
        assert!(!err.contains("s3cret") && !err.contains("someone"), "{err}");
    }

    /// The third provisioning step works on its own: a private cluster starts, answers, and is
    /// stopped and removed by its watchdog.
    #[tokio::test]
    async fn private_cluster_starts_answers_and_is_removed() {
        let cluster = tokio::task::spawn_blocking(start_private_cluster)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("private cluster: {e}"));
        let url = cluster.url.clone();
        let port: u16 = url
            .rsplit(':')
            .next()
            .and_then(|s| s.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap();
        probe_server(&url, Duration::from_secs(10)).await.unwrap();
        tokio::task::spawn_blocking(move || cluster.stop())
            .await
            .unwrap();
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "the cluster still listens after its watchdog ran"
        );
    }
}

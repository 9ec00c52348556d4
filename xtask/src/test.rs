//! `cargo xtask test`: provision Postgres (DESIGN §7), then run the whole suite.

use std::ffi::OsString;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// The conventional local server the suite probes after `CAIRN_TEST_POSTGRES_URL`.
const LOCAL_PG: ([u8; 4], u16) = ([127, 0, 0, 1], 5432);
/// How long a cluster we started may take to accept connections.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// Runs the suite and returns its exit status.
pub(crate) fn run(args: &[String]) -> Result<ExitCode, String> {
    ensure_postgres();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    // Unit, integration and conformance tests first: their output lists every test by name.
    let steps: [&[&str]; 2] = [
        &["test", "--workspace", "--all-targets"],
        &["test", "--workspace", "--doc"],
    ];
    for step in steps {
        let status = Command::new(&cargo)
            .args(step)
            .args(args)
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !status.success() {
            return Ok(failed(status));
        }
    }
    // The API docs, every feature on (what docs.rs renders), must build without a warning:
    // a broken or private intra-doc link fails the suite.
    let status = Command::new(&cargo)
        .args(DOC_STEP)
        .env("RUSTDOCFLAGS", "-D warnings")
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Ok(failed(status));
    }
    Ok(ExitCode::SUCCESS)
}

/// The docs step: `RUSTDOCFLAGS="-D warnings" cargo doc` with these arguments.
const DOC_STEP: &[&str] = &["doc", "--workspace", "--all-features", "--no-deps"];

/// The suite's exit status for a failed cargo step (at least 1).
fn failed(status: std::process::ExitStatus) -> ExitCode {
    let code = status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(1);
    ExitCode::from(code.max(1))
}

/// Makes a Postgres server reachable when that is cheap: a configured URL is trusted as is; a
/// local Debian cluster that is installed but down gets started. Otherwise the suite's own
/// provisioning (a throwaway `initdb` cluster, then testcontainers) takes over, and its
/// Postgres tests fail with instructions when nothing works: Postgres is never skipped.
fn ensure_postgres() {
    if std::env::var_os("CAIRN_TEST_POSTGRES_URL").is_some() {
        eprintln!("xtask: Postgres: using CAIRN_TEST_POSTGRES_URL");
        return;
    }
    if local_pg_answers() {
        eprintln!("xtask: Postgres: server found on 127.0.0.1:5432");
        return;
    }
    let Some(version) = debian_cluster() else {
        eprintln!(
            "xtask: Postgres: nothing on 127.0.0.1:5432 and no local cluster in /etc/postgresql; \
             the suite will try initdb or Docker itself"
        );
        return;
    };
    eprintln!("xtask: Postgres: starting the local cluster {version}/main");
    let started = Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", &version, "main", "start"])
        .status();
    match started {
        Ok(status) if status.success() => {}
        Ok(status) => eprintln!("xtask: Postgres: pg_ctlcluster exited with {status}"),
        Err(e) => eprintln!("xtask: Postgres: cannot run pg_ctlcluster: {e}"),
    }
    let deadline = Instant::now() + START_DEADLINE;
    while Instant::now() < deadline {
        if local_pg_answers() {
            eprintln!("xtask: Postgres: the local cluster accepts connections");
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "xtask: Postgres: the local cluster did not answer within {}s; the suite will try initdb or Docker itself",
        START_DEADLINE.as_secs()
    );
}

fn local_pg_answers() -> bool {
    let addr = SocketAddr::from(LOCAL_PG);
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
}

/// The newest Debian-style cluster named `main` (`/etc/postgresql/<version>/main`).
fn debian_cluster() -> Option<String> {
    let entries = std::fs::read_dir("/etc/postgresql").ok()?;
    entries
        .filter_map(Result::ok)
        .filter(|e| Path::new(&e.path()).join("main").is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .max_by(|a, b| version_key(a).cmp(&version_key(b)))
}

/// Orders `9.6` < `16` < `17` numerically.
fn version_key(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_versions_order_numerically() {
        let newest = ["9.6", "16", "15", "10"]
            .into_iter()
            .max_by(|a, b| version_key(a).cmp(&version_key(b)));
        assert_eq!(newest, Some("16"));
    }
}

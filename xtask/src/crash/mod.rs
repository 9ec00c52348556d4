//! `cargo xtask crash`: kill -9 crash loops against a real store.
//!
//! The parent starts this binary again as a child (`crash-child`, hidden) that opens the store
//! and runs a seeded random mix of writes, recording each acknowledged one in a side log
//! ([`log`]); it kills the child with SIGKILL after a random delay (so kills land inside
//! transactions, migrations and checkpoints), then opens the store through the runner at the
//! child's head and holds it to the log ([`verify`]). Then the next child continues on the
//! same store.

mod log;
mod rng;
mod verify;
mod workload;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use cairn::{Opened, Store};

pub(crate) use workload::ChildArgs;

/// How many application revisions the harness's builds grow to (one more per session).
const MAX_REVISIONS: usize = 40;

/// The engine a crash run targets.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CrashBackend {
    /// A SQLite file in a temp dir.
    Sqlite,
    /// A scratch database on the test server (`CAIRN_TEST_POSTGRES_URL`, 127.0.0.1:5432, or a
    /// throwaway cluster).
    Postgres,
}

/// `cargo xtask crash` arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct CrashArgs {
    /// The engine.
    #[arg(long, value_enum)]
    backend: CrashBackend,
    /// How many times the child is killed (each followed by a full verification).
    #[arg(long, default_value_t = 10)]
    crashes: u64,
    /// Seed of the mix and of the kill delays (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Longest time a child runs before it is killed, in milliseconds (each delay is uniform
    /// between 0 and this).
    #[arg(long, default_value_t = 1500)]
    max_delay_ms: u64,
    /// Self-test: the child records every fifth append as acknowledged without making it;
    /// the run must then report violations and exit 1.
    #[arg(long)]
    plant_lost_append: bool,
}

/// What a run found.
#[derive(Default, Debug)]
struct Tally {
    crashes: u64,
    early_exits: u64,
    ops: u64,
    caches_repaired: u64,
    /// Each distinct violation once, with the first session after which it was seen (the log
    /// keeps every entry, so a lost write is reported again after every later crash).
    violations: Vec<String>,
    seen: std::collections::BTreeSet<String>,
}

impl Tally {
    fn violation(&mut self, session: u64, v: String) {
        if self.seen.insert(v.clone()) {
            self.violations
                .push(format!("after crash {}: {v}", session + 1));
        }
    }
}

/// Runs the crash loop and prints the summary; exit 1 on any violation.
pub(crate) fn run(args: &CrashArgs) -> Result<ExitCode, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(crash_loop(args))
}

/// The hidden child command.
pub(crate) fn child(args: &ChildArgs) -> Result<ExitCode, String> {
    workload::run(args).map(|()| ExitCode::SUCCESS)
}

async fn crash_loop(args: &CrashArgs) -> Result<ExitCode, String> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let dir = tempfile::Builder::new()
        .prefix("cairn-crash-")
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir: {e}"))?;
    let target = match args.backend {
        CrashBackend::Sqlite => Target::Sqlite(dir.path().join("store.db")),
        CrashBackend::Postgres => Target::postgres().await?,
    };
    let log_path = dir.path().join("acked.log");
    println!(
        "crash: backend {:?}, {} crashes, seed {seed}, kill delay 0..{} ms",
        args.backend, args.crashes, args.max_delay_ms
    );
    let started = Instant::now();
    let result = run_crashes(args, seed, &target, dir.path(), &log_path).await;
    target.drop_scratch().await;
    let tally = result?;
    let elapsed = started.elapsed();
    println!(
        "crash: backend {:?}: {} crashes, {} operations acknowledged, {} stale caches repaired, \
         {} early child exits, {} violations, {:.1} s",
        args.backend,
        tally.crashes,
        tally.ops,
        tally.caches_repaired,
        tally.early_exits,
        tally.violations.len(),
        elapsed.as_secs_f64()
    );
    for v in tally.violations.iter().take(30) {
        println!("  violation: {v}");
    }
    Ok(if tally.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn run_crashes(
    args: &CrashArgs,
    seed: u64,
    target: &Target,
    dir: &Path,
    log_path: &Path,
) -> Result<Tally, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let mut rng = rng::Rng::seed(seed);
    let mut tally = Tally::default();
    for session in 0..args.crashes {
        let revisions = usize::try_from(session + 1)
            .unwrap_or(MAX_REVISIONS)
            .min(MAX_REVISIONS);
        let stderr_path = dir.join("child.stderr");
        let stderr = std::fs::File::create(&stderr_path)
            .map_err(|e| format!("cannot create the child's stderr file: {e}"))?;
        let mut cmd = Command::new(&exe);
        cmd.arg("crash-child")
            .arg("--url")
            .arg(target.url())
            .arg("--log")
            .arg(log_path)
            .arg("--session")
            .arg(session.to_string())
            .arg("--seed")
            .arg(seed.to_string())
            .arg("--revisions")
            .arg(revisions.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        if args.plant_lost_append {
            cmd.arg("--plant-lost-append");
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the child: {e}"))?;
        let delay = Duration::from_millis(rng.within(0..=args.max_delay_ms));
        if let Some(status) = wait_or_kill(&mut child, delay)? {
            // The mix never ends by itself: an exit is a failure the child reported.
            tally.early_exits += 1;
            let text = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            tally.violation(
                session,
                format!("the child exited by itself ({status}): {}", text.trim()),
            );
        }
        tally.crashes += 1;
        verify_once(target, log_path, revisions, session, &mut tally).await?;
        if (session + 1) % 25 == 0 {
            println!(
                "crash: {} crashes, {} operations acknowledged, {} violations",
                tally.crashes,
                tally.ops,
                tally.violations.len()
            );
        }
    }
    Ok(tally)
}

/// Lets the child run for `delay`, then kills it with SIGKILL (`Child::kill` on unix) and reaps
/// it. Returns the exit status when the child ended by itself first.
fn wait_or_kill(
    child: &mut Child,
    delay: Duration,
) -> Result<Option<std::process::ExitStatus>, String> {
    let deadline = Instant::now() + delay;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| format!("cannot poll the child: {e}"))?
        {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(5)));
    }
    child
        .kill()
        .map_err(|e| format!("cannot kill the child: {e}"))?;
    child
        .wait()
        .map_err(|e| format!("cannot reap the child: {e}"))?;
    Ok(None)
}

/// Opens the store through the runner at the last child's head and checks it against the log.
async fn verify_once(
    target: &Target,
    log_path: &Path,
    revisions: usize,
    session: u64,
    tally: &mut Tally,
) -> Result<(), String> {
    let entries = log::read(log_path)?;
    tally.ops = entries
        .iter()
        .filter(|e| !matches!(e, log::Entry::Session { .. }))
        .count() as u64;
    let store = match Store::builder(target.url())
        .pool_size(4)
        .migrations(workload::app_set(revisions)?)
        .open()
        .await
    {
        Ok(store) => store,
        Err(e) => {
            tally.violation(session, format!("the store does not open at head: {e}"));
            return Ok(());
        }
    };
    for set in store.migrations() {
        if !matches!(set.outcome, Opened::AtHead | Opened::Upgraded { .. }) {
            tally.violation(
                session,
                format!(
                    "set {} opened as {:?}, not at head or upgraded",
                    set.set, set.outcome
                ),
            );
        }
    }
    match verify::collect(&store, &entries).await {
        Ok((snapshot, heads, notes)) => {
            tally.caches_repaired += notes.caches_repaired;
            for v in heads.into_iter().chain(verify::check(&entries, &snapshot)) {
                tally.violation(session, v);
            }
        }
        Err(e) => tally.violation(session, format!("reading the store failed: {e}")),
    }
    if let Target::Postgres { url, .. } = target {
        // What no API call shows: every live run, and only a live run, has its spool_ready row.
        match ready_mismatches(url).await {
            Ok(wrong) => {
                for run_no in wrong {
                    tally.violation(
                        session,
                        format!("spool_ready breaks I-ready for run_no {run_no}"),
                    );
                }
            }
            Err(e) => tally.violation(session, format!("checking spool_ready failed: {e}")),
        }
    }
    store.close().await.map_err(|e| e.to_string())?;
    Ok(())
}

/// The runs of the store at `url` (schema `public`) that break I-ready
/// (`cairn_postgres::spool::testkit::ready_mismatches`).
async fn ready_mismatches(url: &str) -> Result<Vec<i64>, String> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    cairn::testkit::postgres::spool::testkit::ready_mismatches(&mut conn)
        .await
        .map_err(|e| e.to_string())
}

/// Where the store lives.
enum Target {
    Sqlite(PathBuf),
    /// A scratch database this run created (dropped at the end): its URL, the server's admin
    /// URL and its name.
    Postgres {
        url: String,
        admin: String,
        name: String,
    },
}

impl Target {
    /// Creates a scratch database on the test server.
    async fn postgres() -> Result<Self, String> {
        use sqlx::Connection;
        let admin = cairn::testkit::postgres::testkit::test_server_url().await?;
        let name = cairn::testkit::scratch_name("cairn_crash");
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .map_err(|e| format!("cannot reach the test server: {e}"))?;
        // The name is ours: `scratch_name` makes `[a-z0-9_]` only.
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .map_err(|e| format!("cannot create the scratch database: {e}"))?;
        let _ = conn.close().await;
        let url = with_database(&admin, &name)?;
        Ok(Target::Postgres { url, admin, name })
    }

    fn url(&self) -> String {
        match self {
            Target::Sqlite(path) => format!("sqlite://{}", path.display()),
            Target::Postgres { url, .. } => url.clone(),
        }
    }

    /// Drops the scratch database (only ours, by name), ending its leftover sessions.
    async fn drop_scratch(&self) {
        use sqlx::Connection;
        if let Target::Postgres { admin, name, .. } = self {
            if let Ok(mut conn) = sqlx::PgConnection::connect(admin).await {
                let dropped = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut conn)
                    .await;
                if let Err(e) = dropped {
                    eprintln!("crash: could not drop the scratch database {name}: {e}");
                }
                let _ = conn.close().await;
            }
        }
    }
}

/// `url` with its database replaced by `name` (query string kept).
fn with_database(url: &str, name: &str) -> Result<String, String> {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base
        .find("://")
        .ok_or("the test server URL has no scheme")?
        + 3;
    let path_start = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn the_scratch_url_swaps_only_the_database() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "x").unwrap(),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h:1?sslmode=disable", "x").unwrap(),
            "postgres://u@h:1/x?sslmode=disable"
        );
    }
}

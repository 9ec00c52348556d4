//! The peers of `cargo xtask bench spool`: riverqueue, apalis and graphile_worker (Rust),
//! measured on fresh stores with the same rows as cairn's bench, printing one JSON document on
//! stdout.
//!
//! Usage: `cairn-bench-peers --backend sqlite|postgres [--url POSTGRES_ADMIN_URL] [--runs 3]
//! [--enqueue 5000] [--duplicates 1000] [--claims 5000] [--workers 10] [--producers 8]
//! [--bulk 10000] [--bulk-batch 1000] [--drain 20000] [--drain-concurrency 10,24]
//! [--latency-rate 200] [--latency-samples 1000] [--rows 1,2,3,4,6]` (rows 8 and 9 are run only
//! when `--rows` names them).
//!
//! Systems: `riverqueue` and `apalis` on both engines; `graphile_worker` (every row) is Postgres
//! only and is absent from `systems` on `--backend sqlite`.
//!
//! Rows (numbered as in `cargo xtask bench spool`):
//! - 1 and 2: enqueue one job per call with the system's dedup key, then enqueue `--duplicates`
//!   of those keys again (what a duplicate returns is reported in `duplicate_returns`);
//! - 3: claim + complete: `--claims` jobs seeded before the clock, a worker of `--workers`
//!   concurrency with a no-op handler, timed from starting the worker until every job is
//!   completed in the store;
//! - 4: `--producers` concurrent producers, one job per call;
//! - 6: bulk enqueue: `--bulk` distinct keys in batches of `--bulk-batch`, each batch one call of
//!   the system's bulk API;
//! - 8: drain with batching allowed: for each concurrency C of `--drain-concurrency`, `--drain`
//!   jobs seeded before the clock (bulk insert), drained with the system's batch fetch and
//!   batched completion at its fastest documented settings; the rate, the wall time and the
//!   whole machine's busy CPU (from the first line of `/proc/stat`: user+nice+system+irq+
//!   softirq+steal ticks at 100 per second; iowait and idle excluded) over exactly that window;
//! - 9: end-to-end latency, enqueue in one OS process → handler start in another: this binary
//!   spawns itself as the worker process (hidden flags `--latency-worker SYSTEM --target
//!   SQLITE_FILE|POSTGRES_URL`), waits for its `ready` line and for one probe job to come back,
//!   then enqueues one job at a time at a steady `--latency-rate` per second (job i at
//!   t0 + i/rate; when behind it sends at once and never shifts the schedule), each payload
//!   carrying the wall clock (µs since the Unix epoch) taken just before the insert call. The
//!   worker's handler prints its wall clock at handler start minus that time. 20 warm-up jobs are
//!   discarded, then `--latency-samples` are reported (p = the value at rank ceil(n·q) of the
//!   sorted samples).
//!
//! A row left out of `--rows` is absent from the JSON. Rows 3 and 8 wait for their end without
//! polling while the handlers run (the handlers count themselves and wake the waiter), then poll
//! the store's count every 2 ms until it agrees, so the measurement's own queries stay out of the
//! drain.
//!
//! Settings, chosen as each system's fastest documented configuration for the row (each
//! system's `settings` string in the JSON states every setting each row used):
//! - riverqueue: `fetch_cooldown` 1 ms (its minimum; the default 100 ms paces fetches and insert
//!   notifications), `QueueConfig::new(workers)`. Its batching has no knobs: a fetch claims up to
//!   the queue's free worker slots in one statement and the completer coalesces results for
//!   10 ms and writes up to 5000 per statement. Row 9: Postgres `LISTEN/NOTIFY` (the inserting
//!   client also runs `fetch_cooldown` 1 ms, which paces its notifications); on SQLite the fetch
//!   poll interval is its 1 ms minimum, River's notification outbox being polled every 100 ms.
//! - apalis: concurrency = workers, poll interval 1 ms, `batch_size` 10 (its default) for rows 3
//!   and 9 and 2000 for row 8 ([`APALIS_DRAIN_BATCH`]: measured, apalis waits about the same per
//!   fetched batch whatever its size, so larger is faster); completions are written together by
//!   apalis' event flush (all waiting acks in one transaction, no knob). Row 9 shows a stall of
//!   apalis-core 1.0.0: its `IntervalStrategy` re-arms its timer without polling it, so when the
//!   fetch in flight comes back empty in that same poll the worker parks with no timer armed
//!   and sleeps until its next heartbeat (`heartbeat_interval`, 30 s by default).
//! - graphile_worker: rows 3 and 8 use its documented throughput options: `local_queue` (size
//!   concurrency+1 for row 3, 500 for row 8 as in graphile-worker's performance preset),
//!   `complete_job_batch_delay` 0 and `fail_job_batch_delay` 0, a pool of concurrency+1; row 9
//!   its defaults (`LISTEN/NOTIFY`, no local queue, no batching) with concurrency = workers.
//!
//! Durability is matched with cairn's: every SQLite connection runs `synchronous=FULL` in WAL
//! mode (apalis' own setup switches its connection to `synchronous=OFF`, so its pool is closed
//! after setup and reopened with FULL); Postgres keeps the server's `synchronous_commit=on`.
//! Each row of each run (and each concurrency of row 8) gets a fresh store, a new SQLite file
//! or a new Postgres database, dropped afterwards whether the row succeeded or not.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

mod apalis_peer;
mod graphile;
mod latency;
mod river;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = Result<T, BoxError>;

/// How long a row may wait for its end (or a latency worker for its jobs) before it is declared
/// stuck.
const DEADLINE: Duration = Duration::from_secs(600);
/// Jobs per bulk insert call when rows 3 and 8 seed their store.
const SEED_BATCH: usize = 1000;
/// apalis' fetch batch size in row 8. apalis spends a roughly fixed wait per fetched batch
/// (measured here on Postgres, 20000 jobs, C=10: batch_size 10 → about 3k jobs/s, 500 → 7.4k,
/// 1000 → 13.6k, 2000 → 15k to 19k, 5000 → 20k; on SQLite about 200/s whatever the size), so
/// larger is faster; 2000 is where the gain flattens while one worker's claimed-ahead tasks
/// stay a tenth of the default drain.
const APALIS_DRAIN_BATCH: usize = 2000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgres",
        }
    }

    fn durability(self) -> &'static str {
        match self {
            Engine::Sqlite => "WAL, synchronous=FULL",
            Engine::Postgres => "synchronous_commit=on",
        }
    }
}

struct Args {
    backend: Engine,
    url: String,
    runs: usize,
    enqueue: usize,
    duplicates: usize,
    claims: usize,
    workers: usize,
    producers: usize,
    bulk: usize,
    bulk_batch: usize,
    drain: usize,
    drain_concurrency: Vec<usize>,
    latency_rate: f64,
    latency_samples: usize,
    rows: Vec<u32>,
    /// Set in the worker process of row 9: the system it runs.
    latency_worker: Option<String>,
    /// The worker process' store: a SQLite file or a Postgres URL.
    target: Option<String>,
}

impl Args {
    fn row(&self, n: u32) -> bool {
        self.rows.contains(&n)
    }
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        backend: Engine::Sqlite,
        url: "postgres://postgres@127.0.0.1:5432/postgres".to_owned(),
        runs: 3,
        enqueue: 5000,
        duplicates: 1000,
        claims: 5000,
        workers: 10,
        producers: 8,
        bulk: 10_000,
        bulk_batch: 1000,
        drain: 20_000,
        drain_concurrency: vec![10, 24],
        latency_rate: 200.0,
        latency_samples: 1000,
        rows: vec![1, 2, 3, 4, 6],
        latency_worker: None,
        target: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || value.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        let positive = || match num()? {
            0 => Err(format!("{flag} must be at least 1")),
            n => Ok(n),
        };
        match flag.as_str() {
            "--backend" => {
                a.backend = match value.as_str() {
                    "sqlite" => Engine::Sqlite,
                    "postgres" => Engine::Postgres,
                    other => return Err(format!("unknown backend {other}").into()),
                }
            }
            "--url" => a.url = value,
            "--runs" => a.runs = num()?,
            "--enqueue" => a.enqueue = num()?,
            "--duplicates" => a.duplicates = num()?,
            "--claims" => a.claims = positive()?,
            "--workers" => a.workers = positive()?,
            "--producers" => a.producers = positive()?,
            "--bulk" => a.bulk = num()?,
            "--bulk-batch" => a.bulk_batch = num()?.max(1),
            "--drain" => a.drain = positive()?,
            "--drain-concurrency" => {
                a.drain_concurrency = value
                    .split(',')
                    .map(|c| match c.trim().parse::<usize>() {
                        Ok(0) => Err(format!("{flag}: a concurrency must be at least 1")),
                        Ok(n) => Ok(n),
                        Err(e) => Err(format!("{flag}: {e}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--latency-rate" => {
                a.latency_rate = match value.parse::<f64>() {
                    Ok(r) if r.is_finite() && r > 0.0 => r,
                    Ok(_) => return Err(format!("{flag} must be a positive number").into()),
                    Err(e) => return Err(format!("{flag}: {e}").into()),
                }
            }
            "--latency-samples" => a.latency_samples = positive()?,
            "--rows" => {
                a.rows = value
                    .split(',')
                    .map(|r| r.trim().parse::<u32>().map_err(|e| format!("--rows: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--latency-worker" => a.latency_worker = Some(value),
            "--target" => a.target = Some(value),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(a)
}

fn key(i: usize) -> String {
    format!("bench-key-{i:08}")
}

fn rate(ops: usize, took: Duration) -> f64 {
    ops as f64 / took.as_secs_f64()
}

fn sqlite_options_at(path: &Path) -> sqlx::sqlite::SqliteConnectOptions {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(30))
}

async fn sqlite_pool_at(path: &Path, max: u32) -> Res<sqlx::SqlitePool> {
    Ok(sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(max)
        .connect_with(sqlite_options_at(path))
        .await?)
}

async fn pg_pool_at(url: &str, max: u32) -> Res<sqlx::PgPool> {
    Ok(sqlx::postgres::PgPoolOptions::new()
        .max_connections(max)
        .connect(url)
        .await?)
}

/// A fresh store for one row: a SQLite file in a new directory, or a new Postgres database.
struct Fresh {
    backend: Engine,
    admin_url: String,
    dir: Option<PathBuf>,
    db_name: Option<String>,
}

static FRESH_COUNTER: AtomicUsize = AtomicUsize::new(0);

impl Fresh {
    async fn new(backend: Engine, admin_url: &str, tag: &str) -> Res<Self> {
        let n = FRESH_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("cairn_peers_{tag}_{}_{n}", std::process::id());
        match backend {
            Engine::Sqlite => {
                let dir = std::env::temp_dir().join(name);
                std::fs::create_dir_all(&dir)?;
                Ok(Self {
                    backend,
                    admin_url: admin_url.to_owned(),
                    dir: Some(dir),
                    db_name: None,
                })
            }
            Engine::Postgres => {
                let admin = sqlx::PgPool::connect(admin_url).await?;
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&admin)
                    .await?;
                admin.close().await;
                Ok(Self {
                    backend,
                    admin_url: admin_url.to_owned(),
                    dir: None,
                    db_name: Some(name),
                })
            }
        }
    }

    fn sqlite_path(&self) -> Res<PathBuf> {
        Ok(self
            .dir
            .as_ref()
            .ok_or("not a sqlite store")?
            .join("peer.db"))
    }

    async fn sqlite_pool(&self, max: u32) -> Res<sqlx::SqlitePool> {
        sqlite_pool_at(&self.sqlite_path()?, max).await
    }

    fn pg_url(&self) -> Res<String> {
        let name = self.db_name.as_ref().ok_or("not a postgres store")?;
        let base = self
            .admin_url
            .rsplit_once('/')
            .map(|(b, _)| b)
            .ok_or("the Postgres URL has no database part")?;
        Ok(format!("{base}/{name}"))
    }

    async fn pg_pool(&self, max: u32) -> Res<sqlx::PgPool> {
        pg_pool_at(&self.pg_url()?, max).await
    }

    /// What the worker process of row 9 opens: the SQLite file or the database's URL.
    fn target(&self) -> Res<String> {
        match self.backend {
            Engine::Sqlite => Ok(self
                .sqlite_path()?
                .to_str()
                .ok_or("the SQLite path is not UTF-8")?
                .to_owned()),
            Engine::Postgres => self.pg_url(),
        }
    }

    async fn drop_store(self) -> Res<()> {
        if let Some(dir) = &self.dir {
            std::fs::remove_dir_all(dir)?;
        }
        if let Some(name) = &self.db_name {
            let admin = sqlx::PgPool::connect(&self.admin_url).await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&admin)
            .await?;
            admin.close().await;
        }
        Ok(())
    }
}

/// Runs `row` on a fresh store and drops the store afterwards, whether the row succeeded or not.
async fn with_fresh<T>(a: &Args, tag: &str, row: impl AsyncFnOnce(&Fresh) -> Res<T>) -> Res<T> {
    let fresh = Fresh::new(a.backend, &a.url, tag).await?;
    let result = row(&fresh).await;
    let dropped = fresh.drop_store().await;
    let value = result?;
    dropped?;
    Ok(value)
}

/// What one run of one system measured (operations per second unless said otherwise) and saw;
/// a row that was not run is left out.
#[derive(Default, Serialize)]
struct RunResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    enqueue: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duplicate: Option<f64>,
    #[serde(skip_serializing_if = "String::is_empty")]
    duplicate_returns: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    claim_complete: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    producers_1: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    producers_n: Option<f64>,
    /// Row 6: jobs per second of the bulk insert.
    #[serde(skip_serializing_if = "Option::is_none")]
    bulk_enqueue: Option<f64>,
    /// Row 8: one entry per `--drain-concurrency`.
    #[serde(skip_serializing_if = "Option::is_none")]
    drain: Option<Vec<DrainRun>>,
    /// Row 9.
    #[serde(skip_serializing_if = "Option::is_none")]
    latency: Option<latency::Latency>,
}

/// Row 8 at one concurrency.
#[derive(Serialize)]
struct DrainRun {
    concurrency: usize,
    jobs: usize,
    /// Jobs per second.
    rate: f64,
    /// Wall seconds from starting the worker until every job was completed in the store.
    secs: f64,
    /// The whole machine's busy CPU seconds over that window.
    busy_cpu_s: f64,
}

/// The whole machine's busy CPU ticks so far: user+nice+system+irq+softirq+steal of the first
/// line of `/proc/stat` (iowait and idle excluded).
fn busy_ticks() -> Res<u64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().ok_or("/proc/stat is empty")?;
    let mut fields = line.split_whitespace();
    if fields.next() != Some("cpu") {
        return Err(format!("unexpected first line of /proc/stat: {line}").into());
    }
    let v = fields
        .take(8)
        .map(|f| f.parse::<u64>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("/proc/stat: {e}"))?;
    if v.len() < 8 {
        return Err(format!("/proc/stat's cpu line has {} fields, not 8", v.len()).into());
    }
    Ok(v[0] + v[1] + v[2] + v[5] + v[6] + v[7])
}

/// The measured window of row 8: wall clock and the machine's busy CPU ticks.
struct Window {
    started: Instant,
    ticks: u64,
}

impl Window {
    fn start() -> Res<Self> {
        let ticks = busy_ticks()?;
        Ok(Self {
            started: Instant::now(),
            ticks,
        })
    }

    fn finish(self, concurrency: usize, jobs: usize) -> Res<DrainRun> {
        let took = self.started.elapsed();
        let ticks = busy_ticks()?.saturating_sub(self.ticks);
        Ok(DrainRun {
            concurrency,
            jobs,
            rate: rate(jobs, took),
            secs: took.as_secs_f64(),
            busy_cpu_s: ticks as f64 / 100.0,
        })
    }
}

/// Counts handler runs and wakes the waiter once `target` were counted.
#[derive(Debug)]
struct Progress {
    runs: AtomicUsize,
    target: usize,
    reached: tokio::sync::Notify,
}

impl Progress {
    fn new(target: usize) -> Arc<Self> {
        Arc::new(Self {
            runs: AtomicUsize::new(0),
            target,
            reached: tokio::sync::Notify::new(),
        })
    }

    /// Called by a handler.
    fn hit(&self) {
        if self.runs.fetch_add(1, Ordering::SeqCst) + 1 == self.target {
            self.reached.notify_waiters();
        }
    }

    /// Waits (without polling) until `target` handler runs were counted.
    async fn wait(&self, deadline: Instant) -> Res<()> {
        loop {
            let notified = self.reached.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.runs.load(Ordering::SeqCst) >= self.target {
                return Ok(());
            }
            tokio::time::timeout_at(deadline.into(), notified)
                .await
                .map_err(|_| {
                    format!(
                        "{} of {} handler runs before the deadline",
                        self.runs.load(Ordering::SeqCst),
                        self.target
                    )
                })?;
        }
    }
}

/// Polls `check` every 2 ms until it holds, failing after `deadline`.
async fn wait_until<F, Fut>(deadline: Instant, mut check: F) -> Res<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Res<bool>>,
{
    while !check().await? {
        if Instant::now() > deadline {
            return Err("the row did not finish before its deadline".into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// The end of rows 3 and 8: every handler ran (counted by `progress`, no polling), then the
/// store agrees that every job is completed (`completed` polled every 2 ms).
async fn wait_completed<F, Fut>(progress: &Progress, completed: F) -> Res<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Res<bool>>,
{
    let deadline = Instant::now() + DEADLINE;
    progress.wait(deadline).await?;
    wait_until(deadline, completed).await
}

/// One system's entry of `systems`.
fn system(name: &str, version: &str, settings: &str, runs: Vec<Res<RunResult>>) -> Value {
    let mut ok = Vec::new();
    let mut errors = Vec::new();
    for r in runs {
        match r {
            Ok(r) => ok.push(r),
            Err(e) => errors.push(e.to_string()),
        }
    }
    json!({
        "name": name,
        "version": version,
        "settings": settings,
        "runs": ok,
        "errors": errors,
    })
}

/// Joins the settings of the rows that were run, each prefixed with its row numbers.
fn settings(head: String, a: &Args, rows: &[(&[u32], String)]) -> String {
    let mut out = head;
    for (numbers, text) in rows {
        if numbers.iter().any(|n| a.row(*n)) {
            let names: Vec<String> = numbers.iter().map(|n| n.to_string()).collect();
            let label = if numbers.len() == 1 { "row" } else { "rows" };
            out.push_str(&format!("; {label} {}: {text}", names.join(",")));
        }
    }
    out
}

fn list(values: &[usize]) -> String {
    values
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cairn-bench-peers: {e}");
            std::process::exit(2);
        }
    };
    if a.latency_worker.is_some() {
        if let Err(e) = latency::worker_process(&a).await {
            eprintln!("cairn-bench-peers latency worker: {e}");
            std::process::exit(1);
        }
        return;
    }
    let mut river_runs = Vec::new();
    let mut apalis_runs = Vec::new();
    let mut graphile_runs = Vec::new();
    for _ in 0..a.runs {
        river_runs.push(river::run(&a).await);
        apalis_runs.push(apalis_peer::run(&a).await);
        if a.backend == Engine::Postgres {
            graphile_runs.push(graphile::run(&a).await);
        }
    }
    let mut systems = vec![
        system(
            "riverqueue",
            river::VERSION,
            &river::settings(&a),
            river_runs,
        ),
        system(
            "apalis",
            apalis_peer::VERSION,
            &apalis_peer::settings(&a),
            apalis_runs,
        ),
    ];
    if a.backend == Engine::Postgres {
        systems.push(system(
            "graphile_worker",
            graphile::VERSION,
            &graphile::settings(&a),
            graphile_runs,
        ));
    }
    let doc = json!({
        "backend": a.backend.name(),
        "enqueue": a.enqueue,
        "duplicates": a.duplicates,
        "claims": a.claims,
        "workers": a.workers,
        "producers": a.producers,
        "bulk": a.bulk,
        "bulk_batch": a.bulk_batch,
        "drain": a.drain,
        "drain_concurrency": a.drain_concurrency,
        "latency_rate": a.latency_rate,
        "latency_samples": a.latency_samples,
        "rows": a.rows,
        "systems": systems,
    });
    println!("{doc}");
}

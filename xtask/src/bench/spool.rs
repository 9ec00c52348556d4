//! `cargo xtask bench spool`: cairn's spool against its peers (riverqueue, apalis), the same
//! rows on fresh stores, one system after the other in one invocation.
//!
//! Rows: (1) enqueue N distinct keys one at a time; (2) enqueue 1,000 existing keys again, and
//! what each system returns; (3) claim + complete with a no-op handler, 10 workers; (4) 8
//! concurrent producers ÷ 1; (5) cross-process wake latency (cairn only): an enqueue in this
//! process until a consumer waiting in another OS process holds the run; (6) bulk enqueue:
//! 10,000 distinct keys in batches of 1,000, one bulk call per batch ([`bulk`]); (7) an
//! enqueue inside the application's own transaction next to one application row, against
//! the same transaction with a bare insert of a row as wide as the queue's ([`in_tx`]).
//! `--rows` picks the rows to run.
//!
//! The peers live in `bench/peers/`, a cargo project outside the workspace (they link another
//! sqlx and libsqlite3-sys than cairn's rusqlite); `--peers` builds it in release and runs it,
//! and it prints JSON. Row 6's graphile-worker peer is a Node script in `bench/peers/graphile/`,
//! installed there with `npm ci` when `node` is on the PATH.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cairn::spool::{ConsumerBuilder, Job, Outcome, SpoolConfig};
use cairn::testkit::postgres::{PgOptions, PgSpool, PgStore};
use cairn::testkit::sqlite::{SqliteOptions, SqliteSpool};
use cairn::{ConsumerId, DedupKey, EnqueueOptions, QueueName, RunState, Spool, SystemClock};

use super::chart::{self, Bar};
use super::cpu::{CpuMeter, CpuUse};
use super::figures::{printable_command, thousands};
use super::setup::{random_tag, store_err, workspace_root, Backend};

mod bulk;
mod drain;
mod in_tx;

pub(crate) use drain::latency_consumer;

/// Options of `bench spool`.
#[derive(clap::Args)]
pub(crate) struct SpoolArgs {
    /// Backend to measure, or `all` for both.
    #[arg(long, value_enum)]
    backend: BackendChoice,
    /// Also build and run the peers (riverqueue, apalis) from `bench/peers/`.
    #[arg(long)]
    peers: bool,
    /// Runs of every row (medians are reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// Distinct keys enqueued one at a time (row 1) and by the producers together (row 4).
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(8..))]
    enqueue: u64,
    /// Existing keys enqueued again (row 2).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    duplicates: u64,
    /// Runs claimed and completed (row 3).
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    claims: u64,
    /// Concurrent workers of row 3.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100))]
    workers: u64,
    /// cairn's consumer prefetch in row 3 (claimed runs waiting for a free slot; graphile-worker
    /// runs its local queue of concurrency + 1 there).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=900))]
    prefetch: u64,
    /// Concurrent producers of row 4.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(2..=64))]
    producers: u64,
    /// Wake-latency samples (row 5).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    wake_samples: u64,
    /// Distinct keys of the bulk enqueue (row 6).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    bulk: u64,
    /// Items per bulk call (row 6).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    bulk_batch: u64,
    /// Transactions per variant of row 7 (one client, one after the other).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    transactions: u64,
    /// Runs queued before row 8's drain.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    drain: u64,
    /// The concurrencies of row 8's drain, each a drain of its own.
    #[arg(long, value_delimiter = ',', default_values_t = [10u64, 24], value_parser = clap::value_parser!(u64).range(1..=100))]
    drain_concurrency: Vec<u64>,
    /// cairn's consumer prefetch in row 8 (graphile-worker's documented local queue: 500).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=900))]
    drain_prefetch: u64,
    /// Row 9's steady enqueue rate (runs per second).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    latency_rate: u64,
    /// Row 9's samples (after 20 warm-up runs).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    latency_samples: u64,
    /// The rows to run, e.g. `--rows 6,7` (default: all, 1–10).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=10))]
    rows: Vec<u32>,
    /// Where to write the SVG chart (default: `docs/bench-spool.svg` in the checkout, written
    /// only when every row ran).
    #[arg(long, value_name = "FILE")]
    chart: Option<PathBuf>,
}

impl SpoolArgs {
    /// Whether row `n` runs.
    pub(crate) fn row(&self, n: u32) -> bool {
        self.rows.is_empty() || self.rows.contains(&n)
    }

    fn all_rows(&self) -> bool {
        (1..=10).all(|n| self.row(n))
    }

    /// Whether row 8's drain runs (row 10 is its CPU figures).
    fn drains(&self) -> bool {
        self.row(8) || self.row(10)
    }
}

/// `--backend` of the throughput benches: one backend or both.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BackendChoice {
    Sqlite,
    Postgres,
    All,
}

impl BackendChoice {
    pub(crate) fn backends(self) -> Vec<Backend> {
        match self {
            Self::Sqlite => vec![Backend::Sqlite],
            Self::Postgres => vec![Backend::Postgres],
            Self::All => vec![Backend::Sqlite, Backend::Postgres],
        }
    }
}

/// Options of the hidden `bench latency-consumer` (row 9's other process).
#[derive(clap::Args)]
pub(crate) struct LatencyConsumerArgs {
    #[arg(long, value_enum)]
    backend: Backend,
    /// SQLite: the store file. Postgres: the server URL.
    #[arg(long)]
    target: String,
    /// Postgres: the store's schema.
    #[arg(long, default_value = "public")]
    schema: String,
    /// The queue to consume.
    #[arg(long)]
    queue: String,
}

/// Options of the hidden `bench wake-consumer` (row 5's other process).
#[derive(clap::Args)]
pub(crate) struct WakeConsumerArgs {
    #[arg(long, value_enum)]
    backend: Backend,
    /// SQLite: the store file. Postgres: the server URL.
    #[arg(long)]
    target: String,
    /// Postgres: the store's schema.
    #[arg(long, default_value = "public")]
    schema: String,
    /// The queue to consume.
    #[arg(long)]
    queue: String,
}

/// One system's per-run measurements on one backend (operations per second).
#[derive(Default, Clone)]
struct Runs {
    enqueue: Vec<f64>,
    duplicate: Vec<f64>,
    duplicate_returns: String,
    claim_complete: Vec<f64>,
    producers_1: Vec<f64>,
    producers_n: Vec<f64>,
    /// Row 6: jobs per second of the bulk enqueue.
    bulk: Vec<f64>,
    /// Row 8 (and its CPU, row 10): every drain, at every concurrency.
    drain: Vec<drain::DrainRun>,
    /// Row 9: end-to-end latency.
    latency: Vec<drain::LatencyRun>,
    /// CPU use while each row ran (cairn only: the peers run in another process), in the order
    /// of [`rows`] (1, 2, 3, 4 with N producers), then row 6.
    cpu: [Vec<CpuUse>; 5],
}

impl Runs {
    fn is_empty(&self) -> bool {
        self.enqueue.is_empty()
            && self.duplicate.is_empty()
            && self.claim_complete.is_empty()
            && self.producers_n.is_empty()
            && self.bulk.is_empty()
            && self.drain.is_empty()
            && self.latency.is_empty()
    }
}

/// A system as the table shows it.
struct System {
    name: String,
    settings: String,
    runs: Runs,
    /// Why the system could not be measured, when it could not.
    failed: Option<String>,
}

/// Runs the benchmark and prints its report.
pub(crate) async fn run(args: SpoolArgs) -> Result<(), String> {
    let backends = args.backend.backends();
    let pg_url = if backends.contains(&Backend::Postgres) {
        Some(cairn::testkit::postgres::testkit::test_server_url().await?)
    } else {
        None
    };
    let peers_bin = if args.peers && [1, 2, 3, 4, 6, 8, 9, 10].iter().any(|&n| args.row(n)) {
        Some(build_peers())
    } else {
        None
    };
    let graphile = if args.peers
        && [3, 6, 8, 9, 10].iter().any(|&n| args.row(n))
        && backends.contains(&Backend::Postgres)
    {
        Some(bulk::prepare_graphile())
    } else {
        None
    };
    let mut charts = Vec::new();
    println!(
        "`{}` — {} run(s) per row, medians; release profile: {}",
        printable_command(std::env::args().skip(1)),
        args.runs,
        !cfg!(debug_assertions)
    );
    for backend in backends {
        // Every run measures the raw commit rate, cairn and the peers one after the other, so
        // drift on the shared machine (other builds' I/O) hits all of them alike.
        let mut fsync = Vec::new();
        let mut systems = vec![System {
            name: "cairn".into(),
            settings: cairn_settings(backend, &args),
            runs: Runs::default(),
            failed: None,
        }];
        let mut in_tx = in_tx::Runs::default();
        for run in 0..args.runs {
            eprintln!("{}: run {} of {}…", backend.name(), run + 1, args.runs);
            fsync.push(
                super::appends::raw_commit_rate(backend, pg_url.as_deref(), 1_000)
                    .await?
                    .0,
            );
            measure_cairn(backend, pg_url.as_deref(), &args, &mut systems[0].runs).await?;
            if args.row(6) {
                bulk::measure_cairn(backend, pg_url.as_deref(), &args, &mut systems[0].runs)
                    .await?;
            }
            if args.drains() {
                drain::measure_cairn(backend, pg_url.as_deref(), &args, &mut systems[0].runs)
                    .await?;
            }
            if args.row(9) {
                drain::measure_cairn_latency(
                    backend,
                    pg_url.as_deref(),
                    &args,
                    &mut systems[0].runs,
                )
                .await?;
            }
            if let Some(bin) = &peers_bin {
                merge(
                    &mut systems,
                    run_peers(bin, backend, pg_url.as_deref(), &args),
                );
            }
            if let (Some(graphile), Backend::Postgres) = (&graphile, backend) {
                merge(
                    &mut systems,
                    vec![bulk::run_graphile(graphile, pg_url.as_deref(), &args)],
                );
            }
            if args.row(7) {
                in_tx::measure(backend, pg_url.as_deref(), &args, &mut in_tx).await?;
            }
        }
        let wake = if args.row(5) {
            wake_latency(backend, pg_url.as_deref(), args.wake_samples).await
        } else {
            Err("not run (--rows)".into())
        };
        let fsync = median(&fsync).unwrap_or(0.0);
        if (1..=5).any(|n| args.row(n)) {
            print_table(backend, &args, &systems, &wake, fsync);
        } else {
            println!(
                "\nRaw durable single-row commit rate of {} in the same run (the fsync bound): {} commits/s",
                backend.name(),
                thousands(fsync.round() as u64)
            );
        }
        if args.row(6) {
            bulk::print_table(backend, &args, &systems);
        }
        if args.row(7) {
            in_tx::print_table(backend, &args, &in_tx);
        }
        if args.drains() {
            drain::print_drain(backend, &args, &systems);
        }
        if args.row(9) {
            drain::print_latency(backend, &args, &systems);
        }
        if args.drains() || args.row(9) {
            drain::print_settings(backend, &args, &systems);
        }
        charts.push((backend, systems, in_tx));
    }
    if args.chart.is_none() && !args.all_rows() {
        println!("\nNo chart written: not every row ran (pass --chart FILE to write one anyway).");
        return Ok(());
    }
    let path = args
        .chart
        .clone()
        .unwrap_or_else(|| workspace_root().join("docs").join("bench-spool.svg"));
    let groups: Vec<(String, Vec<Bar>)> = charts
        .iter()
        .flat_map(|(backend, systems, in_tx)| {
            let mut groups = chart_rows(*backend, systems);
            groups.extend(bulk::chart_rows(*backend, systems));
            groups.extend(in_tx::chart_rows(*backend, in_tx));
            groups.extend(drain::chart_rows(*backend, &args, systems));
            groups
        })
        .filter(|(_, bars)| !bars.is_empty())
        .collect();
    std::fs::write(
        &path,
        chart::svg("cairn spool vs peers (ops/s, medians)", &groups),
    )
    .map_err(|e| format!("cannot write the chart {}: {e}", path.display()))?;
    println!("\nChart written to {}", path.display());
    Ok(())
}

fn queue() -> QueueName {
    QueueName::new("bench").expect("a valid queue name")
}

fn key(i: u64) -> DedupKey {
    DedupKey::from_parts(["bench", &format!("{i:08}")]).expect("a valid key")
}

fn rate(ops: u64, took: Duration) -> f64 {
    ops as f64 / took.as_secs_f64().max(1e-9)
}

/// A fresh spool: a new SQLite file, or a new schema on the Postgres server.
struct Fresh {
    spool: Arc<dyn Spool>,
    /// The SQLite file or the Postgres schema, for the wake consumer.
    target: String,
    schema: String,
    _dir: Option<tempfile::TempDir>,
    admin: Option<sqlx::PgPool>,
    pg: Option<PgSpool>,
}

impl Fresh {
    async fn open(backend: Backend, pg_url: Option<&str>) -> Result<Self, String> {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::Builder::new()
                    .prefix("cairn-bench-spool-")
                    .tempdir()
                    .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
                let path = dir.path().join("spool.db");
                let spool =
                    SqliteSpool::open(&path, SqliteOptions::default(), Arc::new(SystemClock))
                        .await
                        .map_err(store_err)?;
                Ok(Self {
                    spool: Arc::new(spool),
                    target: path.display().to_string(),
                    schema: String::new(),
                    _dir: Some(dir),
                    admin: None,
                    pg: None,
                })
            }
            Backend::Postgres => {
                let url = pg_url.ok_or("no Postgres server")?;
                let schema = format!("cairn_bench_spool_{}", random_tag());
                let admin = sqlx::PgPool::connect(url)
                    .await
                    .map_err(|e| format!("cannot connect to Postgres: {e}"))?;
                let store =
                    PgStore::open_with(PgOptions::new(url.to_owned()).schema(schema.clone()))
                        .await
                        .map_err(store_err)?;
                let spool =
                    PgSpool::from_store(&store, Arc::new(SystemClock), SpoolConfig::default())
                        .map_err(store_err)?;
                Ok(Self {
                    spool: Arc::new(spool.clone()),
                    target: url.to_owned(),
                    schema,
                    _dir: None,
                    admin: Some(admin),
                    pg: Some(spool),
                })
            }
        }
    }

    async fn close(self) -> Result<(), String> {
        if let Some(pg) = &self.pg {
            pg.close().await;
        }
        if let Some(admin) = &self.admin {
            sqlx::query(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
                .execute(admin)
                .await
                .map_err(|e| format!("cannot drop the bench schema: {e}"))?;
            admin.close().await;
        }
        Ok(())
    }
}

/// Adds one run of the peers to `systems` (matched by name).
fn merge(systems: &mut Vec<System>, new: Vec<System>) {
    for n in new {
        match systems.iter_mut().find(|s| s.name == n.name) {
            None => systems.push(n),
            Some(s) => {
                s.runs.enqueue.extend(n.runs.enqueue);
                s.runs.duplicate.extend(n.runs.duplicate);
                s.runs.claim_complete.extend(n.runs.claim_complete);
                s.runs.producers_1.extend(n.runs.producers_1);
                s.runs.producers_n.extend(n.runs.producers_n);
                s.runs.bulk.extend(n.runs.bulk);
                s.runs.drain.extend(n.runs.drain);
                s.runs.latency.extend(n.runs.latency);
                if s.runs.duplicate_returns.is_empty() {
                    s.runs.duplicate_returns = n.runs.duplicate_returns;
                }
                if s.settings.is_empty() {
                    s.settings = n.settings;
                }
                if s.failed.is_none() && s.runs.is_empty() {
                    s.failed = n.failed;
                } else if n.failed.is_none() {
                    s.failed = None;
                }
            }
        }
    }
}

fn cairn_settings(backend: Backend, args: &SpoolArgs) -> String {
    let engine = match backend {
        Backend::Sqlite => "cairn (SQLite WAL, synchronous=FULL, group commit)",
        Backend::Postgres => {
            "cairn (Postgres synchronous_commit=on, 10 pooled connections, batched enqueues \
             and acks)"
        }
    };
    format!(
        "{engine}; row 3: Consumer concurrency {w}, prefetch {p} (a claim takes up to {b} runs: \
         the free slots and room in the prefetch), claim coalescing 2 ms (the default), a slot \
         takes its next run while the previous ack is on its way",
        w = args.workers,
        p = args.prefetch,
        b = args.workers + args.prefetch
    )
}

/// One run of cairn's rows 1–4, each on a fresh store, added to `runs`.
async fn measure_cairn(
    backend: Backend,
    pg_url: Option<&str>,
    args: &SpoolArgs,
    runs: &mut Runs,
) -> Result<(), String> {
    let q = queue();
    if args.row(1) || args.row(2) {
        // Rows 1 and 2 on one store.
        let fresh = Fresh::open(backend, pg_url).await?;
        let t = Instant::now();
        let cpu = CpuMeter::start();
        let mut ids = Vec::new();
        for i in 0..args.enqueue {
            let e = fresh
                .spool
                .enqueue(&q, &key(i), b"{}".to_vec(), EnqueueOptions::default())
                .await
                .map_err(store_err)?;
            ids.push(e.run_id);
        }
        runs.enqueue.push(rate(args.enqueue, t.elapsed()));
        runs.cpu[0].push(cpu.stop(args.enqueue));
        runs.producers_1.push(*runs.enqueue.last().unwrap_or(&0.0));
        let t = Instant::now();
        let cpu = CpuMeter::start();
        let mut same = 0;
        for i in 0..args.duplicates {
            let e = fresh
                .spool
                .enqueue(&q, &key(i), b"{}".to_vec(), EnqueueOptions::default())
                .await
                .map_err(store_err)?;
            if !e.created && ids.get(i as usize) == Some(&e.run_id) {
                same += 1;
            }
        }
        runs.duplicate.push(rate(args.duplicates, t.elapsed()));
        runs.cpu[1].push(cpu.stop(args.duplicates));
        runs.duplicate_returns = if same == args.duplicates {
            "the existing id (`created: false`)".into()
        } else {
            format!("the existing id for {same} of {} keys", args.duplicates)
        };
        fresh.close().await?;
    }
    if args.row(4) {
        // Row 4: producers.
        let fresh = Fresh::open(backend, pg_url).await?;
        let per = args.enqueue / args.producers;
        let t = Instant::now();
        let cpu = CpuMeter::start();
        let mut tasks = Vec::new();
        for p in 0..args.producers {
            let spool = fresh.spool.clone();
            let q = q.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..per {
                    spool
                        .enqueue(
                            &q,
                            &key(p * per + i),
                            b"{}".to_vec(),
                            EnqueueOptions::default(),
                        )
                        .await?;
                }
                Ok::<_, cairn::Error>(())
            }));
        }
        for task in tasks {
            task.await.map_err(|e| e.to_string())?.map_err(store_err)?;
        }
        runs.producers_n
            .push(rate(per * args.producers, t.elapsed()));
        runs.cpu[3].push(cpu.stop(per * args.producers));
        fresh.close().await?;
    }
    if args.row(3) {
        // Row 3: claim + complete.
        let fresh = Fresh::open(backend, pg_url).await?;
        seed(&fresh.spool, &q, args.claims).await?;
        let handled = Arc::new(AtomicU64::new(0));
        let t = Instant::now();
        let cpu = CpuMeter::start();
        let counter = handled.clone();
        let consumer = ConsumerBuilder::new(
            fresh.spool.clone(),
            q.clone(),
            ConsumerId::new("bench-consumer").map_err(store_err)?,
        )
        .concurrency(args.workers as usize)
        .prefetch(usize::try_from(args.prefetch).map_err(|e| e.to_string())?)
        .spawn(move |_job: Job| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::Relaxed);
                Outcome::Done
            }
        })
        .await
        .map_err(store_err)?;
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let settled = consumer
                .stats()
                .settled
                .get(&RunState::Succeeded)
                .copied()
                .unwrap_or(0);
            if settled >= args.claims {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "claim + complete did not finish in 600 s ({settled} of {} settled)",
                    args.claims
                ));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        runs.claim_complete.push(rate(args.claims, t.elapsed()));
        runs.cpu[2].push(cpu.stop(args.claims));
        let report = consumer.shutdown().await;
        if !report.is_clean() || report.stats.errors > 0 {
            return Err(format!(
                "the bench consumer did not finish cleanly: {report:?}"
            ));
        }
        fresh.close().await?;
    }
    Ok(())
}

/// Enqueues `n` runs with 8 concurrent producers (not measured).
async fn seed(spool: &Arc<dyn Spool>, q: &QueueName, n: u64) -> Result<(), String> {
    let mut tasks = Vec::new();
    for p in 0..8 {
        let spool = spool.clone();
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = p;
            while i < n {
                spool
                    .enqueue(&q, &key(i), b"{}".to_vec(), EnqueueOptions::default())
                    .await?;
                i += 8;
            }
            Ok::<_, cairn::Error>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())?.map_err(store_err)?;
    }
    Ok(())
}

/// Row 5's result: p50 and p99, or why it was not measured.
type Wake = Result<(Duration, Duration, usize), String>;

/// Row 5: enqueue here, a consumer in another OS process (this binary, `bench
/// wake-consumer`) waits on `subscribe()` and reports the wall-clock time it held the run.
async fn wake_latency(backend: Backend, pg_url: Option<&str>, samples: u64) -> Wake {
    eprintln!("cairn {}: wake latency, {samples} samples…", backend.name());
    let fresh = Fresh::open(backend, pg_url).await?;
    let mut child = ConsumerChild::spawn("wake-consumer", "the wake consumer", backend, &fresh)?;
    let result = async {
        child.ready().await?;
        let q = queue();
        let mut lat = Vec::new();
        for i in 0..samples {
            let start = now_micros();
            fresh
                .spool
                .enqueue(
                    &q,
                    &key(i),
                    i.to_string().into_bytes(),
                    EnqueueOptions::default(),
                )
                .await
                .map_err(store_err)?;
            let line = child.next().await?;
            let (got, at) = line
                .strip_prefix("claimed ")
                .and_then(|l| l.split_once(' '))
                .ok_or_else(|| format!("unexpected line from the wake consumer: {line}"))?;
            if got != i.to_string() {
                return Err(format!("the wake consumer claimed {got}, expected {i}"));
            }
            let at: u64 = at.parse().map_err(|e| format!("bad time {at}: {e}"))?;
            lat.push(Duration::from_micros(at.saturating_sub(start)));
        }
        lat.sort();
        let pick = |q: f64| lat[((lat.len() as f64 * q).ceil() as usize).clamp(1, lat.len()) - 1];
        Ok((pick(0.50), pick(0.99), lat.len()))
    }
    .await;
    drop(child);
    fresh.close().await?;
    result
}

/// A consumer in another OS process: this binary started as `bench <subcommand>` against
/// `fresh`'s store, read line by line from its stdout. Killed and reaped when dropped.
struct ConsumerChild {
    child: std::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// What the messages call it ("the wake consumer").
    name: &'static str,
}

impl ConsumerChild {
    fn spawn(
        subcommand: &str,
        name: &'static str,
        backend: Backend,
        fresh: &Fresh,
    ) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let mut child = Command::new(exe)
            .args([
                "bench",
                subcommand,
                "--backend",
                backend.name(),
                "--target",
                &fresh.target,
                "--schema",
                if fresh.schema.is_empty() {
                    "public"
                } else {
                    &fresh.schema
                },
                "--queue",
                queue().as_str(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no stdout from {name}"));
        };
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel::<String>();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self { child, lines, name })
    }

    /// Waits for the child's `ready` line.
    async fn ready(&mut self) -> Result<(), String> {
        if self.next().await? == "ready" {
            Ok(())
        } else {
            Err(format!("{} did not start", self.name))
        }
    }

    /// The child's next line, waited for at most 30 s.
    async fn next(&mut self) -> Result<String, String> {
        let name = self.name;
        tokio::time::timeout(Duration::from_secs(30), self.lines.recv())
            .await
            .map_err(|_| format!("{name} did not answer within 30 s"))?
            .ok_or_else(|| format!("{name} exited"))
    }
}

impl Drop for ConsumerChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The other process of row 5: waits on `subscribe()`, claims, prints
/// `claimed <payload> <unix µs>` the moment it holds a run, acks, and waits again.
pub(crate) async fn wake_consumer(args: WakeConsumerArgs) -> Result<(), String> {
    let spool = open_spool(args.backend, &args.target, &args.schema).await?;
    let q = QueueName::new(args.queue).map_err(store_err)?;
    let me = ConsumerId::new(format!("wake-consumer-{}", std::process::id())).map_err(store_err)?;
    let mut wake = spool.subscribe(&q).await.map_err(store_err)?;
    println!("ready");
    loop {
        loop {
            let claimed = spool
                .claim(&q, &me, Duration::from_secs(30), 1)
                .await
                .map_err(store_err)?;
            let Some(run) = claimed.into_iter().next() else {
                break;
            };
            let at = now_micros();
            println!("claimed {} {at}", String::from_utf8_lossy(&run.payload));
            spool.ack(run.run_id, run.token).await.map_err(store_err)?;
        }
        wake.wait().await.map_err(store_err)?;
    }
}

/// The spool another process of the bench opened (`Fresh::target`, `Fresh::schema`).
async fn open_spool(
    backend: Backend,
    target: &str,
    schema: &str,
) -> Result<Arc<dyn Spool>, String> {
    Ok(match backend {
        Backend::Sqlite => Arc::new(
            SqliteSpool::open(target, SqliteOptions::default(), Arc::new(SystemClock))
                .await
                .map_err(store_err)?,
        ),
        Backend::Postgres => {
            let store = PgStore::open_with(PgOptions::new(target.to_owned()).schema(schema))
                .await
                .map_err(store_err)?;
            Arc::new(
                PgSpool::from_store(&store, Arc::new(SystemClock), SpoolConfig::default())
                    .map_err(store_err)?,
            )
        }
    })
}

/// Builds the peers project in release (its own target directory) and returns its binary.
fn build_peers() -> Result<PathBuf, String> {
    let dir = workspace_root().join("bench").join("peers");
    let target = dir.join("target");
    eprintln!("building the peers (bench/peers, release)…");
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--locked", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run cargo for the peers: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(15).collect();
        return Err(format!(
            "the peers project did not build: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    Ok(target.join("release").join("cairn-bench-peers"))
}

/// Runs the peers on `backend`; a peer that cannot run is reported with its reason.
fn run_peers(
    bin: &Result<PathBuf, String>,
    backend: Backend,
    pg_url: Option<&str>,
    args: &SpoolArgs,
) -> Vec<System> {
    let failed = |why: String| {
        PEERS
            .iter()
            .filter(|n| drain::peers_of(backend).contains(n))
            .map(|n| System {
                name: (*n).into(),
                settings: String::new(),
                runs: Runs::default(),
                failed: Some(why.clone()),
            })
            .collect()
    };
    let bin = match bin {
        Ok(bin) => bin,
        Err(e) => return failed(e.clone()),
    };
    let mut cmd = Command::new(bin);
    cmd.args(["--backend", backend.name()])
        .args(["--runs", "1"])
        .args(["--enqueue", &args.enqueue.to_string()])
        .args(["--duplicates", &args.duplicates.to_string()])
        .args(["--claims", &args.claims.to_string()])
        .args(["--workers", &args.workers.to_string()])
        .args(["--producers", &args.producers.to_string()])
        .args(["--bulk", &args.bulk.to_string()])
        .args(["--bulk-batch", &args.bulk_batch.to_string()])
        .args(drain_flags(args));
    let rows: Vec<String> = [1, 2, 3, 4, 6, 8, 9]
        .into_iter()
        .filter(|&n| args.row(n) || (n == 8 && args.drains()))
        .map(|n: u32| n.to_string())
        .collect();
    cmd.args(["--rows", &rows.join(",")]);
    if let Some(url) = pg_url {
        cmd.args(["--url", url]);
    }
    let out = match cmd.stderr(Stdio::inherit()).output() {
        Ok(out) => out,
        Err(e) => return failed(format!("cannot run the peers: {e}")),
    };
    if !out.status.success() {
        return failed(format!("the peers exited with {}", out.status));
    }
    let doc: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(doc) => doc,
        Err(e) => return failed(format!("the peers printed no JSON: {e}")),
    };
    parse_systems(&doc)
}

/// The flags of rows 8 and 9, the same for every peer.
fn drain_flags(args: &SpoolArgs) -> Vec<String> {
    let concurrency: Vec<String> = args.drain_concurrency.iter().map(u64::to_string).collect();
    vec![
        "--drain".into(),
        args.drain.to_string(),
        "--drain-concurrency".into(),
        concurrency.join(","),
        "--latency-rate".into(),
        args.latency_rate.to_string(),
        "--latency-samples".into(),
        args.latency_samples.to_string(),
    ]
}

/// The Rust peers of `bench/peers`, in the order of the tables.
const PEERS: [&str; 3] = ["riverqueue", "apalis", "graphile_worker"];

/// The systems of one JSON document the peers printed (`bench/peers` or the graphile script).
fn parse_systems(doc: &serde_json::Value) -> Vec<System> {
    let systems = doc["systems"].as_array().cloned().unwrap_or_default();
    systems
        .iter()
        .map(|s| {
            let nums = |field: &str| -> Vec<f64> {
                s["runs"]
                    .as_array()
                    .map(|rs| rs.iter().filter_map(|r| r[field].as_f64()).collect())
                    .unwrap_or_default()
            };
            let errors: Vec<String> = s["errors"]
                .as_array()
                .map(|es| {
                    es.iter()
                        .filter_map(|e| e.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let runs = Runs {
                enqueue: nums("enqueue"),
                duplicate: nums("duplicate"),
                duplicate_returns: s["runs"][0]["duplicate_returns"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                claim_complete: nums("claim_complete"),
                producers_1: nums("producers_1"),
                producers_n: nums("producers_n"),
                bulk: nums("bulk_enqueue"),
                drain: s["runs"]
                    .as_array()
                    .map(|rs| rs.iter().flat_map(drain::parse_drains).collect())
                    .unwrap_or_default(),
                latency: s["runs"]
                    .as_array()
                    .map(|rs| rs.iter().filter_map(drain::parse_latency).collect())
                    .unwrap_or_default(),
                cpu: Default::default(),
            };
            let failed = if runs.is_empty() {
                Some(
                    errors
                        .first()
                        .cloned()
                        .unwrap_or_else(|| "no run finished".into()),
                )
            } else {
                None
            };
            let mut settings = s["settings"].as_str().unwrap_or("").to_owned();
            if !errors.is_empty() && failed.is_none() {
                settings.push_str(&format!(" ({} run(s) failed: {})", errors.len(), errors[0]));
            }
            System {
                name: s["name"].as_str().unwrap_or("?").to_owned(),
                settings,
                runs,
                failed,
            }
        })
        .collect()
}

fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

fn fmt_rate(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".into(), |x| thousands(x.round() as u64))
}

/// The rows of the table: name, accessor.
type Row = (&'static str, fn(&Runs) -> &Vec<f64>);

fn rows() -> [Row; 4] {
    [
        ("1. enqueue, one at a time", |r| &r.enqueue),
        ("2. duplicate enqueue", |r| &r.duplicate),
        ("3. claim + complete, 10 workers", |r| &r.claim_complete),
        ("4. enqueue, 8 producers", |r| &r.producers_n),
    ]
}

fn print_table(backend: Backend, args: &SpoolArgs, systems: &[System], wake: &Wake, fsync: f64) {
    let cairn = &systems[0];
    let all = systems;
    let mut systems: Vec<&System> = vec![cairn];
    systems.extend(
        drain::peers_of(backend)
            .iter()
            .filter_map(|n| all.iter().find(|s| s.name == *n)),
    );
    let peers = &systems[1..];
    println!(
        "\n### {} — ops/s, median of {} runs\n",
        backend.name(),
        args.runs
    );
    let mut header = "| row | cairn |".to_owned();
    let mut rule = "|---|---:|".to_owned();
    for p in peers {
        header.push_str(&format!(" {} |", drain::display(&p.name)));
        rule.push_str("---:|");
    }
    header.push_str(" cairn ÷ best peer |");
    rule.push_str("---:|");
    println!("{header}\n{rule}");
    for (name, get) in rows() {
        let c = median(get(&cairn.runs));
        let mut line = format!("| {name} | {} |", fmt_rate(c));
        let mut best: Option<f64> = None;
        for p in peers {
            let m = median(get(&p.runs));
            line.push_str(&format!(" {} |", fmt_rate(m)));
            if let Some(m) = m {
                best = Some(best.map_or(m, |b: f64| b.max(m)));
            }
        }
        let ratio = match (c, best) {
            (Some(c), Some(b)) => format!("{:.2}×", c / b),
            _ => "n/a".into(),
        };
        println!("{line} {ratio} |");
    }
    let scaling = |r: &Runs| match (median(&r.producers_n), median(&r.producers_1)) {
        (Some(n), Some(one)) => format!("{:.2}×", n / one),
        _ => "n/a".into(),
    };
    let mut line = format!(
        "| 4. {} producers ÷ 1 producer | {} |",
        args.producers,
        scaling(&cairn.runs)
    );
    for p in peers {
        line.push_str(&format!(" {} |", scaling(&p.runs)));
    }
    println!("{line} |");
    let wake_cell = match wake {
        Ok((p50, p99, n)) => format!(
            "p50 {:.1} ms, p99 {:.1} ms ({n} samples)",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        ),
        Err(e) => format!("not measured: {e}"),
    };
    let mut line = format!("| 5. cross-process wake latency | {wake_cell} |");
    for _ in peers {
        line.push_str(" not measured |");
    }
    println!("{line} |");
    println!(
        "\nRaw durable single-row commit rate of this engine in the same run (the fsync bound): {} commits/s",
        thousands(fsync.round() as u64)
    );
    println!(
        "\nCPU while cairn's rows ran (medians; busy = the whole machine, engine server included):"
    );
    let names = rows();
    for (i, cpu) in cairn.runs.cpu.iter().take(4).enumerate() {
        if let Some(c) = CpuUse::median(cpu) {
            let name = if i == 3 {
                format!("4. enqueue, {} producers", args.producers)
            } else {
                names[i].0.to_string()
            };
            let writes = match backend {
                Backend::Sqlite => format!(" · {}", c.describe_writes()),
                Backend::Postgres => String::new(),
            };
            println!("- {name}: {}{writes}", c.describe("cairn"));
        }
    }
    println!("\nDuplicate enqueue returns:");
    for s in &systems {
        if s.failed.is_none() && !s.runs.duplicate.is_empty() {
            println!(
                "- {}: {}",
                drain::display(&s.name),
                s.runs.duplicate_returns
            );
        }
    }
    println!("\nSettings:");
    for s in &systems {
        match &s.failed {
            None => println!("- {}: {}", drain::display(&s.name), s.settings),
            Some(why) => println!("- {}: NOT MEASURED — {why}", drain::display(&s.name)),
        }
    }
}

fn chart_rows(backend: Backend, systems: &[System]) -> Vec<(String, Vec<Bar>)> {
    rows()
        .iter()
        .map(|(name, get)| {
            let bars = systems
                .iter()
                .filter_map(|s| {
                    median(get(&s.runs)).map(|v| Bar {
                        label: s.name.clone(),
                        value: v,
                    })
                })
                .collect();
            (format!("{}: {name}", backend.name()), bars)
        })
        .collect()
}

//! `cargo xtask bench heads`: head lookup by anti-join vs by cache, and append latency on a long
//! history vs a fresh space, measured side by side in one run on a freshly seeded store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::testkit::{postgres as cairn_postgres, sqlite as cairn_sqlite};
use cairn::{EpochStore, Error, Event, SpaceId};
use indicatif::{ProgressBar, ProgressStyle};

use super::figures::{fmt_duration, fmt_ratio, median, met, printable_command, ratio, thousands};
use super::setup::{cpu_model, random_tag, sqlite_path, store_err, Backend};

/// Spaces seeded next to the big one, each with `epochs / OTHER_SPACES` epochs.
const OTHER_SPACES: u64 = 20;

/// Appends per space made before measuring, so that connection set-up, statement caches and
/// the empty space's creation are not measured.
const WARMUP_APPENDS: usize = 3;

/// The published targets, stated at 1,000,000 epochs.
const TARGET_EPOCHS: u64 = 1_000_000;

const SQLITE_LOOKUP_TARGET: f64 = 100_000.0;

const POSTGRES_LOOKUP_TARGET: f64 = 10_000.0;

const APPEND_RATIO_TARGET: f64 = 1.1;

/// Options of `bench heads`.
#[derive(clap::Args)]
pub(crate) struct HeadsArgs {
    /// Backend to measure.
    #[arg(long, value_enum)]
    backend: Backend,
    /// Epochs in the big space's chain; 20 more spaces get epochs/20 each.
    #[arg(long, default_value_t = TARGET_EPOCHS, value_parser = clap::value_parser!(u64).range(1..))]
    epochs: u64,
    /// Runs of each head lookup (the median is reported).
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// Appends measured on each of the two spaces (the median is reported).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    appends: u64,
    /// SQLite: the store file (default: a temporary file). Postgres: the server (default: the
    /// test server, found like the test suite finds it); a fresh schema is created and dropped.
    #[arg(long, value_name = "URL")]
    database: Option<String>,
}

/// A head lookup strategy, as both backends' testkits name them.
#[derive(Clone, Copy)]
enum Lookup {
    AntiJoinPlain,
    AntiJoinIndexed,
    Cache,
}

/// The store under test, with what it takes to clean up after it.
enum Subject {
    Sqlite {
        store: cairn_sqlite::SqliteStore,
        /// Keeps the temporary store alive until the end of the run.
        _dir: Option<tempfile::TempDir>,
    },
    Postgres {
        store: cairn_postgres::PgStore,
        admin: sqlx::PgPool,
        schema: String,
    },
}

impl Subject {
    async fn open(backend: Backend, database: Option<&str>, tag: &str) -> Result<Self, String> {
        match backend {
            Backend::Sqlite => {
                let (path, dir) = match database {
                    Some(url) => (sqlite_path(url)?, None),
                    None => {
                        let dir = tempfile::Builder::new()
                            .prefix("cairn-bench-")
                            .tempdir()
                            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
                        (dir.path().join("bench.db"), Some(dir))
                    }
                };
                let store = cairn_sqlite::SqliteStore::open(&path)
                    .await
                    .map_err(store_err)?;
                Ok(Self::Sqlite { store, _dir: dir })
            }
            Backend::Postgres => {
                let url = match database {
                    Some(url) => url.to_owned(),
                    None => cairn_postgres::testkit::test_server_url().await?,
                };
                let admin = sqlx::PgPool::connect(&url)
                    .await
                    .map_err(|e| format!("cannot connect to Postgres: {e}"))?;
                let schema = format!("cairn_bench_{tag}");
                eprintln!("bench schema: {schema} (dropped at the end of the run)");
                let opts = cairn_postgres::PgOptions::new(url).schema(schema.clone());
                let store = cairn_postgres::PgStore::open_with(opts)
                    .await
                    .map_err(store_err)?;
                Ok(Self::Postgres {
                    store,
                    admin,
                    schema,
                })
            }
        }
    }

    fn store(&self) -> Arc<dyn EpochStore> {
        match self {
            Self::Sqlite { store, .. } => Arc::new(store.clone()),
            Self::Postgres { store, .. } => Arc::new(store.clone()),
        }
    }

    async fn seed_chain(
        &self,
        space: &SpaceId,
        epochs: u64,
        progress: Arc<dyn Fn(u64) + Send + Sync>,
    ) -> Result<(), String> {
        match self {
            Self::Sqlite { store, .. } => store.bench_seed_chain(space, epochs, progress).await,
            Self::Postgres { store, .. } => store.bench_seed_chain(space, epochs, progress).await,
        }
        .map_err(store_err)
    }

    /// The lookup's run times, or `Err` with the backend's reason when it cannot be measured.
    async fn time_lookup(
        &self,
        space: &SpaceId,
        lookup: Lookup,
        runs: usize,
    ) -> Result<Result<Vec<Duration>, String>, String> {
        self.time_lookup_on(space, lookup, runs, false).await
    }

    /// As [`Subject::time_lookup`]; `server` asks Postgres for its own planning + execution
    /// time (`EXPLAIN (ANALYZE)`) instead of timing the round trip.
    async fn time_lookup_on(
        &self,
        space: &SpaceId,
        lookup: Lookup,
        runs: usize,
        server: bool,
    ) -> Result<Result<Vec<Duration>, String>, String> {
        use cairn_postgres::testkit::HeadLookup as Pg;
        use cairn_sqlite::testkit::HeadLookup as Lite;
        let timed = match self {
            Self::Sqlite { store, .. } => {
                let lookup = match lookup {
                    Lookup::AntiJoinPlain => Lite::AntiJoinPlain,
                    Lookup::AntiJoinIndexed => Lite::AntiJoinIndexed,
                    Lookup::Cache => Lite::Cache,
                };
                store.bench_time_lookup(space, lookup, runs).await
            }
            Self::Postgres { store, .. } => {
                let lookup = match lookup {
                    Lookup::AntiJoinPlain => Pg::AntiJoinPlain,
                    Lookup::AntiJoinIndexed => Pg::AntiJoinIndexed,
                    Lookup::Cache => Pg::Cache,
                };
                let clock = if server {
                    cairn_postgres::testkit::LookupClock::Server
                } else {
                    cairn_postgres::testkit::LookupClock::RoundTrip
                };
                store.bench_time_lookup_on(space, lookup, runs, clock).await
            }
        };
        match timed {
            Ok(times) if !times.is_empty() => Ok(Ok(times)),
            Ok(_) => Err("the backend returned no timings".into()),
            Err(Error::InvalidInput { reason, .. }) => Ok(Err(reason)),
            Err(e) => Err(store_err(e)),
        }
    }

    /// Brings a freshly bulk-loaded store to the state a live one is in (Postgres: `VACUUM
    /// (ANALYZE)`, which autovacuum would run; SQLite needs nothing).
    async fn settle(&self) -> Result<(), String> {
        match self {
            Self::Sqlite { .. } => Ok(()),
            Self::Postgres { store, .. } => store.bench_vacuum_analyze().await.map_err(store_err),
        }
    }

    async fn engine_version(&self) -> String {
        match self {
            Self::Sqlite { .. } => format!("SQLite {}", rusqlite::version()),
            Self::Postgres { admin, .. } => {
                match sqlx::query_scalar::<_, String>("SHOW server_version")
                    .fetch_one(admin)
                    .await
                {
                    Ok(v) => format!("PostgreSQL {v}"),
                    Err(_) => "PostgreSQL (version unknown)".into(),
                }
            }
        }
    }

    /// Drops the Postgres bench schema; the SQLite temporary directory goes with `self`.
    async fn cleanup(self) -> Result<(), String> {
        if let Self::Postgres {
            store,
            admin,
            schema,
        } = self
        {
            drop(store);
            // The name is generated here from hex digits, never taken from input.
            let drop_schema = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
            sqlx::query(&drop_schema)
                .execute(&admin)
                .await
                .map_err(|e| format!("cannot drop the bench schema {schema}: {e}"))?;
            admin.close().await;
        }
        Ok(())
    }
}

pub(super) async fn run(args: HeadsArgs) -> Result<(), String> {
    let tag = random_tag();
    let subject = Subject::open(args.backend, args.database.as_deref(), &tag).await?;
    let outcome = measure(&subject, &args, &tag).await;
    let engine = subject.engine_version().await;
    let cleaned = subject.cleanup().await;
    let report = outcome?;
    cleaned?;
    print_report(&args, &engine, &report);
    Ok(())
}

/// Postgres lookups timed by the server (planning + execution), as the published comparison was.
struct ServerTimes {
    plain: Duration,
    indexed: Duration,
    cache: Duration,
}

struct Report {
    /// Postgres only: the same lookups timed by the server.
    server: Option<ServerTimes>,
    seeded_in: Duration,
    per_other_space: u64,
    /// Medians, or the backend's reason for not measuring.
    plain: Result<Duration, String>,
    indexed: Result<Duration, String>,
    cache: Duration,
    append_big: Duration,
    append_empty: Duration,
    /// Median over the rounds of (big / empty) within each round.
    append_paired_ratio: f64,
}

async fn measure(subject: &Subject, args: &HeadsArgs, tag: &str) -> Result<Report, String> {
    let space = |name: String| SpaceId::new(name).map_err(store_err);
    let big = space(format!("bench-big-{tag}"))?;
    let empty = space(format!("bench-empty-{tag}"))?;
    let per_other_space = args.epochs / OTHER_SPACES;
    let total = args.epochs + per_other_space * OTHER_SPACES;

    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "seeding {bar:40} {human_pos}/{human_len} epochs ({per_sec}, eta {eta}) {msg}",
        )
        .map_err(|e| format!("progress template: {e}"))?,
    );
    let started = Instant::now();
    let mut base = 0;
    let mut seeds = vec![(big.clone(), args.epochs)];
    if per_other_space > 0 {
        for i in 0..OTHER_SPACES {
            seeds.push((space(format!("bench-other-{i:02}-{tag}"))?, per_other_space));
        }
    }
    for (space, epochs) in &seeds {
        bar.set_message(space.to_string());
        let (b, offset) = (bar.clone(), base);
        let progress: Arc<dyn Fn(u64) + Send + Sync> =
            Arc::new(move |done| b.set_position(offset + done));
        subject.seed_chain(space, *epochs, progress).await?;
        base += epochs;
        bar.set_position(base);
    }
    bar.finish_and_clear();
    let seeded_in = started.elapsed();

    let store = subject.store();
    expect_single_head(&*store, &big, args.epochs).await?;
    subject.settle().await?;

    let runs = usize::try_from(args.runs).map_err(|e| e.to_string())?;
    eprintln!("measuring head lookups ({runs} runs each)…");
    let cache = subject
        .time_lookup(&big, Lookup::Cache, runs)
        .await?
        .map(|t| median(&t))
        .map_err(|reason| format!("the cache lookup cannot be measured: {reason}"))?;
    let indexed = subject
        .time_lookup(&big, Lookup::AntiJoinIndexed, runs)
        .await?
        .map(|t| median(&t));
    let plain = match args.backend {
        Backend::Postgres => subject
            .time_lookup(&big, Lookup::AntiJoinPlain, runs)
            .await?
            .map(|t| median(&t)),
        // Without the index SQLite probes `epoch_parent` by a scan for every epoch, so this
        // lookup grows with the square of the history: hours at 1,000,000 epochs.
        Backend::Sqlite => Err("measured on Postgres only; on SQLite, without the \
            `(space, parent, child)` index the anti-join scans `epoch_parent` once per epoch \
            (quadratic), which takes hours at 1,000,000 epochs"
            .into()),
    };

    eprintln!(
        "measuring appends ({} per space, interleaved)…",
        args.appends
    );
    let (append_big, append_empty, append_paired_ratio) =
        append_latency(&*store, &big, &empty, args.appends).await?;
    let extra = u64::try_from(WARMUP_APPENDS).map_err(|e| e.to_string())? + args.appends;
    expect_single_head(&*store, &big, args.epochs + extra).await?;
    expect_single_head(&*store, &empty, extra).await?;

    let server = match args.backend {
        Backend::Sqlite => None,
        Backend::Postgres => {
            eprintln!("measuring head lookups on the server (EXPLAIN ANALYZE, {runs} runs each)…");
            let mut medians = Vec::new();
            for lookup in [
                Lookup::AntiJoinPlain,
                Lookup::AntiJoinIndexed,
                Lookup::Cache,
            ] {
                let times = subject.time_lookup_on(&big, lookup, runs, true).await??;
                medians.push(median(&times));
            }
            Some(ServerTimes {
                plain: medians[0],
                indexed: medians[1],
                cache: medians[2],
            })
        }
    };

    Ok(Report {
        seeded_in,
        per_other_space,
        plain,
        indexed,
        cache,
        server,
        append_big,
        append_empty,
        append_paired_ratio,
    })
}

/// Median append latency on `big` and on `empty`, and the median of the per-round ratios. The
/// two spaces alternate, and the order within each pair flips every round, so drift (caches
/// warming, checkpoints, other load) hits both sides alike; the per-round ratio cancels it
/// further on a machine shared with other work.
async fn append_latency(
    store: &dyn EpochStore,
    big: &SpaceId,
    empty: &SpaceId,
    appends: u64,
) -> Result<(Duration, Duration, f64), String> {
    let timed_append = |space: &SpaceId, n: u64| {
        let space = space.clone();
        async move {
            let event = Event::new("bench.append", n.to_be_bytes().to_vec());
            let started = Instant::now();
            store.append(&space, vec![event]).await.map_err(store_err)?;
            Ok::<_, String>(started.elapsed())
        }
    };
    for n in 0..WARMUP_APPENDS as u64 {
        timed_append(big, n).await?;
        timed_append(empty, n).await?;
    }
    let mut on_big = Vec::new();
    let mut on_empty = Vec::new();
    let mut paired = Vec::new();
    for n in 0..appends {
        let (b, e) = if n % 2 == 0 {
            let b = timed_append(big, n).await?;
            (b, timed_append(empty, n).await?)
        } else {
            let e = timed_append(empty, n).await?;
            (timed_append(big, n).await?, e)
        };
        on_big.push(b);
        on_empty.push(e);
        paired.push(ratio(b, e));
    }
    paired.sort_by(f64::total_cmp);
    let paired_median = paired[paired.len() / 2];
    Ok((median(&on_big), median(&on_empty), paired_median))
}

/// Checks the seeding and the appends left the space one head at the expected seq.
async fn expect_single_head(
    store: &dyn EpochStore,
    space: &SpaceId,
    seq: u64,
) -> Result<(), String> {
    let heads = store.heads(space).await.map_err(store_err)?;
    match heads.as_slice() {
        [head] if head.seq.0 == seq => Ok(()),
        _ => Err(format!(
            "space {space} should have one head at seq {seq}, found {heads:?}"
        )),
    }
}

fn print_report(args: &HeadsArgs, engine: &str, r: &Report) {
    let backend = args.backend.name();
    let command = printable_command(std::env::args().skip(1));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = cpu_model().map(|m| format!(" ({m})")).unwrap_or_default();
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    };
    let epochs = thousands(args.epochs);

    println!("### Head lookup and append latency: {backend}, {epochs} epochs");
    println!();
    println!("Command: `{command}`");
    println!();
    println!(
        "Machine: {cores} cores{cpu}, {} {}, {engine}, xtask built with the {profile} profile. \
         Seeded one space with a chain of {epochs} epochs plus {OTHER_SPACES} spaces × {} epochs in {}.",
        std::env::consts::OS,
        std::env::consts::ARCH,
        thousands(r.per_other_space),
        fmt_duration(r.seeded_in),
    );
    println!();

    // SQLite's target is against the anti-join the store itself falls back to (indexed);
    // Postgres's against the plain anti-join of the published comparison.
    let (target_base, target, which) = match args.backend {
        Backend::Sqlite => (&r.indexed, SQLITE_LOOKUP_TARGET, "the store's anti-join"),
        Backend::Postgres => (&r.plain, POSTGRES_LOOKUP_TARGET, "plain anti-join"),
    };
    let target_base = target_base.as_ref().ok().copied();
    let verdict = target_base.map_or_else(
        || "not measured".to_owned(),
        |base| met(ratio(base, r.cache) >= target),
    );
    let at = if args.epochs == TARGET_EPOCHS {
        String::new()
    } else {
        format!(" (target stated at {})", thousands(TARGET_EPOCHS))
    };
    println!(
        "| {backend}: head lookup, median of {} | anti-join, plain | anti-join, `(space, parent, child)` index | cache | cache vs plain | cache vs indexed | target: cache ≥{}× {which}{at} |",
        args.runs,
        thousands(target as u64)
    );
    println!("|---|---:|---:|---:|---:|---:|---|");
    let clock = match args.backend {
        Backend::Sqlite => "timed on the store's connection",
        Backend::Postgres => "client round trip",
    };
    println!(
        "| one space, {epochs} epochs, {clock} | {} | {} | {} | {} | {} | {verdict} |",
        fmt_lookup(&r.plain),
        fmt_lookup(&r.indexed),
        fmt_duration(r.cache),
        r.plain
            .as_ref()
            .map_or_else(|_| "n/a".into(), |p| fmt_ratio(ratio(*p, r.cache))),
        r.indexed
            .as_ref()
            .map_or_else(|_| "n/a".into(), |i| fmt_ratio(ratio(*i, r.cache))),
    );
    if let Some(sv) = &r.server {
        println!(
            "| one space, {epochs} epochs, server time (EXPLAIN ANALYZE, TIMING OFF: planning + execution) | {} | {} | {} | {} | {} | {} |",
            fmt_duration(sv.plain),
            fmt_duration(sv.indexed),
            fmt_duration(sv.cache),
            fmt_ratio(ratio(sv.plain, sv.cache)),
            fmt_ratio(ratio(sv.indexed, sv.cache)),
            met(ratio(sv.plain, sv.cache) >= target),
        );
    }
    println!();

    let append_ratio = ratio(r.append_big, r.append_empty);
    println!(
        "| {backend}: append latency, median of {} interleaved | space with {epochs} epochs | space empty at start | ratio | median per-round ratio | target: ratio ≤{APPEND_RATIO_TARGET}{at} |",
        args.appends
    );
    println!("|---|---:|---:|---:|---:|---|");
    println!(
        "| one-event epoch | {} | {} | {append_ratio:.2} | {:.2} | {} |",
        fmt_duration(r.append_big),
        fmt_duration(r.append_empty),
        r.append_paired_ratio,
        met(append_ratio <= APPEND_RATIO_TARGET),
    );
    for (name, reason) in [("plain", &r.plain), ("indexed", &r.indexed)] {
        if let Err(reason) = reason {
            println!();
            println!("The {name} anti-join was not measured: {reason}");
        }
    }
}

fn fmt_lookup(d: &Result<Duration, String>) -> String {
    d.as_ref()
        .map_or_else(|_| "n/a".into(), |d| fmt_duration(*d))
}

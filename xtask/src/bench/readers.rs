//! `cargo xtask bench readers`: N concurrent readers, each looping over `heads` and a feed
//! page, on one seeded SQLite store opened twice — with one read connection and with several —
//! in alternating rounds of equal length, so drift on a shared machine hits both alike.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::testkit::sqlite::{SqliteOptions, SqliteStore};
use cairn::{EpochStore, SpaceId};

use super::figures::{fmt_duration, printable_command, thousands};
use super::setup::{random_tag, store_err, Backend};

/// Options of `bench readers`.
#[derive(clap::Args)]
pub(crate) struct ReadersArgs {
    /// Backend to measure (only SQLite has read connections to compare).
    #[arg(long, value_enum)]
    backend: Backend,
    /// Concurrent readers.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
    readers: u64,
    /// Read connections of the pooled store (the other store has one).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..=64))]
    connections: u64,
    /// Spaces seeded, each with a chain of `epochs` one-event epochs.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1000))]
    spaces: u64,
    /// Epochs per space.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    epochs: u64,
    /// Events per feed page read.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    page: u64,
    /// Rounds; each round measures both stores, one after the other, in alternating order.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Milliseconds each store is measured per round.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(10..))]
    millis: u64,
}

/// Runs the benchmark and prints its report.
pub(crate) async fn run(args: ReadersArgs) -> Result<(), String> {
    if args.backend != Backend::Sqlite {
        return Err(
            "bench readers compares SQLite read connections; Postgres reads already \
                    spread over its connection pool, use --backend sqlite"
                .into(),
        );
    }
    let dir = tempfile::Builder::new()
        .prefix("cairn-bench-readers-")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let path = dir.path().join("bench.db");
    let tag = random_tag();
    let spaces = (0..args.spaces)
        .map(|i| SpaceId::new(format!("bench-readers-{i:03}-{tag}")).map_err(store_err))
        .collect::<Result<Vec<_>, _>>()?;

    let pooled_n = usize::try_from(args.connections).map_err(|e| e.to_string())?;
    let single = SqliteStore::open_with(&path, SqliteOptions::default().read_connections(1))
        .await
        .map_err(store_err)?;
    let pooled = SqliteStore::open_with(&path, SqliteOptions::default().read_connections(pooled_n))
        .await
        .map_err(store_err)?;
    eprintln!(
        "seeding {} spaces × {} epochs…",
        args.spaces,
        thousands(args.epochs)
    );
    for space in &spaces {
        single
            .bench_seed_chain(space, args.epochs, Arc::new(|_| {}))
            .await
            .map_err(store_err)?;
    }

    let window = Duration::from_millis(args.millis);
    let (mut reads_single, mut reads_pooled) = (0u64, 0u64);
    let mut per_round = Vec::new();
    eprintln!(
        "measuring {} rounds of {} per store, {} concurrent readers…",
        args.rounds,
        fmt_duration(window),
        args.readers
    );
    for round in 0..args.rounds {
        let measure = |store: &SqliteStore| {
            reads_in(
                Arc::new(store.clone()),
                &spaces,
                args.readers,
                args.page,
                window,
            )
        };
        let (s, p) = if round % 2 == 0 {
            let s = measure(&single).await?;
            (s, measure(&pooled).await?)
        } else {
            let p = measure(&pooled).await?;
            (measure(&single).await?, p)
        };
        reads_single += s;
        reads_pooled += p;
        per_round.push(p as f64 / (s as f64).max(1.0));
    }
    per_round.sort_by(f64::total_cmp);
    let paired = per_round[per_round.len() / 2];
    let seconds = window.as_secs_f64() * args.rounds as f64;
    let rate_single = reads_single as f64 / seconds;
    let rate_pooled = reads_pooled as f64 / seconds;

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    };
    println!("### Concurrent readers: sqlite, {} readers", args.readers);
    println!();
    println!("Command: `{}`", printable_command(std::env::args().skip(1)));
    println!();
    println!(
        "Machine: {cores} cores, {} {}, SQLite {}, xtask built with the {profile} profile. One \
         read = `heads` + a feed page of up to {} events on one of {} spaces × {} epochs; each \
         store measured {} rounds × {}, alternating.",
        std::env::consts::OS,
        std::env::consts::ARCH,
        rusqlite::version(),
        args.page,
        args.spaces,
        thousands(args.epochs),
        args.rounds,
        fmt_duration(window),
    );
    println!();
    println!(
        "| read connections | reads/s |\n|---:|---:|\n| 1 | {rate_single:.0} |\n| {} | {rate_pooled:.0} |",
        args.connections
    );
    println!();
    println!(
        "Ratio {} : 1 = {:.2}× (median per-round ratio {paired:.2}×).",
        args.connections,
        rate_pooled / rate_single.max(f64::MIN_POSITIVE)
    );
    drop((single, pooled));
    Ok(())
}

/// Reads completed by `readers` tasks looping over `heads` + a feed page for `window`.
async fn reads_in(
    store: Arc<dyn EpochStore>,
    spaces: &[SpaceId],
    readers: u64,
    page: u64,
    window: Duration,
) -> Result<u64, String> {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let limit = usize::try_from(page).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for r in 0..readers {
        let (store, done, stop) = (store.clone(), done.clone(), stop.clone());
        let spaces = spaces.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut i = usize::try_from(r).unwrap_or(0);
            while !stop.load(Ordering::Relaxed) {
                let space = &spaces[i % spaces.len()];
                store.heads(space).await.map_err(store_err)?;
                store
                    .events_since(space, None, limit)
                    .await
                    .map_err(store_err)?;
                if started.elapsed() < window {
                    done.fetch_add(1, Ordering::Relaxed);
                } else {
                    stop.store(true, Ordering::Relaxed);
                }
                i += 1;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| format!("a reader failed: {e}"))??;
    }
    Ok(done.load(Ordering::Relaxed))
}

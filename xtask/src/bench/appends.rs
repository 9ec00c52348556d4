//! `cargo xtask bench appends`: durable single-event appends per second on the epoch log, with
//! 1 writer against the engine's own raw single-row durable commit rate, and 8 concurrent
//! appenders (8 spaces, then 8 on one space) against 1 — all in one run on fresh stores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::testkit::postgres::{PgOptions, PgStore};
use cairn::testkit::sqlite::{SqliteOptions, SqliteStore};
use cairn::{EpochStore, Event, SpaceId};

use super::{printable_command, random_tag, store_err, thousands, Backend};

/// Options of `bench appends`.
#[derive(clap::Args)]
pub(crate) struct AppendsArgs {
    /// Backend to measure, or `all`.
    #[arg(long, value_enum)]
    backend: super::spool::BackendChoice,
    /// Appends per configuration (spread over the appenders).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(8..))]
    appends: u64,
    /// Concurrent appenders of the concurrent configurations.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(2..=64))]
    appenders: u64,
    /// Runs (medians are reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
}

/// Commits made before the raw rate is timed: more than one WAL checkpoint cycle (SQLite's
/// default 1,000 pages), so the timed commits overwrite a WAL file of its steady size like a
/// live store's do, instead of growing a fresh one (a growing file makes every fsync flush its
/// size too, which made the raw rate read several times too low).
const WARMUP: u64 = 1_500;

/// The engine's raw durable commit rate: single-row `INSERT`s, each its own transaction, on
/// one connection (SQLite: a separate file next to nothing else, WAL, `synchronous=FULL`;
/// Postgres: a scratch schema, `synchronous_commit=on`). This is the fsync bound every
/// one-commit-per-operation path lives under.
pub(crate) async fn raw_commit_rate(
    backend: Backend,
    pg_url: Option<&str>,
    n: u64,
) -> Result<f64, String> {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::Builder::new()
                .prefix("cairn-bench-raw-")
                .tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let path = dir.path().join("raw.db");
            tokio::task::spawn_blocking(move || {
                let conn = rusqlite::Connection::open(&path).map_err(|e| e.to_string())?;
                let mode: String = conn
                    .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
                    .map_err(|e| e.to_string())?;
                if !mode.eq_ignore_ascii_case("wal") {
                    return Err(format!("the raw-commit file is in {mode} mode, not WAL"));
                }
                conn.execute_batch(
                    "PRAGMA synchronous=FULL; \
                     CREATE TABLE raw (id INTEGER PRIMARY KEY, v BLOB NOT NULL);",
                )
                .map_err(|e| e.to_string())?;
                // Warm-up: the WAL file's first growth costs extra syncs that a live store
                // does not pay on every commit.
                for i in 0..WARMUP {
                    conn.prepare_cached("INSERT INTO raw (v) VALUES (?1)")
                        .and_then(|mut s| s.execute([i.to_le_bytes().to_vec()]))
                        .map_err(|e| e.to_string())?;
                }
                let t = Instant::now();
                for i in 0..n {
                    conn.prepare_cached("INSERT INTO raw (v) VALUES (?1)")
                        .and_then(|mut s| s.execute([i.to_le_bytes().to_vec()]))
                        .map_err(|e| e.to_string())?;
                }
                let r = n as f64 / t.elapsed().as_secs_f64();
                drop(conn);
                drop(dir);
                Ok(r)
            })
            .await
            .map_err(|e| e.to_string())?
        }
        Backend::Postgres => {
            let url = pg_url.ok_or("no Postgres server")?;
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(url)
                .await
                .map_err(|e| format!("cannot connect to Postgres: {e}"))?;
            let schema = format!("cairn_bench_raw_{}", random_tag());
            let setup = format!(
                "CREATE SCHEMA {schema}; CREATE TABLE {schema}.raw (id bigserial PRIMARY KEY, v bytea NOT NULL)"
            );
            sqlx::raw_sql(&setup)
                .execute(&pool)
                .await
                .map_err(|e| e.to_string())?;
            let insert = format!("INSERT INTO {schema}.raw (v) VALUES ($1)");
            for i in 0..WARMUP {
                sqlx::query(&insert)
                    .bind(i.to_le_bytes().to_vec())
                    .execute(&pool)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let t = Instant::now();
            for i in 0..n {
                sqlx::query(&insert)
                    .bind(i.to_le_bytes().to_vec())
                    .execute(&pool)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let r = n as f64 / t.elapsed().as_secs_f64();
            sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&pool)
                .await
                .map_err(|e| e.to_string())?;
            pool.close().await;
            Ok(r)
        }
    }
}

/// A fresh epoch store and what it takes to remove it.
enum Fresh {
    Sqlite {
        store: SqliteStore,
        /// Keeps the store's directory until the end of the measurement.
        _dir: tempfile::TempDir,
    },
    Postgres(PgStore, sqlx::PgPool, String),
}

impl Fresh {
    async fn open(backend: Backend, pg_url: Option<&str>) -> Result<Self, String> {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::Builder::new()
                    .prefix("cairn-bench-appends-")
                    .tempdir()
                    .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
                let store =
                    SqliteStore::open_with(dir.path().join("log.db"), SqliteOptions::default())
                        .await
                        .map_err(store_err)?;
                Ok(Self::Sqlite { store, _dir: dir })
            }
            Backend::Postgres => {
                let url = pg_url.ok_or("no Postgres server")?;
                let schema = format!("cairn_bench_appends_{}", random_tag());
                let admin = sqlx::PgPool::connect(url)
                    .await
                    .map_err(|e| format!("cannot connect to Postgres: {e}"))?;
                let store =
                    PgStore::connect_with(PgOptions::new(url.to_owned()).schema(schema.clone()))
                        .await
                        .map_err(store_err)?;
                Ok(Self::Postgres(store, admin, schema))
            }
        }
    }

    fn store(&self) -> Arc<dyn EpochStore> {
        match self {
            Self::Sqlite { store, .. } => Arc::new(store.clone()),
            Self::Postgres(s, _, _) => Arc::new(s.clone()),
        }
    }

    async fn close(self) -> Result<(), String> {
        if let Self::Postgres(store, admin, schema) = self {
            store.close().await;
            sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .execute(&admin)
                .await
                .map_err(|e| format!("cannot drop the bench schema: {e}"))?;
            admin.close().await;
        }
        Ok(())
    }
}

/// Appends/s of `appenders` tasks making `total` single-event appends together, on
/// `spaces` distinct spaces (appender `i` uses space `i % spaces`).
async fn appends_per_sec(
    backend: Backend,
    pg_url: Option<&str>,
    total: u64,
    appenders: u64,
    spaces: u64,
) -> Result<f64, String> {
    let fresh = Fresh::open(backend, pg_url).await?;
    let store = fresh.store();
    let tag = random_tag();
    let ids = (0..spaces)
        .map(|i| SpaceId::new(format!("bench-appends-{i:02}-{tag}")).map_err(store_err))
        .collect::<Result<Vec<_>, _>>()?;
    // Create the spaces first so the first append's slow path is not measured.
    for space in &ids {
        store
            .append(space, vec![Event::new("bench", b"warmup".to_vec())])
            .await
            .map_err(store_err)?;
    }
    let per = total / appenders;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for a in 0..appenders {
        let store = store.clone();
        let space = ids[(a % spaces) as usize].clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                store
                    .append(
                        &space,
                        vec![Event::new("bench", format!("{a}-{i}").into_bytes())],
                    )
                    .await?;
            }
            Ok::<_, cairn::Error>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())?.map_err(store_err)?;
    }
    let r = rate(per * appenders, t.elapsed());
    fresh.close().await?;
    Ok(r)
}

fn rate(ops: u64, took: Duration) -> f64 {
    ops as f64 / took.as_secs_f64().max(1e-9)
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[mid]
    } else {
        (xs[mid - 1] + xs[mid]) / 2.0
    }
}

/// Runs the benchmark and prints its report.
pub(crate) async fn run(args: AppendsArgs) -> Result<(), String> {
    let backends = args.backend.backends();
    let pg_url = if backends.contains(&Backend::Postgres) {
        Some(cairn::testkit::postgres::testkit::test_server_url().await?)
    } else {
        None
    };
    println!(
        "`{}` — {} appends per configuration, {} run(s), medians; release profile: {}",
        printable_command(std::env::args().skip(1)),
        thousands(args.appends),
        args.runs,
        !cfg!(debug_assertions)
    );
    let n = args.appenders;
    for backend in backends {
        let url = pg_url.as_deref();
        let (mut raw, mut one, mut many, mut same) = (vec![], vec![], vec![], vec![]);
        for run in 0..args.runs {
            eprintln!("{}: run {}…", backend.name(), run + 1);
            // Interleaved within each run, so drift on the shared machine hits all alike.
            raw.push(raw_commit_rate(backend, url, args.appends).await?);
            one.push(appends_per_sec(backend, url, args.appends, 1, 1).await?);
            many.push(appends_per_sec(backend, url, args.appends, n, n).await?);
            same.push(appends_per_sec(backend, url, args.appends, n, 1).await?);
        }
        let (raw, one, many, same) = (
            median(&mut raw),
            median(&mut one),
            median(&mut many),
            median(&mut same),
        );
        let fmt = |x: f64| thousands(x.round() as u64);
        let met = |ok: bool| if ok { "met" } else { "not met" };
        println!(
            "\n### {} — epoch-log appends/s, median of {} runs\n",
            backend.name(),
            args.runs
        );
        println!("| configuration | per second | ratio | target |");
        println!("|---|---:|---:|---|");
        println!(
            "| raw single-row durable commit (engine, 1 connection) | {} | — | — |",
            fmt(raw)
        );
        println!(
            "| 1 appender, 1 space | {} | {:.2}× raw | ≥0.8× raw: {} |",
            fmt(one),
            one / raw,
            met(one / raw >= 0.8)
        );
        println!(
            "| {n} appenders, {n} spaces | {} | {:.2}× 1 appender | ≥5×: {} |",
            fmt(many),
            many / one,
            met(many / one >= 5.0)
        );
        println!(
            "| {n} appenders, 1 space | {} | {:.2}× 1 appender | — |",
            fmt(same),
            same / one
        );
    }
    Ok(())
}

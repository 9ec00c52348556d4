//! `cargo xtask bench appends`: durable single-event appends per second on the epoch log, with
//! 1 writer against the engine's own raw single-row durable commit rate, and 8 concurrent
//! appenders (8 spaces, then 8 on one space) against 1 — all in one run on fresh stores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::testkit::postgres::{PgOptions, PgStore};
use cairn::testkit::sqlite::{SqliteOptions, SqliteStore};
use cairn::{EpochStore, Event, SpaceId};

use super::cpu::{CpuMeter, CpuUse};
use super::figures::{printable_command, thousands};
use super::setup::{random_tag, store_err, Backend};

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
) -> Result<(f64, CpuUse), String> {
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
                let cpu = CpuMeter::start();
                for i in 0..n {
                    conn.prepare_cached("INSERT INTO raw (v) VALUES (?1)")
                        .and_then(|mut s| s.execute([i.to_le_bytes().to_vec()]))
                        .map_err(|e| e.to_string())?;
                }
                let cpu = cpu.stop(n);
                let r = n as f64 / t.elapsed().as_secs_f64();
                drop(conn);
                drop(dir);
                Ok((r, cpu))
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
            let cpu = CpuMeter::start();
            for i in 0..n {
                sqlx::query(&insert)
                    .bind(i.to_le_bytes().to_vec())
                    .execute(&pool)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let cpu = cpu.stop(n);
            let r = n as f64 / t.elapsed().as_secs_f64();
            sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&pool)
                .await
                .map_err(|e| e.to_string())?;
            pool.close().await;
            Ok((r, cpu))
        }
    }
}

/// A 32-byte id for the floor's epochs (distinct for distinct `i`, spread like hashes).
fn floor_id(i: u64) -> Vec<u8> {
    let mut x = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    (0..4)
        .flat_map(|_| {
            // splitmix64
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)).to_le_bytes()
        })
        .collect()
}

/// The engine's floor for an append: the rows one single-event append writes on a chain
/// (an `epoch` row, its `epoch_parent` edge, its `epoch_event`, the `epoch_head` update), in
/// cairn's own schema, written directly in one transaction per append on one connection — no
/// reads, no hashing, no async hops (Postgres: the whole transaction in one simple-query round
/// trip). What is left between this and cairn's append is cairn's own work; what is left
/// between this and the raw single-row commit is what the schema's tables and indexes cost.
pub(crate) async fn floor_rate(
    backend: Backend,
    pg_url: Option<&str>,
    n: u64,
) -> Result<(f64, CpuUse), String> {
    const EPOCH: &str = "INSERT INTO epoch (space, id, seq) VALUES (?1, ?2, ?3)";
    const PARENT: &str = "INSERT INTO epoch_parent (space, parent, child) VALUES (?1, ?2, ?3)";
    const EVENT: &str =
        "INSERT INTO epoch_event (space, seq, epoch_seq, epoch, event_id, kind, key, payload) \
                         VALUES (?1, ?2, 0, ?3, ?4, 'bench', NULL, ?5)";
    const HEAD: &str = "UPDATE epoch_head SET id = ?2, seq = ?3 WHERE space = ?1";
    let space = b"bench-floor".to_vec();
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::Builder::new()
                .prefix("cairn-bench-floor-")
                .tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let path = dir.path().join("floor.db");
            // cairn creates the schema; then the file is written directly.
            drop(
                SqliteStore::open_with(&path, SqliteOptions::default())
                    .await
                    .map_err(store_err)?,
            );
            tokio::task::spawn_blocking(move || {
                let e = |e: rusqlite::Error| e.to_string();
                let conn = rusqlite::Connection::open(&path).map_err(e)?;
                conn.execute_batch(
                    "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;",
                )
                .map_err(e)?;
                conn.execute(EPOCH, rusqlite::params![space, floor_id(1), 1])
                    .map_err(e)?;
                conn.execute(
                    "INSERT INTO epoch_head (space, id, seq) VALUES (?1, ?2, 1)",
                    rusqlite::params![space, floor_id(1)],
                )
                .map_err(e)?;
                let append = |seq: u64| -> Result<(), String> {
                    let (parent, id) = (floor_id(seq - 1), floor_id(seq));
                    let seq = i64::try_from(seq).map_err(|e| e.to_string())?;
                    conn.execute_batch("BEGIN IMMEDIATE").map_err(e)?;
                    conn.prepare_cached(EPOCH)
                        .and_then(|mut st| st.execute(rusqlite::params![space, id, seq]))
                        .map_err(e)?;
                    conn.prepare_cached(PARENT)
                        .and_then(|mut st| st.execute(rusqlite::params![space, parent, id]))
                        .map_err(e)?;
                    conn.prepare_cached(EVENT)
                        .and_then(|mut st| {
                            st.execute(rusqlite::params![
                                space,
                                seq,
                                id,
                                floor_id(!(seq as u64)),
                                b"x"
                            ])
                        })
                        .map_err(e)?;
                    conn.prepare_cached(HEAD)
                        .and_then(|mut st| st.execute(rusqlite::params![space, id, seq]))
                        .map_err(e)?;
                    conn.execute_batch("COMMIT").map_err(e)
                };
                for seq in 2..2 + WARMUP / 4 {
                    append(seq)?;
                }
                let first = 2 + WARMUP / 4;
                let t = Instant::now();
                let cpu = CpuMeter::start();
                for seq in first..first + n {
                    append(seq)?;
                }
                let cpu = cpu.stop(n);
                let r = rate(n, t.elapsed());
                drop(conn);
                drop(dir);
                Ok((r, cpu))
            })
            .await
            .map_err(|e| e.to_string())?
        }
        Backend::Postgres => {
            let url = pg_url.ok_or("no Postgres server")?;
            let schema = format!("cairn_bench_floor_{}", random_tag());
            let store = PgStore::open_with(PgOptions::new(url.to_owned()).schema(schema.clone()))
                .await
                .map_err(store_err)?;
            store.close().await;
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(url)
                .await
                .map_err(|e| format!("cannot connect to Postgres: {e}"))?;
            let hex = |b: &[u8]| -> String { b.iter().map(|x| format!("{x:02x}")).collect() };
            let sp = hex(&space);
            sqlx::raw_sql(&format!(
                "SET search_path TO {schema}; \
                 INSERT INTO epoch (space, id, seq) VALUES ('\\x{sp}', '\\x{id}', 1); \
                 INSERT INTO epoch_head (space, id, seq) VALUES ('\\x{sp}', '\\x{id}', 1);",
                id = hex(&floor_id(1))
            ))
            .execute(&pool)
            .await
            .map_err(|e| e.to_string())?;
            // One simple query per append: BEGIN … COMMIT in one round trip, literals inline
            // (the statements are cairn's column lists with `$n` spelled out).
            let append = |seq: u64| {
                let (parent, id, ev) = (
                    hex(&floor_id(seq - 1)),
                    hex(&floor_id(seq)),
                    hex(&floor_id(!seq)),
                );
                format!(
                    "BEGIN; \
                     INSERT INTO epoch (space, id, seq) VALUES ('\\x{sp}', '\\x{id}', {seq}); \
                     INSERT INTO epoch_parent (space, parent, child) VALUES ('\\x{sp}', '\\x{parent}', '\\x{id}'); \
                     INSERT INTO epoch_event (space, seq, epoch_seq, epoch, event_id, kind, key, payload) \
                         VALUES ('\\x{sp}', {seq}, 0, '\\x{id}', '\\x{ev}', 'bench', NULL, '\\x78'); \
                     UPDATE epoch_head SET id = '\\x{id}', seq = {seq} WHERE space = '\\x{sp}'; \
                     COMMIT;"
                )
            };
            for seq in 2..2 + WARMUP / 4 {
                sqlx::raw_sql(&append(seq))
                    .execute(&pool)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let first = 2 + WARMUP / 4;
            let t = Instant::now();
            let cpu = CpuMeter::start();
            for seq in first..first + n {
                sqlx::raw_sql(&append(seq))
                    .execute(&pool)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let cpu = cpu.stop(n);
            let r = rate(n, t.elapsed());
            sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&pool)
                .await
                .map_err(|e| e.to_string())?;
            pool.close().await;
            Ok((r, cpu))
        }
    }
}

/// The fixed cost of one trip to the engine that every operation pays at least once, averaged
/// over `n` trips: on SQLite the hop from an async task to a blocking thread and back
/// (`spawn_blocking` of nothing — cairn runs each statement batch on a blocking thread), on
/// Postgres a `SELECT 1` round trip over one pooled connection (loopback).
pub(crate) async fn trip_cost(
    backend: Backend,
    pg_url: Option<&str>,
    n: u64,
) -> Result<Duration, String> {
    match backend {
        Backend::Sqlite => {
            // Warm the blocking pool first (its first thread is spawned on demand).
            tokio::task::spawn_blocking(|| ())
                .await
                .map_err(|e| e.to_string())?;
            let t = Instant::now();
            for _ in 0..n {
                tokio::task::spawn_blocking(|| ())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(t.elapsed() / u32::try_from(n.max(1)).unwrap_or(u32::MAX))
        }
        Backend::Postgres => {
            let url = pg_url.ok_or("no Postgres server")?;
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(url)
                .await
                .map_err(|e| format!("cannot connect to Postgres: {e}"))?;
            for _ in 0..50 {
                sqlx::query("SELECT 1")
                    .execute(&pool)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let t = Instant::now();
            for _ in 0..n {
                sqlx::query("SELECT 1")
                    .execute(&pool)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let took = t.elapsed() / u32::try_from(n.max(1)).unwrap_or(u32::MAX);
            pool.close().await;
            Ok(took)
        }
    }
}

/// A fresh epoch store and what it takes to remove it.
pub(super) enum Fresh {
    Sqlite {
        store: SqliteStore,
        /// Keeps the store's directory until the end of the measurement.
        _dir: tempfile::TempDir,
    },
    Postgres(PgStore, sqlx::PgPool, String),
}

impl Fresh {
    pub(super) async fn open(backend: Backend, pg_url: Option<&str>) -> Result<Self, String> {
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
                    PgStore::open_with(PgOptions::new(url.to_owned()).schema(schema.clone()))
                        .await
                        .map_err(store_err)?;
                Ok(Self::Postgres(store, admin, schema))
            }
        }
    }

    pub(super) fn store(&self) -> Arc<dyn EpochStore> {
        match self {
            Self::Sqlite { store, .. } => Arc::new(store.clone()),
            Self::Postgres(s, _, _) => Arc::new(s.clone()),
        }
    }

    /// The store's URL, for another process (`pg_url`: the server it was made on).
    pub(super) fn url(&self, pg_url: Option<&str>) -> String {
        match self {
            Self::Sqlite { _dir, .. } => _dir.path().join("log.db").display().to_string(),
            Self::Postgres(_, _, schema) => {
                let base = pg_url.unwrap_or_default();
                let sep = if base.contains('?') { '&' } else { '?' };
                format!("{base}{sep}cairn_schema={schema}")
            }
        }
    }

    /// The store with its diagnostics (what a sync side reads).
    pub(super) fn diagnostics(&self) -> Arc<dyn cairn::EpochDiagnostics> {
        match self {
            Self::Sqlite { store, .. } => Arc::new(store.clone()),
            Self::Postgres(s, _, _) => Arc::new(s.clone()),
        }
    }

    pub(super) async fn close(self) -> Result<(), String> {
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
) -> Result<(f64, CpuUse), String> {
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
    let cpu = CpuMeter::start();
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
    let cpu = cpu.stop(per * appenders);
    fresh.close().await?;
    Ok((r, cpu))
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
        let mut m: [Vec<(f64, CpuUse)>; 5] = Default::default();
        let mut trips = Vec::new();
        for run in 0..args.runs {
            eprintln!("{}: run {}…", backend.name(), run + 1);
            // Interleaved within each run, so drift on the shared machine hits all alike.
            m[0].push(raw_commit_rate(backend, url, args.appends).await?);
            m[1].push(appends_per_sec(backend, url, args.appends, 1, 1).await?);
            m[2].push(appends_per_sec(backend, url, args.appends, n, n).await?);
            m[3].push(appends_per_sec(backend, url, args.appends, n, 1).await?);
            m[4].push(floor_rate(backend, url, args.appends).await?);
            trips.push(trip_cost(backend, url, 2_000).await?.as_secs_f64());
        }
        let rate_of =
            |xs: &[(f64, CpuUse)]| median(&mut xs.iter().map(|x| x.0).collect::<Vec<_>>());
        let cpu_of = |xs: &[(f64, CpuUse)]| {
            CpuUse::median(&xs.iter().map(|x| x.1).collect::<Vec<_>>()).unwrap_or_default()
        };
        let (raw, one, many, same) = (
            rate_of(&m[0]),
            rate_of(&m[1]),
            rate_of(&m[2]),
            rate_of(&m[3]),
        );
        // SQLite writes from this process, so its bytes and write calls per op are the
        // engine's; Postgres writes in the server.
        let cpu_cell = |xs: &[(f64, CpuUse)], who: &str| {
            let c = cpu_of(xs);
            match backend {
                Backend::Sqlite => format!("{} · {}", c.describe(who), c.describe_writes()),
                Backend::Postgres => c.describe(who),
            }
        };
        let fmt = |x: f64| thousands(x.round() as u64);
        let met = |ok: bool| if ok { "met" } else { "not met" };
        println!(
            "\n### {} — epoch-log appends/s, median of {} runs\n",
            backend.name(),
            args.runs
        );
        println!("| configuration | per second | ratio | target | CPU while measured (medians) |");
        println!("|---|---:|---:|---|---|");
        println!(
            "| raw single-row durable commit (engine, 1 connection) | {} | — | — | {} |",
            fmt(raw),
            cpu_cell(&m[0], "bench")
        );
        let floor = rate_of(&m[4]);
        println!(
            "| the rows an append writes, written directly (engine, 1 connection, 1 transaction each) | {} | {:.2}× raw | — | {} |",
            fmt(floor),
            floor / raw,
            cpu_cell(&m[4], "bench")
        );
        println!(
            "| 1 appender, 1 space | {} | {:.2}× raw, {:.2}× the rows written directly | ≥0.8× raw: {} | {} |",
            fmt(one),
            one / raw,
            one / floor,
            met(one / raw >= 0.8),
            cpu_cell(&m[1], "cairn")
        );
        println!(
            "| {n} appenders, {n} spaces | {} | {:.2}× 1 appender | ≥5×: {} | {} |",
            fmt(many),
            many / one,
            met(many / one >= 5.0),
            cpu_cell(&m[2], "cairn")
        );
        println!(
            "| {n} appenders, 1 space | {} | {:.2}× 1 appender | — | {} |",
            fmt(same),
            same / one,
            cpu_cell(&m[3], "cairn")
        );
        let trip = median(&mut trips) * 1e6;
        match backend {
            Backend::Sqlite => println!(
                "\nOne hop from an async task to a blocking thread and back (`spawn_blocking` of nothing), \
                 the fixed cost of each SQLite operation's trip to its connection: {trip:.1} µs"
            ),
            Backend::Postgres => println!(
                "\nOne `SELECT 1` round trip (one pooled connection, loopback), the fixed cost of \
                 each statement an operation sends: {trip:.1} µs"
            ),
        }
    }
    Ok(())
}

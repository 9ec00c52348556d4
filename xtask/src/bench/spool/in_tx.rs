//! Row 7 of `bench spool`: an enqueue inside the application's own transaction. One client
//! runs `--transactions` transactions per variant, one after the other; each inserts one
//! application row (`bench_order`) and then either enqueues one run through cairn (a) or
//! inserts one row of a table with the queue row's columns and types (`bench_bare_run`, like
//! `spool_run`, primary key only) with a bare `INSERT` (b), then commits. Every key and every
//! order id is new.
//!
//! The variants run interleaved in rounds of [`ROUND`] transactions, the order rotating every
//! round, so drift on the machine hits all of them alike; each variant's rate is its
//! transactions over the sum of its rounds' time. Variants:
//!
//! - SQLite (one store file; the application's tables come from an application migration set
//!   opened with the store): (a) `SqliteBackend::transaction` — the closure form, one hop to
//!   the writer thread; (a, handle) the facade's `Store::begin` handle over the same backend
//!   (`Transaction::sqlite` for the order row, then `enqueue`, `commit`: a hop each); (b) the
//!   application's own `rusqlite` connection to the same file (`BEGIN IMMEDIATE`, both
//!   inserts, `COMMIT`; one `spawn_blocking` per transaction); (b, in cairn's transaction) the
//!   bare insert inside `SqliteBackend::transaction`, which prices the enqueue alone.
//! - Postgres (the store in one schema, the application's tables in another): (a1) the
//!   `PgTransaction` of cairn's pool (`Store::begin`; the order row through
//!   `Transaction::postgres`); (a2) `Store::enqueue_in` on a transaction of the application's
//!   own `sqlx` pool (two more round trips: the `search_path` in and out); (b) the
//!   application's pool, bare insert; (b, in cairn's transaction) the bare insert in a
//!   `PgTransaction`. The application's pool has 4 connections (one client, but a released
//!   connection goes back to the pool in a task of its own, so with one the next `begin` waits
//!   for it) and does not ping them on acquire (cairn's own pool does not ping a connection
//!   used in the last 500 ms either). The target is checked against the faster (b).
//!
//! Durability is the engines' default for cairn: SQLite WAL with `synchronous=FULL` on every
//! connection, Postgres `synchronous_commit=on`.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cairn::testkit::sqlite::{SqliteBackend, SqliteOptions};
use cairn::{DedupKey, EnqueueOptions, MigrationSet, Store};

use super::super::chart::Bar;
use super::super::cpu::{CpuMeter, CpuUse};
use super::super::setup::{random_tag, store_err, Backend};
use super::args::SpoolArgs;
use super::fresh::queue;
use super::rates::{fmt_rate, median};

/// Transactions per variant per round.
const ROUND: u64 = 20;
/// Transactions per variant before the clock starts (connections, statement caches).
const WARMUP: u64 = 20;
/// The target: (a) at least this fraction of (b)'s rate.
const TARGET: f64 = 0.9;

/// The application's tables on SQLite: an order row, and a table as wide as `spool_run`
/// (its columns and types after cairn's revisions 0002, 0005 and 0006) with only its primary
/// key — no unique constraints, checks or secondary indexes.
const SQLITE_APP_SET: &str = "\
CREATE TABLE bench_order (
    id INTEGER PRIMARY KEY,
    customer TEXT NOT NULL,
    amount BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE bench_bare_run (
    run_no INTEGER PRIMARY KEY,
    run_id BLOB NOT NULL,
    queue TEXT NOT NULL,
    dedup_key BLOB NOT NULL,
    supersede_group BLOB,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    enqueued_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    due_at BIGINT,
    finished_at BIGINT,
    lease_token BLOB,
    lease_consumer TEXT,
    lease_expires_at BIGINT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    reason TEXT,
    last_event_seq BIGINT NOT NULL DEFAULT 0,
    payload_bytes BIGINT NOT NULL,
    payload BLOB NOT NULL,
    claim_attempt INTEGER,
    claim_jitter BIGINT,
    closed INTEGER
);
";

const SQLITE_INSERT_ORDER: &str =
    "INSERT INTO bench_order (id, customer, amount, created_at) VALUES (?1, ?2, ?3, ?4)";
const SQLITE_INSERT_BARE: &str = "INSERT INTO bench_bare_run (run_id, queue, dedup_key, state, \
     max_attempts, priority, enqueued_at, updated_at, due_at, payload_bytes, payload, \
     claim_attempt, claim_jitter, closed) \
     VALUES (?1, ?2, ?3, 'queued', 25, 0, ?4, ?4, ?4, ?5, ?6, 1, ?7, 0)";

/// The phases of one transaction, timed on the client: `BEGIN` (and taking the connection or
/// the writer, and the hop to it), the order row, the job (cairn's enqueue or the bare
/// insert), `COMMIT` (and the hop back).
type Phases = [Duration; 4];

const PHASES: [&str; 4] = ["begin", "order row", "job", "commit"];

/// Each variant's rates and phase means, one per run.
#[derive(Default, Clone)]
pub(super) struct Runs {
    /// (variant label, transactions per second of each run), in the order measured.
    variants: Vec<(&'static str, Vec<f64>)>,
    /// (variant label, the mean of each phase in each run).
    phases: Vec<(&'static str, Vec<Phases>)>,
    /// (variant label, its CPU use in each run: the median over its rounds).
    cpu: Vec<(&'static str, Vec<CpuUse>)>,
}

impl Runs {
    fn push(&mut self, label: &'static str, rate: f64, phases: Phases, cpu: CpuUse) {
        match self.cpu.iter_mut().find(|(l, _)| *l == label) {
            Some((_, c)) => c.push(cpu),
            None => self.cpu.push((label, vec![cpu])),
        }
        match self.variants.iter_mut().find(|(l, _)| *l == label) {
            Some((_, rates)) => rates.push(rate),
            None => self.variants.push((label, vec![rate])),
        }
        match self.phases.iter_mut().find(|(l, _)| *l == label) {
            Some((_, p)) => p.push(phases),
            None => self.phases.push((label, vec![phases])),
        }
    }

    /// The median over the runs of each phase's mean.
    fn phases_of(&self, label: &str) -> Option<Phases> {
        let runs = &self.phases.iter().find(|(l, _)| *l == label)?.1;
        let mut out = [Duration::ZERO; 4];
        for (i, slot) in out.iter_mut().enumerate() {
            let xs: Vec<f64> = runs.iter().map(|p| p[i].as_secs_f64()).collect();
            *slot = Duration::from_secs_f64(median(&xs)?);
        }
        Some(out)
    }

    fn median_of(&self, label: &str) -> Option<f64> {
        self.variants
            .iter()
            .find(|(l, _)| *l == label)
            .and_then(|(_, r)| median(r))
    }
}

const LITE_A: &str = "(a) SqliteBackend::transaction: order row + enqueue";
const LITE_A_HANDLE: &str =
    "(a, handle) Store::begin handle: order row (Transaction::sqlite) + enqueue + commit";
const LITE_B: &str = "(b) the application's own connection: order row + bare insert";
const LITE_B_IN: &str =
    "(b, in cairn's transaction) SqliteBackend::transaction: order row + bare insert";
const PG_A1: &str = "(a1) PgTransaction from cairn's pool (Store::begin): order row + enqueue";
const PG_A2: &str =
    "(a2) Store::enqueue_in on the application's own sqlx transaction: order row + enqueue";
const PG_B: &str = "(b) the application's own sqlx transaction: order row + bare insert";
const PG_B_IN: &str = "(b, in cairn's transaction) PgTransaction: order row + bare insert";

/// The variants, with whether the target applies to them.
fn variants(backend: Backend) -> [(&'static str, bool); 4] {
    match backend {
        Backend::Sqlite => [
            (LITE_A, true),
            (LITE_A_HANDLE, false),
            (LITE_B, false),
            (LITE_B_IN, false),
        ],
        Backend::Postgres => [
            (PG_A1, true),
            (PG_A2, true),
            (PG_B, false),
            (PG_B_IN, false),
        ],
    }
}

/// The two (b) variants: the application's own connection, and cairn's transaction.
fn baselines(backend: Backend) -> [&'static str; 2] {
    match backend {
        Backend::Sqlite => [LITE_B, LITE_B_IN],
        Backend::Postgres => [PG_B, PG_B_IN],
    }
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// What the bare insert writes for transaction `n`: the values cairn's enqueue writes (a
/// 16-byte id, the queue, the key, the times, the payload, the jitter).
struct BareRow {
    run_id: Vec<u8>,
    key: Vec<u8>,
    now: i64,
    jitter: i64,
}

impl BareRow {
    fn new(tag: u64, n: u64, key: &DedupKey) -> Self {
        let mut run_id = tag.to_be_bytes().to_vec();
        run_id.extend_from_slice(&n.to_be_bytes());
        Self {
            run_id,
            key: key.as_bytes().to_vec(),
            now: now_micros(),
            jitter: i64::from_le_bytes((n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ tag).to_le_bytes()),
        }
    }
}

fn tx_key(variant: usize, n: u64) -> DedupKey {
    DedupKey::from_parts(["tx", &variant.to_string(), &format!("{n:08}")]).expect("a valid key")
}

/// One run of row 7 on `backend`, added to `runs`.
pub(super) async fn measure(
    backend: Backend,
    pg_url: Option<&str>,
    args: &SpoolArgs,
    runs: &mut Runs,
) -> Result<(), String> {
    eprintln!(
        "cairn {}: enqueue in the application's transaction, {} per variant…",
        backend.name(),
        args.transactions
    );
    let rates = match backend {
        Backend::Sqlite => {
            let subject = LiteSubject::open().await?;
            let r = interleave(&subject, args.transactions).await;
            subject.close().await;
            r?
        }
        Backend::Postgres => {
            let subject = PgSubject::open(pg_url.ok_or("no Postgres server")?).await?;
            let r = interleave(&subject, args.transactions).await;
            subject.close().await?;
            r?
        }
    };
    for (label, rate, phases, cpu) in rates {
        runs.push(label, rate, phases, cpu);
    }
    Ok(())
}

/// A store and an application, and the variants of row 7 on them.
trait Subject {
    fn labels(&self) -> Vec<&'static str>;
    /// One transaction of variant `v` (an index into [`Subject::labels`]), the `n`-th, and
    /// the time of its phases.
    async fn one(&self, v: usize, n: u64) -> Result<Phases, String>;
}

/// The phases between consecutive instants `t[0]..=t[4]`.
fn phases(t: [Instant; 5]) -> Phases {
    [t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3]]
}

/// Runs every variant `n` times, interleaved in rounds; returns each one's rate and the mean
/// of each of its phases.
async fn interleave(
    subject: &impl Subject,
    n: u64,
) -> Result<Vec<(&'static str, f64, Phases, CpuUse)>, String> {
    let labels = subject.labels();
    let mut next = vec![0u64; labels.len()];
    for (v, next) in next.iter_mut().enumerate() {
        for _ in 0..WARMUP {
            subject.one(v, *next).await?;
            *next += 1;
        }
    }
    let mut spent = vec![Duration::ZERO; labels.len()];
    let mut phase_sums = vec![[Duration::ZERO; 4]; labels.len()];
    let mut cpus: Vec<Vec<CpuUse>> = vec![Vec::new(); labels.len()];
    let mut done = vec![0u64; labels.len()];
    let mut round = 0;
    while done.iter().any(|&d| d < n) {
        for k in 0..labels.len() {
            let v = (k + round) % labels.len();
            let take = ROUND.min(n - done[v]);
            let cpu = CpuMeter::start();
            let t = Instant::now();
            for _ in 0..take {
                let p = subject.one(v, next[v]).await?;
                for (sum, d) in phase_sums[v].iter_mut().zip(p) {
                    *sum += d;
                }
                next[v] += 1;
            }
            let took = t.elapsed();
            cpus[v].push(cpu.stop(take));
            spent[v] += took;
            done[v] += take;
        }
        round += 1;
    }
    let count = u32::try_from(n).unwrap_or(u32::MAX);
    Ok(labels
        .iter()
        .zip(spent)
        .zip(phase_sums)
        .zip(cpus)
        .map(|(((l, t), p), c)| {
            (
                *l,
                super::rates::rate(n, t),
                p.map(|d| d / count),
                mean_cpu(&c),
            )
        })
        .collect())
}

/// The mean of the rounds' figures, field by field: a round is about one 10 ms tick of
/// `/proc`'s CPU clock long, so each round's CPU figure is a whole number of ticks and only
/// their mean converges on the CPU spent.
fn mean_cpu(rounds: &[CpuUse]) -> CpuUse {
    let mean = |xs: Vec<f64>| -> Option<f64> {
        (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
    };
    CpuUse {
        busy_cores: mean(rounds.iter().filter_map(|r| r.busy_cores).collect()),
        iowait_cores: mean(rounds.iter().filter_map(|r| r.iowait_cores).collect()),
        cores: rounds.first().map_or(0, |r| r.cores),
        process_per_op: mean(
            rounds
                .iter()
                .filter_map(|r| r.process_per_op.map(|d| d.as_secs_f64()))
                .collect(),
        )
        .map(Duration::from_secs_f64),
        wall_per_op: Duration::from_secs_f64(
            mean(rounds.iter().map(|r| r.wall_per_op.as_secs_f64()).collect()).unwrap_or(0.0),
        ),
        write_bytes_per_op: mean(rounds.iter().filter_map(|r| r.write_bytes_per_op).collect()),
        write_calls_per_op: mean(rounds.iter().filter_map(|r| r.write_calls_per_op).collect()),
    }
}

// ---------------------------------------------------------------------------------------------
// SQLite

struct LiteSubject {
    backend: Arc<SqliteBackend>,
    store: Store,
    /// The application's own connection to the store's file.
    app: Arc<Mutex<rusqlite::Connection>>,
    tag: u64,
    _dir: tempfile::TempDir,
}

/// `O::default()` for the options argument of `open`: cairn's `OpenOptions` reached through
/// the type `SqliteBackend::open` takes (xtask depends on the `cairn` facade only, which
/// re-exports that type under its `backend` feature).
fn default_arg<O: Default, R>(_: &impl Fn(O) -> R) -> O {
    O::default()
}

fn lite_err(e: rusqlite::Error) -> cairn::Error {
    cairn::Error::backend("sqlite", e.to_string())
}

impl LiteSubject {
    async fn open() -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("cairn-bench-tx-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let path = dir.path().join("store.db");
        let set = MigrationSet::from_files("bench_app", [("0001_bench_app.sql", SQLITE_APP_SET)])
            .map_err(|e| format!("the application's migration set: {e}"))?;
        let backend = {
            let path: &Path = &path;
            let open = |opts| SqliteBackend::open(path, SqliteOptions::default(), opts);
            let opts = default_arg(&open).migrations(set);
            open(opts).await.map_err(store_err)?
        };
        let backend = Arc::new(backend);
        let store = Store::from_backend(backend.clone());
        let app_path = path.clone();
        let app = tokio::task::spawn_blocking(move || {
            let conn = rusqlite::Connection::open(&app_path)?;
            conn.execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; \
                 PRAGMA busy_timeout=5000;",
            )?;
            // The durability compared must be cairn's: WAL, and a sync on every commit.
            let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
            let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
            Ok::<_, rusqlite::Error>((conn, mode, sync))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("the application's connection: {e}"))?;
        let (app, mode, sync) = app;
        if !mode.eq_ignore_ascii_case("wal") || sync != 2 {
            return Err(format!(
                "the application's connection runs journal_mode={mode}, synchronous={sync}; \
                 the comparison needs WAL and FULL (2)"
            ));
        }
        Ok(Self {
            backend,
            store,
            app: Arc::new(Mutex::new(app)),
            tag: random_tag_number(),
            _dir: dir,
        })
    }

    async fn close(self) {
        let _ = self.store.close().await;
    }
}

fn random_tag_number() -> u64 {
    u64::from_str_radix(&random_tag(), 16).unwrap_or(0x5eed)
}

fn insert_order(conn: &rusqlite::Connection, id: i64, now: i64) -> rusqlite::Result<usize> {
    conn.prepare_cached(SQLITE_INSERT_ORDER)?
        .execute(rusqlite::params![id, "customer", 4200, now])
}

fn insert_bare(conn: &rusqlite::Connection, row: &BareRow) -> rusqlite::Result<usize> {
    conn.prepare_cached(SQLITE_INSERT_BARE)?
        .execute(rusqlite::params![
            row.run_id,
            "bench",
            row.key,
            row.now,
            2,
            b"{}".to_vec(),
            row.jitter
        ])
}

/// The order id of transaction `n` of variant `v`: unique across the variants.
fn order_id(v: usize, n: u64) -> i64 {
    i64::try_from(v as u64 * 1_000_000_000 + n).unwrap_or(i64::MAX)
}

impl Subject for LiteSubject {
    fn labels(&self) -> Vec<&'static str> {
        variants(Backend::Sqlite).iter().map(|(l, _)| *l).collect()
    }

    async fn one(&self, v: usize, n: u64) -> Result<Phases, String> {
        let key = tx_key(v, n);
        let id = order_id(v, n);
        let now = now_micros();
        let t0 = Instant::now();
        match variants(Backend::Sqlite)[v].0 {
            LITE_A => {
                let q = queue();
                let [t1, t2, t3] = self
                    .backend
                    .transaction(move |tx| {
                        let t1 = Instant::now();
                        insert_order(tx.connection(), id, now).map_err(lite_err)?;
                        let t2 = Instant::now();
                        tx.enqueue(&q, &key, b"{}".to_vec(), EnqueueOptions::default())?;
                        Ok([t1, t2, Instant::now()])
                    })
                    .await
                    .map_err(store_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
            LITE_A_HANDLE => {
                let mut tx = self.store.begin().await.map_err(store_err)?;
                let t1 = Instant::now();
                tx.sqlite(move |c| insert_order(c, id, now))
                    .await
                    .map_err(store_err)?;
                let t2 = Instant::now();
                tx.enqueue(&queue(), &key, b"{}".to_vec(), EnqueueOptions::default())
                    .await
                    .map_err(store_err)?;
                let t3 = Instant::now();
                tx.commit().await.map_err(store_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
            LITE_B => {
                let row = BareRow::new(self.tag, order_id(v, n) as u64, &key);
                let app = self.app.clone();
                let [t1, t2, t3] = tokio::task::spawn_blocking(move || {
                    let conn = app
                        .lock()
                        .map_err(|_| "the application's connection is poisoned")?;
                    let r = (|| {
                        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
                        let t1 = Instant::now();
                        insert_order(&conn, id, now)?;
                        let t2 = Instant::now();
                        insert_bare(&conn, &row)?;
                        let t3 = Instant::now();
                        conn.prepare_cached("COMMIT")?.execute([])?;
                        Ok::<_, rusqlite::Error>([t1, t2, t3])
                    })();
                    if r.is_err() && !conn.is_autocommit() {
                        let _ = conn.execute_batch("ROLLBACK");
                    }
                    r.map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("the application's transaction: {e}"))?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
            _ => {
                let row = BareRow::new(self.tag, order_id(v, n) as u64, &key);
                let [t1, t2, t3] = self
                    .backend
                    .transaction(move |tx| {
                        let t1 = Instant::now();
                        insert_order(tx.connection(), id, now).map_err(lite_err)?;
                        let t2 = Instant::now();
                        insert_bare(tx.connection(), &row).map_err(lite_err)?;
                        Ok([t1, t2, Instant::now()])
                    })
                    .await
                    .map_err(store_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Postgres

struct PgSubject {
    store: Store,
    /// The application's own pool (4 connections, no ping on acquire).
    app: sqlx::PgPool,
    admin: sqlx::PgPool,
    store_schema: String,
    app_schema: String,
    insert_order: String,
    insert_bare: String,
    tag: u64,
}

impl PgSubject {
    async fn open(url: &str) -> Result<Self, String> {
        let tag = random_tag();
        let store_schema = format!("cairn_bench_tx_{tag}");
        let app_schema = format!("cairn_bench_app_{tag}");
        let admin = sqlx::PgPool::connect(url)
            .await
            .map_err(|e| format!("cannot connect to Postgres: {e}"))?;
        let store = Store::builder(url)
            .schema(store_schema.clone())
            .open()
            .await
            .map_err(store_err)?;
        let ddl = format!(
            "CREATE SCHEMA {app_schema};
             CREATE TABLE {app_schema}.bench_order (
                 id BIGINT PRIMARY KEY,
                 customer TEXT NOT NULL,
                 amount BIGINT NOT NULL,
                 created_at BIGINT NOT NULL
             );
             CREATE TABLE {app_schema}.bench_bare_run
                 (LIKE {store_schema}.spool_run INCLUDING DEFAULTS INCLUDING IDENTITY);
             ALTER TABLE {app_schema}.bench_bare_run ADD PRIMARY KEY (run_no);"
        );
        sqlx::raw_sql(&ddl)
            .execute(&admin)
            .await
            .map_err(|e| format!("cannot create the application's tables: {e}"))?;
        let app = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect(url)
            .await
            .map_err(|e| format!("cannot connect the application's pool: {e}"))?;
        Ok(Self {
            store,
            app,
            admin,
            insert_order: format!(
                "INSERT INTO {app_schema}.bench_order (id, customer, amount, created_at) \
                 VALUES ($1, $2, $3, $4)"
            ),
            insert_bare: format!(
                "INSERT INTO {app_schema}.bench_bare_run (run_id, queue, dedup_key, state, \
                 max_attempts, priority, enqueued_at, updated_at, due_at, payload_bytes, payload, \
                 claim_attempt, claim_jitter, closed) \
                 VALUES ($1, $2, $3, 'queued', 25, 0, $4, $4, $4, $5, $6, 1, $7, false)"
            ),
            store_schema,
            app_schema,
            tag: u64::from_str_radix(&tag, 16).unwrap_or(0x5eed),
        })
    }

    async fn close(self) -> Result<(), String> {
        self.app.close().await;
        let _ = self.store.close().await;
        let drop = format!(
            "DROP SCHEMA IF EXISTS {} CASCADE; DROP SCHEMA IF EXISTS {} CASCADE",
            self.app_schema, self.store_schema
        );
        let r = sqlx::raw_sql(&drop).execute(&self.admin).await;
        self.admin.close().await;
        r.map(|_| ())
            .map_err(|e| format!("cannot drop the bench schemas: {e}"))
    }

    async fn order(&self, conn: &mut sqlx::PgConnection, id: i64, now: i64) -> Result<(), String> {
        sqlx::query(&self.insert_order)
            .bind(id)
            .bind("customer")
            .bind(4200_i64)
            .bind(now)
            .execute(conn)
            .await
            .map(|_| ())
            .map_err(|e| format!("the order row: {e}"))
    }

    async fn bare(&self, conn: &mut sqlx::PgConnection, row: &BareRow) -> Result<(), String> {
        sqlx::query(&self.insert_bare)
            .bind(&row.run_id)
            .bind("bench")
            .bind(&row.key)
            .bind(row.now)
            .bind(2_i64)
            .bind(b"{}".as_slice())
            .bind(row.jitter)
            .execute(conn)
            .await
            .map(|_| ())
            .map_err(|e| format!("the bare row: {e}"))
    }
}

fn pg_err(e: sqlx::Error) -> String {
    format!("the application's transaction: {e}")
}

impl Subject for PgSubject {
    fn labels(&self) -> Vec<&'static str> {
        variants(Backend::Postgres)
            .iter()
            .map(|(l, _)| *l)
            .collect()
    }

    async fn one(&self, v: usize, n: u64) -> Result<Phases, String> {
        let key = tx_key(v, n);
        let id = order_id(v, n);
        let now = now_micros();
        let t0 = Instant::now();
        match variants(Backend::Postgres)[v].0 {
            PG_A1 => {
                let mut tx = self.store.begin().await.map_err(store_err)?;
                let t1 = Instant::now();
                let conn = tx.postgres().ok_or("not a Postgres transaction")?;
                self.order(conn, id, now).await?;
                let t2 = Instant::now();
                tx.enqueue(&queue(), &key, b"{}".to_vec(), EnqueueOptions::default())
                    .await
                    .map_err(store_err)?;
                let t3 = Instant::now();
                tx.commit().await.map_err(store_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
            PG_A2 => {
                let mut tx = self.app.begin().await.map_err(pg_err)?;
                let t1 = Instant::now();
                self.order(&mut tx, id, now).await?;
                let t2 = Instant::now();
                self.store
                    .enqueue_in(
                        &mut tx,
                        &queue(),
                        &key,
                        b"{}".to_vec(),
                        EnqueueOptions::default(),
                    )
                    .await
                    .map_err(store_err)?;
                let t3 = Instant::now();
                tx.commit().await.map_err(pg_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
            PG_B => {
                let row = BareRow::new(self.tag, id as u64, &key);
                let mut tx = self.app.begin().await.map_err(pg_err)?;
                let t1 = Instant::now();
                self.order(&mut tx, id, now).await?;
                let t2 = Instant::now();
                self.bare(&mut tx, &row).await?;
                let t3 = Instant::now();
                tx.commit().await.map_err(pg_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
            _ => {
                let row = BareRow::new(self.tag, id as u64, &key);
                let mut tx = self.store.begin().await.map_err(store_err)?;
                let t1 = Instant::now();
                let conn = tx.postgres().ok_or("not a Postgres transaction")?;
                self.order(conn, id, now).await?;
                let t2 = Instant::now();
                let conn = tx.postgres().ok_or("not a Postgres transaction")?;
                self.bare(conn, &row).await?;
                let t3 = Instant::now();
                tx.commit().await.map_err(store_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Report

pub(super) fn print_table(backend: Backend, args: &SpoolArgs, runs: &Runs) {
    let [own, inside] = baselines(backend).map(|b| runs.median_of(b));
    // The target is checked against the faster of the two (b) figures.
    let strict = match (own, inside) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    println!(
        "\n### {} — 7. enqueue inside the application's transaction (1 client, {} transactions \
         per variant, interleaved in rounds of {ROUND}; transactions/s, median of {} runs)\n",
        backend.name(),
        super::super::figures::thousands(args.transactions),
        args.runs
    );
    println!(
        "| variant: BEGIN; order row; …; COMMIT | transactions/s | ÷ (b) own connection | ÷ (b) \
         in cairn's transaction | target ≥{TARGET}× the faster (b) |"
    );
    println!("|---|---:|---:|---:|---|");
    for (label, targeted) in variants(backend) {
        let m = runs.median_of(label);
        let cell = |base: Option<f64>, this: &str| match (m, base) {
            (Some(m), Some(b)) if label != this => format!("{:.2}×", m / b),
            _ => "—".to_owned(),
        };
        let [own_label, inside_label] = baselines(backend);
        let verdict = match (targeted, m, strict) {
            (true, Some(m), Some(b)) if m / b >= TARGET => format!("met ({:.2}×)", m / b),
            (true, Some(m), Some(b)) => format!("not met ({:.2}×)", m / b),
            (true, _, _) => "n/a".to_owned(),
            (false, _, _) => "—".to_owned(),
        };
        println!(
            "| {label} | {} | {} | {} | {verdict} |",
            fmt_rate(m),
            cell(own, own_label),
            cell(inside, inside_label)
        );
    }
    println!(
        "\nWhere the time goes (client clock, mean µs per transaction, median of the runs; \
         begin = taking the connection or the writer and BEGIN, commit = COMMIT and the way \
         back):\n"
    );
    println!("| variant | {} | total |", PHASES.join(" | "));
    println!("|---|---:|---:|---:|---:|---:|");
    for (label, _) in variants(backend) {
        if let Some(p) = runs.phases_of(label) {
            let us = |d: Duration| format!("{:.0}", d.as_secs_f64() * 1e6);
            let total: Duration = p.iter().sum();
            println!(
                "| {} | {} | {} |",
                short_label(label),
                p.map(us).join(" | "),
                us(total)
            );
        }
    }
    println!(
        "\nCPU while each variant ran (the mean over its rounds — `/proc` counts CPU in 10 ms \
         ticks, a round lasts about that long — then the median of the runs):"
    );
    for (label, _) in variants(backend) {
        let Some((_, cpu)) = runs.cpu.iter().find(|(l, _)| *l == label) else {
            continue;
        };
        if let Some(c) = CpuUse::median(cpu) {
            let writes = match backend {
                Backend::Sqlite => format!(" · {}", c.describe_writes()),
                Backend::Postgres => String::new(),
            };
            println!("- {}: {}{writes}", short_label(label), c.describe("bench"));
        }
    }
    let note = match backend {
        Backend::Sqlite => {
            "\nRow 7 settings: one store file, WAL, synchronous=FULL on every connection (cairn's \
             and the application's); the application's tables from an application migration \
             set (`bench_app`); `bench_bare_run` has spool_run's columns and types, primary key \
             only."
        }
        Backend::Postgres => {
            "\nRow 7 settings: synchronous_commit=on; the store in its own schema (cairn's pool, \
             10 connections), the application's tables in another, reached by the application's \
             own sqlx pool (4 connections, no ping on acquire); `bench_bare_run` is `LIKE \
             spool_run INCLUDING DEFAULTS INCLUDING IDENTITY` plus its primary key only."
        }
    };
    println!("{note}");
}

/// `(a1)` of `(a1) PgTransaction …`.
fn short_label(label: &str) -> String {
    match label {
        LITE_B_IN | PG_B_IN => "(b) in cairn's tx".to_owned(),
        _ => label.split(')').next().unwrap_or(label).to_owned() + ")",
    }
}

pub(super) fn chart_rows(backend: Backend, runs: &Runs) -> Vec<(String, Vec<Bar>)> {
    let bars = variants(backend)
        .iter()
        .filter_map(|(label, _)| {
            runs.median_of(label).map(|v| Bar {
                label: short_label(label),
                value: v,
            })
        })
        .collect();
    vec![(
        format!(
            "{}: 7. enqueue in the application's transaction (tx/s)",
            backend.name()
        ),
        bars,
    )]
}

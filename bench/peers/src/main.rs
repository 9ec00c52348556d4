//! The peers of `cargo xtask bench spool`: riverqueue and apalis, measured on fresh stores with
//! the same rows as cairn's bench, printing one JSON document on stdout.
//!
//! Usage: `cairn-bench-peers --backend sqlite|postgres [--url POSTGRES_ADMIN_URL] [--runs 3]
//! [--enqueue 5000] [--duplicates 1000] [--claims 5000] [--workers 10] [--producers 8]
//! [--bulk 10000] [--bulk-batch 1000] [--rows 1,2,3,4,6]`.
//!
//! Rows (numbered as in `cargo xtask bench spool`): 1 and 2 enqueue and duplicates, 3 claim +
//! complete, 4 producers, 6 bulk enqueue (`--bulk` distinct keys in batches of `--bulk-batch`,
//! each batch one call of the peer's bulk API). A row left out of `--rows` is absent from the
//! JSON.
//!
//! Durability is matched with cairn's: every SQLite connection runs `synchronous=FULL` in WAL
//! mode (apalis' own setup switches its connection to `synchronous=OFF`, so its pool is closed
//! after setup and reopened with FULL); Postgres keeps the server's `synchronous_commit=on`.
//! Each row of each run gets a fresh store: a new SQLite file, or a new Postgres database.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = Result<T, BoxError>;

const RIVER_VERSION: &str = "0.5.0";
const APALIS_VERSION: &str = "1.0.0";
/// River's fetch cooldown for the claim row (its minimum; the default is 100 ms).
const RIVER_FETCH_COOLDOWN: Duration = Duration::from_millis(1);
/// apalis' fetch batch size and poll interval for the claim row.
const APALIS_BATCH: usize = 10;
const APALIS_POLL: Duration = Duration::from_millis(1);
/// How long the claim row may take before it is declared stuck.
const CLAIM_DEADLINE: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Engine {
    Sqlite,
    Postgres,
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
    rows: Vec<u32>,
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
        rows: vec![1, 2, 3, 4, 6],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || value.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
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
            "--claims" => a.claims = num()?,
            "--workers" => a.workers = num()?,
            "--producers" => a.producers = num()?,
            "--bulk" => a.bulk = num()?,
            "--bulk-batch" => a.bulk_batch = num()?.max(1),
            "--rows" => {
                a.rows = value
                    .split(',')
                    .map(|r| r.trim().parse::<u32>().map_err(|e| format!("--rows: {e}")))
                    .collect::<Result<_, _>>()?
            }
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

/// A fresh store for one row: a SQLite file in a new directory, or a new Postgres database.
struct Fresh {
    backend: Engine,
    admin_url: String,
    dir: Option<std::path::PathBuf>,
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

    fn sqlite_options(&self) -> Res<sqlx::sqlite::SqliteConnectOptions> {
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
        let path = self
            .dir
            .as_ref()
            .ok_or("not a sqlite store")?
            .join("peer.db");
        Ok(
            SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(30)),
        )
    }

    async fn sqlite_pool(&self, max: u32) -> Res<sqlx::SqlitePool> {
        Ok(sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(max)
            .connect_with(self.sqlite_options()?)
            .await?)
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
        Ok(sqlx::postgres::PgPoolOptions::new()
            .max_connections(max)
            .connect(&self.pg_url()?)
            .await?)
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
        let _ = self.backend;
        Ok(())
    }
}

/// What one run of one system measured (operations per second) and saw; a row that was not
/// run is left out.
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
}

// ---------------------------------------------------------------------------------------------
// River

mod river {
    use super::*;
    use riverqueue::{
        Client, InsertOpts, Job, JobArgs, QueueConfig, UniqueOpts, WorkContext, WorkOutcome,
        Workers,
    };

    #[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
    #[river(kind = "bench")]
    pub(super) struct BenchJob {
        key: String,
    }

    fn unique() -> InsertOpts {
        InsertOpts::default().with_unique(UniqueOpts::new().with_by_args(true))
    }

    /// A River client (insert-only unless `workers` is given) on a fresh store.
    async fn client(fresh: &Fresh, conns: u32) -> Res<(Client, Pool)> {
        match fresh.backend {
            Engine::Sqlite => {
                let pool = fresh.sqlite_pool(conns).await?;
                riverqueue::migrate::SqliteMigrator::new(pool.clone())
                    .migrate_up()
                    .await?;
                Ok((Client::builder(pool.clone()).build()?, Pool::Sqlite(pool)))
            }
            Engine::Postgres => {
                let pool = fresh.pg_pool(conns).await?;
                riverqueue::migrate::PostgresMigrator::new(pool.clone())
                    .migrate_up()
                    .await?;
                Ok((Client::builder(pool.clone()).build()?, Pool::Pg(pool)))
            }
        }
    }

    pub(super) enum Pool {
        Sqlite(sqlx::SqlitePool),
        Pg(sqlx::PgPool),
    }

    impl Pool {
        async fn completed(&self) -> Res<i64> {
            const Q: &str = "SELECT count(*) FROM river_job WHERE state = 'completed'";
            Ok(match self {
                Self::Sqlite(p) => sqlx::query_scalar(Q).fetch_one(p).await?,
                Self::Pg(p) => sqlx::query_scalar(Q).fetch_one(p).await?,
            })
        }

        async fn close(&self) {
            match self {
                Self::Sqlite(p) => p.close().await,
                Self::Pg(p) => p.close().await,
            }
        }
    }

    async fn insert(client: &Client, k: String) -> Res<(i64, bool)> {
        let r = client.insert(BenchJob { key: k }).opts(unique()).await?;
        Ok((r.id(), r.unique_skipped_as_duplicate))
    }

    pub(super) async fn run(a: &Args) -> Res<RunResult> {
        let mut out = RunResult::default();

        if a.row(1) || a.row(2) {
            // Row 1: enqueue, one at a time.
            let fresh = Fresh::new(a.backend, &a.url, "river").await?;
            let (c, pool) = client(&fresh, 10).await?;
            let t = Instant::now();
            let mut ids = Vec::with_capacity(a.enqueue);
            for i in 0..a.enqueue {
                ids.push(insert(&c, key(i)).await?.0);
            }
            out.enqueue = Some(rate(a.enqueue, t.elapsed()));
            out.producers_1 = out.enqueue;

            // Row 2: duplicates of existing keys, on the same store.
            let t = Instant::now();
            let mut same = 0;
            for (i, id) in ids.iter().enumerate().take(a.duplicates) {
                let (got, skipped) = insert(&c, key(i)).await?;
                if skipped && got == *id {
                    same += 1;
                }
            }
            out.duplicate = Some(rate(a.duplicates, t.elapsed()));
            out.duplicate_returns = if same == a.duplicates {
                "the existing id (unique_skipped_as_duplicate)".to_owned()
            } else {
                format!("the existing id for {same} of {} keys", a.duplicates)
            };
            pool.close().await;
            fresh.drop_store().await?;
        }

        if a.row(4) {
            // Row 4: N producers.
            let fresh = Fresh::new(a.backend, &a.url, "river").await?;
            let (c, pool) = client(&fresh, a.producers as u32 + 2).await?;
            let per = a.enqueue / a.producers;
            let t = Instant::now();
            let mut tasks = Vec::new();
            for p in 0..a.producers {
                let c = c.clone();
                tasks.push(tokio::spawn(async move {
                    for i in 0..per {
                        insert(&c, key(p * per + i)).await?;
                    }
                    Ok::<_, BoxError>(())
                }));
            }
            for t in tasks {
                t.await??;
            }
            out.producers_n = Some(rate(per * a.producers, t.elapsed()));
            pool.close().await;
            fresh.drop_store().await?;
        }

        if a.row(6) {
            // Row 6: bulk enqueue. `Client::insert_many` is the crate's bulk API: one
            // transaction and one commit per call, unique by args as in row 1.
            let fresh = Fresh::new(a.backend, &a.url, "river").await?;
            let (c, pool) = client(&fresh, 10).await?;
            let jobs: Vec<BenchJob> = (0..a.bulk).map(|i| BenchJob { key: key(i) }).collect();
            let t = Instant::now();
            let mut inserted = 0;
            for chunk in jobs.chunks(a.bulk_batch) {
                let items = chunk.iter().cloned().map(|j| (j, unique()));
                let results = c.insert_many(items).await?;
                inserted += results
                    .iter()
                    .filter(|r| !r.unique_skipped_as_duplicate)
                    .count();
            }
            out.bulk_enqueue = Some(rate(a.bulk, t.elapsed()));
            if inserted != a.bulk {
                return Err(format!("insert_many created {inserted} of {} jobs", a.bulk).into());
            }
            pool.close().await;
            fresh.drop_store().await?;
        }

        if a.row(3) {
            // Row 3: claim + complete, no-op handler.
            let fresh = Fresh::new(a.backend, &a.url, "river").await?;
            let (c, pool) = client(&fresh, a.workers as u32 + 4).await?;
            let jobs: Vec<BenchJob> = (0..a.claims).map(|i| BenchJob { key: key(i) }).collect();
            for chunk in jobs.chunks(500) {
                c.insert_many(chunk.to_vec()).await?;
            }
            drop(c);
            let done = Arc::new(AtomicUsize::new(0));
            let mut workers = Workers::new();
            {
                let done = done.clone();
                workers.add_fn(move |_ctx: WorkContext, _job: Job<BenchJob>| {
                    let done = done.clone();
                    async move {
                        done.fetch_add(1, Ordering::Relaxed);
                        Ok::<_, BoxError>(WorkOutcome::Complete)
                    }
                })?;
            }
            let builder = match &pool {
                Pool::Sqlite(p) => Client::builder(p.clone()),
                Pool::Pg(p) => Client::builder(p.clone()),
            };
            let worker_client = builder
                .workers(workers)
                .fetch_cooldown(RIVER_FETCH_COOLDOWN)
                .queue("default", QueueConfig::new(a.workers))
                .build()?;
            let t = Instant::now();
            let mut handle = worker_client.start()?;
            wait_until(|| async { Ok(pool.completed().await? >= a.claims as i64) }).await?;
            out.claim_complete = Some(rate(a.claims, t.elapsed()));
            handle.stop_and_cancel().await?;
            pool.close().await;
            fresh.drop_store().await?;
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// apalis

mod apalis_peer {
    use super::*;
    use apalis::prelude::*;

    /// An apalis storage of `usize` tasks on queue [`QUEUE`] and its pool.
    #[derive(Clone)]
    enum Pool {
        Sqlite(apalis_sqlite::SqliteStorage<usize>, sqlx::SqlitePool),
        Pg(apalis_postgres::PostgresStorage<usize>, sqlx::PgPool),
    }

    impl Pool {
        async fn done(&self) -> Res<i64> {
            Ok(match self {
                Self::Sqlite(_, p) => {
                    sqlx::query_scalar("SELECT count(*) FROM Jobs WHERE status = 'Done'")
                        .fetch_one(p)
                        .await?
                }
                Self::Pg(_, p) => {
                    sqlx::query_scalar("SELECT count(*) FROM apalis.jobs WHERE status = 'Done'")
                        .fetch_one(p)
                        .await?
                }
            })
        }

        async fn close(&self) {
            match self {
                Self::Sqlite(_, p) => p.close().await,
                Self::Pg(_, p) => p.close().await,
            }
        }

        /// All tasks of the store, whatever their status.
        async fn count(&self) -> Res<i64> {
            Ok(match self {
                Self::Sqlite(_, p) => {
                    sqlx::query_scalar("SELECT count(*) FROM Jobs")
                        .fetch_one(p)
                        .await?
                }
                Self::Pg(_, p) => {
                    sqlx::query_scalar("SELECT count(*) FROM apalis.jobs")
                        .fetch_one(p)
                        .await?
                }
            })
        }

        /// Pushes the tasks `ns` (each with `key(n)` as its idempotency key) in one call of
        /// apalis' `push_all`; `Ok(Err(..))` is the error apalis answered with.
        async fn push_all(&mut self, ns: std::ops::Range<usize>) -> Res<Result<(), String>> {
            let tasks: Vec<_> = ns
                .map(|n| TaskBuilder::new(n).idempotency_key(key(n)).build())
                .collect();
            let tasks = futures::stream::iter(tasks);
            Ok(match self {
                Self::Sqlite(s, _) => s.push_all(tasks).await.map_err(|e| e.to_string()),
                Self::Pg(s, _) => s.push_all(tasks).await.map_err(|e| e.to_string()),
            })
        }

        /// Pushes one task with `k` as its idempotency key through apalis' own sink;
        /// `Ok(Err(..))` is the error apalis answered with.
        async fn push(&mut self, k: String, n: usize) -> Res<Result<(), String>> {
            let task = TaskBuilder::new(n).idempotency_key(k).build();
            Ok(match self {
                Self::Sqlite(s, _) => s.push_task(task).await.map_err(|e| e.to_string()),
                Self::Pg(s, _) => s.push_task(task).await.map_err(|e| e.to_string()),
            })
        }
    }

    const QUEUE: &str = "bench";

    async fn open(fresh: &Fresh, conns: u32) -> Res<Pool> {
        match fresh.backend {
            Engine::Sqlite => {
                let setup = fresh.sqlite_pool(1).await?;
                apalis_sqlite::SqliteStorage::setup(&setup).await?;
                // setup switched its connection to synchronous=OFF: start over with FULL.
                setup.close().await;
                let pool = fresh.sqlite_pool(conns).await?;
                let config = apalis_sqlite::Config::default()
                    .queue(QUEUE)
                    .batch_size(APALIS_BATCH);
                let storage = apalis_sqlite::SqliteStorage::<usize>::new(&pool).with_config(config);
                Ok(Pool::Sqlite(storage, pool))
            }
            Engine::Postgres => {
                let pool = fresh.pg_pool(conns).await?;
                apalis_postgres::PostgresStorage::setup(&pool).await?;
                let config = apalis_postgres::Config::default()
                    .queue(QUEUE)
                    .batch_size(APALIS_BATCH);
                let storage =
                    apalis_postgres::PostgresStorage::<usize>::new(&pool).with_config(config);
                Ok(Pool::Pg(storage, pool))
            }
        }
    }

    pub(super) async fn run(a: &Args) -> Res<RunResult> {
        let mut out = RunResult::default();

        if a.row(1) || a.row(2) {
            let fresh = Fresh::new(a.backend, &a.url, "apalis").await?;
            let mut pool = open(&fresh, 10).await?;
            let t = Instant::now();
            for i in 0..a.enqueue {
                pool.push(key(i), i).await?.map_err(BoxError::from)?;
            }
            out.enqueue = Some(rate(a.enqueue, t.elapsed()));
            out.producers_1 = out.enqueue;

            let t = Instant::now();
            let mut errors = 0;
            let mut first_error = None;
            for i in 0..a.duplicates {
                if let Err(e) = pool.push(key(i), i).await? {
                    errors += 1;
                    first_error.get_or_insert(e);
                }
            }
            out.duplicate = Some(rate(a.duplicates, t.elapsed()));
            out.duplicate_returns = match first_error {
                None => "nothing (Ok(()), no id; the row is left as it was)".to_owned(),
                Some(e) => format!("an error for {errors} of {}: {e}", a.duplicates),
            };
            pool.close().await;
            fresh.drop_store().await?;
        }

        if a.row(4) {
            let fresh = Fresh::new(a.backend, &a.url, "apalis").await?;
            let pool = open(&fresh, a.producers as u32 + 2).await?;
            let per = a.enqueue / a.producers;
            let t = Instant::now();
            let mut tasks = Vec::new();
            for p in 0..a.producers {
                let mut pool = pool.clone();
                tasks.push(tokio::spawn(async move {
                    for i in 0..per {
                        let n = p * per + i;
                        pool.push(key(n), n).await?.map_err(BoxError::from)?;
                    }
                    Ok::<_, BoxError>(())
                }));
            }
            for t in tasks {
                t.await??;
            }
            out.producers_n = Some(rate(per * a.producers, t.elapsed()));
            pool.close().await;
            fresh.drop_store().await?;
        }

        if a.row(6) {
            // Row 6: bulk enqueue through apalis' `TaskSink::push_all`: the sink buffers the
            // batch's tasks and flushes them in one transaction (Postgres: one multi-row
            // `INSERT … SELECT unnest(…)`), each with its idempotency key as in row 1.
            let fresh = Fresh::new(a.backend, &a.url, "apalis").await?;
            let mut pool = open(&fresh, 10).await?;
            let t = Instant::now();
            let mut start = 0;
            while start < a.bulk {
                let end = (start + a.bulk_batch).min(a.bulk);
                pool.push_all(start..end).await?.map_err(BoxError::from)?;
                start = end;
            }
            out.bulk_enqueue = Some(rate(a.bulk, t.elapsed()));
            let stored = pool.count().await?;
            if stored != a.bulk as i64 {
                return Err(format!("push_all stored {stored} of {} tasks", a.bulk).into());
            }
            pool.close().await;
            fresh.drop_store().await?;
        }

        if !a.row(3) {
            return Ok(out);
        }

        // Row 3: claim + complete, no-op handler.
        let fresh = Fresh::new(a.backend, &a.url, "apalis").await?;
        let mut pool = open(&fresh, a.workers as u32 + 4).await?;
        for i in 0..a.claims {
            pool.push(key(i), i).await?.map_err(BoxError::from)?;
        }
        async fn noop(_n: usize) -> Result<(), BoxDynError> {
            Ok(())
        }
        let t = Instant::now();
        let worker = match &pool {
            Pool::Sqlite(s, _) => {
                let backend = s.clone().poll_with_interval(APALIS_POLL);
                let w = WorkerBuilder::new("bench-worker")
                    .backend(backend)
                    .concurrency(a.workers)
                    .build(noop);
                tokio::spawn(async move { w.run().await.map_err(|e| e.to_string()) })
            }
            Pool::Pg(s, _) => {
                let backend = s.clone().poll_with_interval(APALIS_POLL);
                let w = WorkerBuilder::new("bench-worker")
                    .backend(backend)
                    .concurrency(a.workers)
                    .build(noop);
                tokio::spawn(async move { w.run().await.map_err(|e| e.to_string()) })
            }
        };
        let waited = wait_until(|| async { Ok(pool.done().await? >= a.claims as i64) }).await;
        out.claim_complete = Some(rate(a.claims, t.elapsed()));
        worker.abort();
        waited?;
        pool.close().await;
        fresh.drop_store().await?;
        Ok(out)
    }
}

/// Polls `check` every 2 ms until it holds, failing after [`CLAIM_DEADLINE`].
async fn wait_until<F, Fut>(mut check: F) -> Res<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Res<bool>>,
{
    let deadline = Instant::now() + CLAIM_DEADLINE;
    while !check().await? {
        if Instant::now() > deadline {
            return Err("the claim row did not finish before its deadline".into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

async fn system(
    name: &str,
    version: &str,
    settings: &str,
    a: &Args,
    runs: Vec<Res<RunResult>>,
) -> Value {
    let mut ok = Vec::new();
    let mut errors = Vec::new();
    for r in runs {
        match r {
            Ok(r) => ok.push(r),
            Err(e) => errors.push(e.to_string()),
        }
    }
    let _ = a;
    json!({
        "name": name,
        "version": version,
        "settings": settings,
        "runs": ok,
        "errors": errors,
    })
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
    let backend = match a.backend {
        Engine::Sqlite => "sqlite",
        Engine::Postgres => "postgres",
    };
    let durability = match a.backend {
        Engine::Sqlite => "WAL, synchronous=FULL",
        Engine::Postgres => "synchronous_commit=on",
    };
    let mut river_runs = Vec::new();
    let mut apalis_runs = Vec::new();
    for _ in 0..a.runs {
        river_runs.push(river::run(&a).await);
        apalis_runs.push(apalis_peer::run(&a).await);
    }
    let river_settings = format!(
        "riverqueue {RIVER_VERSION} ({backend}, {durability}); unique by args; fetch_cooldown {} ms; \
         QueueConfig::new({}); bulk: Client::insert_many of {} jobs per call (one transaction, \
         one INSERT per job: the crate has no multi-row or COPY insert)",
        RIVER_FETCH_COOLDOWN.as_millis(),
        a.workers,
        a.bulk_batch
    );
    let apalis_settings = format!(
        "apalis {APALIS_VERSION} + apalis-{backend} {APALIS_VERSION} ({durability}); idempotency_key; \
         batch_size {APALIS_BATCH}; poll interval {} ms; concurrency {}; bulk: TaskSink::push_all \
         of {} tasks per call (one transaction)",
        APALIS_POLL.as_millis(),
        a.workers,
        a.bulk_batch
    );
    let doc = json!({
        "backend": backend,
        "enqueue": a.enqueue,
        "duplicates": a.duplicates,
        "claims": a.claims,
        "workers": a.workers,
        "producers": a.producers,
        "bulk": a.bulk,
        "bulk_batch": a.bulk_batch,
        "rows": a.rows,
        "systems": [
            system("riverqueue", RIVER_VERSION, &river_settings, &a, river_runs).await,
            system("apalis", APALIS_VERSION, &apalis_settings, &a, apalis_runs).await,
        ],
    });
    println!("{doc}");
}

//! apalis with apalis-sqlite and apalis-postgres.

use super::*;
use apalis::prelude::*;

pub(crate) const VERSION: &str = "1.0.0";
/// apalis' fetch batch size for rows 3 and 9 (its default).
const BATCH: usize = 10;
/// apalis' poll interval.
const POLL: Duration = Duration::from_millis(1);
const QUEUE: &str = "bench";
const LATENCY_QUEUE: &str = "bench_latency";

/// Row 9's task: its index and the wall clock (µs) taken just before the insert call.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct LatencyTask {
    i: u64,
    sent_us: u64,
}

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

/// apalis' schema on `fresh`, then a pool of `conns` (on SQLite reopened with
/// synchronous=FULL after setup).
async fn setup(fresh: &Fresh, conns: u32) -> Res<Connections> {
    match fresh.backend {
        Engine::Sqlite => {
            let setup = fresh.sqlite_pool(1).await?;
            apalis_sqlite::SqliteStorage::setup(&setup).await?;
            // setup switched its connection to synchronous=OFF: start over with FULL.
            setup.close().await;
            Ok(Connections::Sqlite(fresh.sqlite_pool(conns).await?))
        }
        Engine::Postgres => {
            let pool = fresh.pg_pool(conns).await?;
            apalis_postgres::PostgresStorage::setup(&pool).await?;
            Ok(Connections::Pg(pool))
        }
    }
}

/// A pool with apalis' schema in place.
enum Connections {
    Sqlite(sqlx::SqlitePool),
    Pg(sqlx::PgPool),
}

impl Connections {
    /// The `usize` storage on [`QUEUE`] fetching `batch` tasks at a time.
    fn storage(&self, batch: usize) -> Pool {
        match self {
            Self::Sqlite(pool) => {
                let config = apalis_sqlite::Config::default()
                    .queue(QUEUE)
                    .batch_size(batch);
                let storage = apalis_sqlite::SqliteStorage::<usize>::new(pool).with_config(config);
                Pool::Sqlite(storage, pool.clone())
            }
            Self::Pg(pool) => {
                let config = apalis_postgres::Config::default()
                    .queue(QUEUE)
                    .batch_size(batch);
                let storage =
                    apalis_postgres::PostgresStorage::<usize>::new(pool).with_config(config);
                Pool::Pg(storage, pool.clone())
            }
        }
    }

    async fn close(&self) {
        match self {
            Self::Sqlite(p) => p.close().await,
            Self::Pg(p) => p.close().await,
        }
    }
}

async fn open(fresh: &Fresh, conns: u32) -> Res<Pool> {
    Ok(setup(fresh, conns).await?.storage(BATCH))
}

async fn counted_noop(_n: usize, progress: Data<Arc<Progress>>) -> Result<(), BoxDynError> {
    progress.hit();
    Ok(())
}

/// Rows 3 and 8: `pool` holds `jobs` tasks; times a worker of `concurrency` from its start until
/// the store has every task done.
async fn drain(pool: &Pool, jobs: usize, concurrency: usize) -> Res<DrainRun> {
    let progress = Progress::new(jobs);
    let window = Window::start()?;
    let mut worker = match pool {
        Pool::Sqlite(s, _) => {
            let backend = s.clone().poll_with_interval(POLL);
            let w = WorkerBuilder::new("bench-worker")
                .backend(backend)
                .data(progress.clone())
                .concurrency(concurrency)
                .build(counted_noop);
            tokio::spawn(async move { w.run().await.map_err(|e| e.to_string()) })
        }
        Pool::Pg(s, _) => {
            let backend = s.clone().poll_with_interval(POLL);
            let w = WorkerBuilder::new("bench-worker")
                .backend(backend)
                .data(progress.clone())
                .concurrency(concurrency)
                .build(counted_noop);
            tokio::spawn(async move { w.run().await.map_err(|e| e.to_string()) })
        }
    };
    let waited = tokio::select! {
        waited = wait_completed(&progress, || async { Ok(pool.done().await? >= jobs as i64) }) => {
            waited
        }
        ended = &mut worker => Err(format!("the worker stopped early: {ended:?}").into()),
    };
    let run = window.finish(concurrency, jobs);
    worker.abort();
    waited?;
    run
}

pub(super) async fn run(a: &Args) -> Res<RunResult> {
    let mut out = RunResult::default();

    if a.row(1) || a.row(2) {
        with_fresh(a, "apalis", async |fresh| {
            let mut pool = open(fresh, 10).await?;
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
            Ok(())
        })
        .await?;
    }

    if a.row(4) {
        out.producers_n = Some(
            with_fresh(a, "apalis", async |fresh| {
                let pool = open(fresh, a.producers as u32 + 2).await?;
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
                let r = rate(per * a.producers, t.elapsed());
                pool.close().await;
                Ok(r)
            })
            .await?,
        );
    }

    if a.row(6) {
        // Row 6: bulk enqueue through apalis' `TaskSink::push_all`: the sink buffers the
        // batch's tasks and flushes them in one transaction (Postgres: one multi-row
        // `INSERT … SELECT unnest(…)`), each with its idempotency key as in row 1.
        out.bulk_enqueue = Some(
            with_fresh(a, "apalis", async |fresh| {
                let mut pool = open(fresh, 10).await?;
                let t = Instant::now();
                let mut start = 0;
                while start < a.bulk {
                    let end = (start + a.bulk_batch).min(a.bulk);
                    pool.push_all(start..end).await?.map_err(BoxError::from)?;
                    start = end;
                }
                let r = rate(a.bulk, t.elapsed());
                let stored = pool.count().await?;
                if stored != a.bulk as i64 {
                    return Err(format!("push_all stored {stored} of {} tasks", a.bulk).into());
                }
                pool.close().await;
                Ok(r)
            })
            .await?,
        );
    }

    if a.row(3) {
        // Row 3: claim + complete, no-op handler; seeded one task per push as before.
        let r = with_fresh(a, "apalis", async |fresh| {
            let mut pool = open(fresh, a.workers as u32 + 4).await?;
            for i in 0..a.claims {
                pool.push(key(i), i).await?.map_err(BoxError::from)?;
            }
            let r = drain(&pool, a.claims, a.workers).await;
            pool.close().await;
            r
        })
        .await?;
        out.claim_complete = Some(r.rate);
    }

    if a.row(8) {
        let mut runs = Vec::new();
        for &c in &a.drain_concurrency {
            runs.push(
                with_fresh(a, "apalis", async |fresh| {
                    let conns = setup(fresh, c as u32 + 4).await?;
                    let mut pool = conns.storage(APALIS_DRAIN_BATCH);
                    let mut start = 0;
                    while start < a.drain {
                        let end = (start + SEED_BATCH).min(a.drain);
                        pool.push_all(start..end).await?.map_err(BoxError::from)?;
                        start = end;
                    }
                    let r = drain(&pool, a.drain, c).await;
                    conns.close().await;
                    r
                })
                .await?,
            );
        }
        out.drain = Some(runs);
    }

    if a.row(9) {
        out.latency = Some(
            with_fresh(a, "apalis", async |fresh| {
                let conns = setup(fresh, 2).await?;
                let r = match &conns {
                    Connections::Sqlite(pool) => {
                        let mut storage = apalis_sqlite::SqliteStorage::<LatencyTask>::new(pool)
                            .with_config(apalis_sqlite::Config::default().queue(LATENCY_QUEUE));
                        latency::measure(a, "apalis", &fresh.target()?, async |i| {
                            let sent_us = latency::now_us();
                            storage.push(LatencyTask { i, sent_us }).await?;
                            Ok(())
                        })
                        .await
                    }
                    Connections::Pg(pool) => {
                        let mut storage = apalis_postgres::PostgresStorage::<LatencyTask>::new(
                            pool,
                        )
                        .with_config(apalis_postgres::Config::default().queue(LATENCY_QUEUE));
                        latency::measure(a, "apalis", &fresh.target()?, async |i| {
                            let sent_us = latency::now_us();
                            storage.push(LatencyTask { i, sent_us }).await?;
                            Ok(())
                        })
                        .await
                    }
                };
                conns.close().await;
                r
            })
            .await?,
        );
    }
    Ok(out)
}

async fn latency_handler(task: LatencyTask) -> Result<(), BoxDynError> {
    latency::report(task.i, task.sent_us);
    Ok(())
}

/// Row 9's worker process.
pub(super) async fn latency_worker(a: &Args, target: &str) -> Res<()> {
    let conns = a.workers as u32 + 4;
    let worker = match a.backend {
        Engine::Sqlite => {
            let pool = sqlite_pool_at(Path::new(target), conns).await?;
            let config = apalis_sqlite::Config::default()
                .queue(LATENCY_QUEUE)
                .batch_size(BATCH);
            let backend = apalis_sqlite::SqliteStorage::<LatencyTask>::new(&pool)
                .with_config(config)
                .poll_with_interval(POLL);
            let w = WorkerBuilder::new("bench-latency-worker")
                .backend(backend)
                .concurrency(a.workers)
                .build(latency_handler);
            tokio::spawn(async move { w.run().await.map_err(|e| e.to_string()) })
        }
        Engine::Postgres => {
            let pool = pg_pool_at(target, conns).await?;
            let config = apalis_postgres::Config::default()
                .queue(LATENCY_QUEUE)
                .batch_size(BATCH);
            let backend = apalis_postgres::PostgresStorage::<LatencyTask>::new(&pool)
                .with_config(config)
                .poll_with_interval(POLL);
            let w = WorkerBuilder::new("bench-latency-worker")
                .backend(backend)
                .concurrency(a.workers)
                .build(latency_handler);
            tokio::spawn(async move { w.run().await.map_err(|e| e.to_string()) })
        }
    };
    latency::ready();
    worker.await?.map_err(BoxError::from)
}

pub(super) fn settings(a: &Args) -> String {
    let (backend, durability) = (a.backend.name(), a.backend.durability());
    let poll = POLL.as_millis();
    let acks = "completions: apalis writes every ack waiting in its event channel (capacity \
                4 x batch_size) in one transaction, no knob";
    crate::settings(
        format!("apalis {VERSION} + apalis-{backend} {VERSION} ({durability})"),
        a,
        &[
            (
                &[1, 2, 4],
                "TaskSink::push_task of one task per call with an idempotency_key".to_owned(),
            ),
            (
                &[6],
                format!(
                    "TaskSink::push_all of {} tasks per call, each with an idempotency_key (one \
                     transaction)",
                    a.bulk_batch
                ),
            ),
            (
                &[3],
                format!(
                    "{} tasks seeded with push_task; concurrency {}, batch_size {BATCH} \
                     (default), poll interval {poll} ms; {acks}; pool {}",
                    a.claims,
                    a.workers,
                    a.workers + 4
                ),
            ),
            (
                &[8],
                format!(
                    "{} tasks seeded with push_all ({SEED_BATCH} per call); per concurrency C of \
                     {}: concurrency C, batch_size {APALIS_DRAIN_BATCH} (one fetch statement \
                     claims that many; apalis waits about the same per fetched batch whatever \
                     its size, so larger is faster: measured on Postgres, 20000 jobs, C=10, 500 \
                     gave 7.4k/s, 1000 13.6k/s, 2000 15k-19k/s, 5000 20k/s; 2000 is where the \
                     gain flattens while a worker's claimed-ahead tasks stay bounded), poll \
                     interval {poll} ms; {acks}; pool C+4",
                    a.drain,
                    list(&a.drain_concurrency)
                ),
            ),
            (
                &[9],
                format!(
                    "worker process: concurrency {}, batch_size {BATCH}, poll interval {poll} ms \
                     (polling, no LISTEN: PostgresStorage::with_pubsub not used), \
                     heartbeat_interval 30 s (default); producer: TaskSink::push of one task per \
                     call at {}/s. Note: apalis-core 1.0.0's IntervalStrategy re-arms its timer \
                     without polling it, so when the fetch in flight comes back empty in that \
                     same poll the worker parks with no timer armed and sleeps until its next \
                     heartbeat (up to heartbeat_interval); under a steady trickle that stall, \
                     not the poll interval, sets the latency",
                    a.workers, a.latency_rate
                ),
            ),
        ],
    )
}

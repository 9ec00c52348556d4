//! riverqueue on SQLite and Postgres.

use super::*;
use riverqueue::{
    Client, InsertOpts, Job, JobArgs, QueueConfig, UniqueOpts, WorkContext, WorkOutcome, Workers,
};

pub(crate) const VERSION: &str = "0.5.0";
/// River's fetch cooldown (its minimum, `FETCH_COOLDOWN_MIN`; the default is 100 ms).
const FETCH_COOLDOWN: Duration = riverqueue::FETCH_COOLDOWN_MIN;
/// Row 9 on SQLite: the fetch poll interval (its minimum, `FETCH_POLL_INTERVAL_MIN`).
const SQLITE_LATENCY_POLL: Duration = riverqueue::FETCH_POLL_INTERVAL_MIN;
/// Jobs per `insert_many` call when row 3 seeds its store.
const ROW3_SEED_BATCH: usize = 500;

#[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
#[river(kind = "bench")]
pub(super) struct BenchJob {
    key: String,
}

/// Row 9's job: its index and the wall clock (µs) taken just before the insert call.
#[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
#[river(kind = "bench_latency")]
struct LatencyJob {
    i: u64,
    sent_us: u64,
}

fn unique() -> InsertOpts {
    InsertOpts::default().with_unique(UniqueOpts::new().with_by_args(true))
}

enum Pool {
    Sqlite(sqlx::SqlitePool),
    Pg(sqlx::PgPool),
}

impl Pool {
    /// A connection pool on `fresh` with River's schema migrated.
    async fn migrated(fresh: &Fresh, conns: u32) -> Res<Self> {
        match fresh.backend {
            Engine::Sqlite => {
                let pool = fresh.sqlite_pool(conns).await?;
                riverqueue::migrate::SqliteMigrator::new(pool.clone())
                    .migrate_up()
                    .await?;
                Ok(Self::Sqlite(pool))
            }
            Engine::Postgres => {
                let pool = fresh.pg_pool(conns).await?;
                riverqueue::migrate::PostgresMigrator::new(pool.clone())
                    .migrate_up()
                    .await?;
                Ok(Self::Pg(pool))
            }
        }
    }

    fn builder(&self) -> riverqueue::ClientBuilder {
        match self {
            Self::Sqlite(p) => Client::builder(p.clone()),
            Self::Pg(p) => Client::builder(p.clone()),
        }
    }

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

/// An insert-only River client on a fresh store.
async fn client(fresh: &Fresh, conns: u32) -> Res<(Client, Pool)> {
    let pool = Pool::migrated(fresh, conns).await?;
    Ok((pool.builder().build()?, pool))
}

async fn insert(client: &Client, k: String) -> Res<(i64, bool)> {
    let r = client.insert(BenchJob { key: k }).opts(unique()).await?;
    Ok((r.id(), r.unique_skipped_as_duplicate))
}

/// Seeds `n` jobs with `insert_many`, `batch` per call.
async fn seed(c: &Client, n: usize, batch: usize) -> Res<()> {
    let jobs: Vec<BenchJob> = (0..n).map(|i| BenchJob { key: key(i) }).collect();
    for chunk in jobs.chunks(batch) {
        c.insert_many(chunk.to_vec()).await?;
    }
    Ok(())
}

/// Rows 3 and 8: seeds `jobs`, then times a worker of `concurrency` from its start until the
/// store has every job completed.
async fn drain(fresh: &Fresh, jobs: usize, concurrency: usize, seed_batch: usize) -> Res<DrainRun> {
    let (c, pool) = client(fresh, concurrency as u32 + 4).await?;
    seed(&c, jobs, seed_batch).await?;
    drop(c);
    let progress = Progress::new(jobs);
    let mut workers = Workers::new();
    {
        let progress = progress.clone();
        workers.add_fn(move |_ctx: WorkContext, _job: Job<BenchJob>| {
            let progress = progress.clone();
            async move {
                progress.hit();
                Ok::<_, BoxError>(WorkOutcome::Complete)
            }
        })?;
    }
    let worker_client = pool
        .builder()
        .workers(workers)
        .fetch_cooldown(FETCH_COOLDOWN)
        .queue("default", QueueConfig::new(concurrency))
        .build()?;
    let window = Window::start()?;
    let mut handle = worker_client.start()?;
    let waited = tokio::select! {
        waited = wait_completed(&progress, || async {
            Ok(pool.completed().await? >= jobs as i64)
        }) => waited,
        ended = handle.wait() => Err(format!("the client stopped early: {ended:?}").into()),
    };
    let run = window.finish(concurrency, jobs);
    handle.stop_and_cancel().await?;
    waited?;
    pool.close().await;
    run
}

pub(super) async fn run(a: &Args) -> Res<RunResult> {
    let mut out = RunResult::default();

    if a.row(1) || a.row(2) {
        with_fresh(a, "river", async |fresh| {
            // Row 1: enqueue, one at a time.
            let (c, pool) = client(fresh, 10).await?;
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
            Ok(())
        })
        .await?;
    }

    if a.row(4) {
        // Row 4: N producers.
        out.producers_n = Some(
            with_fresh(a, "river", async |fresh| {
                let (c, pool) = client(fresh, a.producers as u32 + 2).await?;
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
                let r = rate(per * a.producers, t.elapsed());
                pool.close().await;
                Ok(r)
            })
            .await?,
        );
    }

    if a.row(6) {
        // Row 6: bulk enqueue. `Client::insert_many` is the crate's bulk API: one
        // transaction and one commit per call, unique by args as in row 1.
        out.bulk_enqueue = Some(
            with_fresh(a, "river", async |fresh| {
                let (c, pool) = client(fresh, 10).await?;
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
                let r = rate(a.bulk, t.elapsed());
                if inserted != a.bulk {
                    return Err(format!("insert_many created {inserted} of {} jobs", a.bulk).into());
                }
                pool.close().await;
                Ok(r)
            })
            .await?,
        );
    }

    if a.row(3) {
        // Row 3: claim + complete, no-op handler.
        let r = with_fresh(a, "river", async |fresh| {
            drain(fresh, a.claims, a.workers, ROW3_SEED_BATCH).await
        })
        .await?;
        out.claim_complete = Some(r.rate);
    }

    if a.row(8) {
        // Row 8: drain at each concurrency.
        let mut runs = Vec::new();
        for &c in &a.drain_concurrency {
            runs.push(
                with_fresh(a, "river", async |fresh| {
                    drain(fresh, a.drain, c, SEED_BATCH).await
                })
                .await?,
            );
        }
        out.drain = Some(runs);
    }

    if a.row(9) {
        // Row 9: the producer here, the worker in another process.
        out.latency = Some(
            with_fresh(a, "river", async |fresh| {
                let pool = Pool::migrated(fresh, 2).await?;
                // The inserting client's cooldown paces its insert notifications too.
                let c = pool.builder().fetch_cooldown(FETCH_COOLDOWN).build()?;
                let r = latency::measure(a, "riverqueue", &fresh.target()?, async |i| {
                    let sent_us = latency::now_us();
                    c.insert(LatencyJob { i, sent_us }).await?;
                    Ok(())
                })
                .await;
                pool.close().await;
                r
            })
            .await?,
        );
    }
    Ok(out)
}

/// Row 9's worker process.
pub(super) async fn latency_worker(a: &Args, target: &str) -> Res<()> {
    let mut queue = QueueConfig::new(a.workers);
    let pool = match a.backend {
        Engine::Sqlite => {
            queue = queue.with_fetch_poll_interval(SQLITE_LATENCY_POLL);
            Pool::Sqlite(sqlite_pool_at(Path::new(target), a.workers as u32 + 4).await?)
        }
        Engine::Postgres => Pool::Pg(pg_pool_at(target, a.workers as u32 + 4).await?),
    };
    let mut workers = Workers::new();
    workers.add_fn(|_ctx: WorkContext, job: Job<LatencyJob>| async move {
        latency::report(job.args.i, job.args.sent_us);
        Ok::<_, BoxError>(WorkOutcome::Complete)
    })?;
    let worker_client = pool
        .builder()
        .workers(workers)
        .fetch_cooldown(FETCH_COOLDOWN)
        .queue("default", queue)
        .build()?;
    let mut handle = worker_client.start()?;
    handle.wait_ready().await?;
    latency::ready();
    handle.wait().await?;
    Ok(())
}

pub(super) fn settings(a: &Args) -> String {
    let (backend, durability) = (a.backend.name(), a.backend.durability());
    let cooldown = FETCH_COOLDOWN.as_millis();
    let batching = "River's batching has no knobs: each fetch claims up to the queue's free \
                    worker slots in one statement, and the completer coalesces results for 10 ms \
                    and writes up to 5000 per statement (Postgres: 2 writes at once, SQLite: 1)";
    let wake = match a.backend {
        Engine::Postgres => format!(
            "LISTEN/NOTIFY insert notifications (the inserting client runs fetch_cooldown \
             {cooldown} ms too, which paces its notifications), fetch poll interval 1 s (default)"
        ),
        Engine::Sqlite => format!(
            "no LISTEN on SQLite: River's notification outbox is polled every 100 ms (fixed), \
             fetch poll interval {} ms (its minimum; River adds 10 ms of jitter at most)",
            SQLITE_LATENCY_POLL.as_millis()
        ),
    };
    crate::settings(
        format!("riverqueue {VERSION} ({backend}, {durability})"),
        a,
        &[
            (
                &[1, 2, 4],
                "Client::insert of one job per call, unique by args (UniqueOpts::with_by_args)"
                    .to_owned(),
            ),
            (
                &[6],
                format!(
                    "Client::insert_many of {} jobs per call, unique by args (one transaction, \
                     one INSERT per job: the crate has no multi-row or COPY insert)",
                    a.bulk_batch
                ),
            ),
            (
                &[3],
                format!(
                    "{} jobs seeded with insert_many ({ROW3_SEED_BATCH} per call); \
                     QueueConfig::new({}), fetch_cooldown {cooldown} ms (its minimum; default \
                     100 ms); {batching}; pool {}",
                    a.claims,
                    a.workers,
                    a.workers + 4
                ),
            ),
            (
                &[8],
                format!(
                    "{} jobs seeded with insert_many ({SEED_BATCH} per call); per concurrency C \
                     of {}: QueueConfig::new(C), fetch_cooldown {cooldown} ms; {batching}; \
                     pool C+4",
                    a.drain,
                    list(&a.drain_concurrency)
                ),
            ),
            (
                &[9],
                format!(
                    "worker process: QueueConfig::new({}), fetch_cooldown {cooldown} ms, {wake}; \
                     producer: Client::insert of one job per call at {}/s",
                    a.workers, a.latency_rate
                ),
            ),
        ],
    )
}

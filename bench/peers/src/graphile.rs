//! graphile_worker (the Rust port of graphile-worker), Postgres only.

use super::*;
use graphile_worker::{
    IntoTaskHandlerResult, JobSpec, LocalQueueConfig, TaskHandler, WorkerContext, WorkerOptions,
    WorkerUtils,
};

pub(crate) const VERSION: &str = "0.14.1";
const SCHEMA: &str = "graphile_worker";
/// Row 8's local queue size: graphile-worker's performance preset (concurrentJobs 24,
/// maxPoolSize 25, localQueue size 500, completeJobBatchDelay 0, failJobBatchDelay 0).
const DRAIN_LOCAL_QUEUE: usize = 500;
/// Rows 3 and 8: completions and failures are batched, flushed without waiting (0 ms).
const BATCH_DELAY: Duration = Duration::ZERO;
/// How long a worker may take to shut down once asked.
const SHUTDOWN: Duration = Duration::from_secs(30);

/// Rows 1 to 8's job; the handler only counts itself (when a [`Progress`] is installed).
#[derive(Clone, Debug, Deserialize, Serialize)]
struct BenchJob {
    n: usize,
}

impl TaskHandler for BenchJob {
    const IDENTIFIER: &'static str = "bench";

    async fn run(self, ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        if let Some(progress) = ctx.get_ext::<Arc<Progress>>() {
            progress.hit();
        }
        Ok::<(), String>(())
    }
}

/// Row 9's job: its index and the wall clock (µs) taken just before the insert call.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct LatencyJob {
    i: u64,
    sent_us: u64,
}

impl TaskHandler for LatencyJob {
    const IDENTIFIER: &'static str = "bench_latency";

    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        latency::report(self.i, self.sent_us);
        Ok::<(), String>(())
    }
}

/// A pool on `fresh` and graphile_worker's utilities, with its schema migrated.
async fn utils(fresh: &Fresh, conns: u32) -> Res<(WorkerUtils, sqlx::PgPool)> {
    let pool = fresh.pg_pool(conns).await?;
    let utils = WorkerUtils::new(pool.clone(), SCHEMA);
    utils.migrate().await?;
    Ok((utils, pool))
}

fn keyed(i: usize) -> JobSpec {
    JobSpec::builder().job_key(key(i)).build()
}

/// Rows 3 and 8: seeds `jobs` (`add_jobs`, no job key), then times a worker of `concurrency`
/// with a local queue of `local_queue` from its start until no job is left (graphile_worker
/// deletes a job when it completes).
async fn drain(
    fresh: &Fresh,
    jobs: usize,
    concurrency: usize,
    local_queue: usize,
) -> Res<DrainRun> {
    // The worker's pool (concurrency+1, as graphile-worker recommends) and a connection of the
    // bench's own to watch the store.
    let (utils, pool) = utils(fresh, concurrency as u32 + 1).await?;
    let spec = JobSpec::default();
    let mut start = 0;
    while start < jobs {
        let end = (start + SEED_BATCH).min(jobs);
        let batch: Vec<(BenchJob, &JobSpec)> =
            (start..end).map(|n| (BenchJob { n }, &spec)).collect();
        utils.add_jobs(&batch).await?;
        start = end;
    }
    let watch = fresh.pg_pool(1).await?;
    let left = || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM graphile_worker._private_jobs")
            .fetch_one(&watch)
            .await?;
        Ok::<_, BoxError>(n)
    };
    if left().await? != jobs as i64 {
        return Err(format!("add_jobs did not store {jobs} jobs").into());
    }
    let progress = Progress::new(jobs);
    let worker = WorkerOptions::default()
        .pg_pool(pool.clone())
        .schema(SCHEMA)
        .concurrency(concurrency)
        .local_queue(LocalQueueConfig::default().with_size(local_queue))
        .complete_job_batch_delay(BATCH_DELAY)
        .fail_job_batch_delay(BATCH_DELAY)
        .listen_os_shutdown_signals(false)
        .add_extension(progress.clone())
        .define_job::<BenchJob>()
        .init()
        .await?;
    let worker = Arc::new(worker);
    let window = Window::start()?;
    let mut running = {
        let worker = worker.clone();
        tokio::spawn(async move { worker.run().await.map_err(|e| e.to_string()) })
    };
    let waited = tokio::select! {
        waited = wait_completed(&progress, || async { Ok(left().await? == 0) }) => waited,
        ended = &mut running => Err(format!("the worker stopped early: {ended:?}").into()),
    };
    let run = window.finish(concurrency, jobs);
    stop(&worker, running).await;
    waited?;
    watch.close().await;
    pool.close().await;
    run
}

/// Asks `worker` to shut down and waits for it (aborting it after [`SHUTDOWN`]).
async fn stop(
    worker: &graphile_worker::Worker,
    mut running: tokio::task::JoinHandle<Result<(), String>>,
) {
    worker.request_shutdown();
    if running.is_finished() {
        return;
    }
    if tokio::time::timeout(SHUTDOWN, &mut running).await.is_err() {
        running.abort();
    }
}

pub(super) async fn run(a: &Args) -> Res<RunResult> {
    let mut out = RunResult::default();

    if a.row(1) || a.row(2) {
        with_fresh(a, "graphile", async |fresh| {
            // Row 1: enqueue, one at a time, each with its job key.
            let (utils, pool) = utils(fresh, 10).await?;
            let t = Instant::now();
            let mut ids = Vec::with_capacity(a.enqueue);
            for i in 0..a.enqueue {
                ids.push(*utils.add_job(BenchJob { n: i }, keyed(i)).await?.id());
            }
            out.enqueue = Some(rate(a.enqueue, t.elapsed()));
            out.producers_1 = out.enqueue;

            // Row 2: the same keys again (job_key_mode replace, the default).
            let t = Instant::now();
            let mut same = 0;
            for (i, id) in ids.iter().enumerate().take(a.duplicates) {
                let job = utils.add_job(BenchJob { n: i }, keyed(i)).await?;
                if job.id() == id {
                    same += 1;
                }
            }
            out.duplicate = Some(rate(a.duplicates, t.elapsed()));
            out.duplicate_returns = if same == a.duplicates {
                "the existing job and its id (job_key, job_key_mode replace: the waiting job's \
                 payload, run_at and attempts are overwritten and its revision bumped)"
                    .to_owned()
            } else {
                format!("the existing id for {same} of {} keys", a.duplicates)
            };
            pool.close().await;
            Ok(())
        })
        .await?;
    }

    if a.row(4) {
        out.producers_n = Some(
            with_fresh(a, "graphile", async |fresh| {
                let (utils, pool) = utils(fresh, a.producers as u32 + 2).await?;
                let per = a.enqueue / a.producers;
                let t = Instant::now();
                let mut tasks = Vec::new();
                for p in 0..a.producers {
                    let utils = utils.clone();
                    tasks.push(tokio::spawn(async move {
                        for i in 0..per {
                            let n = p * per + i;
                            utils.add_job(BenchJob { n }, keyed(n)).await?;
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
        // Row 6: `WorkerUtils::add_jobs`, one `add_jobs` statement per call, each job with
        // its own key as in row 1.
        out.bulk_enqueue = Some(
            with_fresh(a, "graphile", async |fresh| {
                let (utils, pool) = utils(fresh, 10).await?;
                let specs: Vec<JobSpec> = (0..a.bulk).map(keyed).collect();
                let t = Instant::now();
                let mut start = 0;
                while start < a.bulk {
                    let end = (start + a.bulk_batch).min(a.bulk);
                    let batch: Vec<(BenchJob, &JobSpec)> =
                        (start..end).map(|n| (BenchJob { n }, &specs[n])).collect();
                    utils.add_jobs(&batch).await?;
                    start = end;
                }
                let r = rate(a.bulk, t.elapsed());
                let stored: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM graphile_worker._private_jobs")
                        .fetch_one(&pool)
                        .await?;
                if stored != a.bulk as i64 {
                    return Err(format!("add_jobs stored {stored} of {} jobs", a.bulk).into());
                }
                pool.close().await;
                Ok(r)
            })
            .await?,
        );
    }

    if a.row(3) {
        let r = with_fresh(a, "graphile", async |fresh| {
            drain(fresh, a.claims, a.workers, a.workers + 1).await
        })
        .await?;
        out.claim_complete = Some(r.rate);
    }

    if a.row(8) {
        let mut runs = Vec::new();
        for &c in &a.drain_concurrency {
            runs.push(
                with_fresh(a, "graphile", async |fresh| {
                    drain(fresh, a.drain, c, DRAIN_LOCAL_QUEUE).await
                })
                .await?,
            );
        }
        out.drain = Some(runs);
    }

    if a.row(9) {
        out.latency = Some(
            with_fresh(a, "graphile", async |fresh| {
                let (utils, pool) = utils(fresh, 2).await?;
                let r = latency::measure(a, "graphile_worker", &fresh.target()?, async |i| {
                    let sent_us = latency::now_us();
                    utils
                        .add_job(LatencyJob { i, sent_us }, JobSpec::default())
                        .await?;
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

/// Row 9's worker process: graphile_worker's defaults (its own pool of 20, LISTEN/NOTIFY, poll
/// interval 1 s, no local queue, no batching) with concurrency = `--workers`.
pub(super) async fn latency_worker(a: &Args, target: &str) -> Res<()> {
    let worker = WorkerOptions::default()
        .database_url(target)
        .schema(SCHEMA)
        .concurrency(a.workers)
        .listen_os_shutdown_signals(false)
        .define_job::<LatencyJob>()
        .init()
        .await?;
    let worker = Arc::new(worker);
    let running = {
        let worker = worker.clone();
        tokio::spawn(async move { worker.run().await.map_err(|e| e.to_string()) })
    };
    latency::ready();
    running.await?.map_err(BoxError::from)
}

pub(super) fn settings(a: &Args) -> String {
    let throughput = |queue: &str, pool: &str| {
        format!(
            "local_queue size {queue}, complete_job_batch_delay 0, fail_job_batch_delay 0 \
             (batched completions flushed without waiting), poll interval 1 s (default; \
             LISTEN/NOTIFY on), pool {pool}"
        )
    };
    crate::settings(
        format!(
            "graphile_worker {VERSION} (Rust, postgres, synchronous_commit=on; schema {SCHEMA} \
             in a fresh database)"
        ),
        a,
        &[
            (
                &[1, 2, 4],
                "WorkerUtils::add_job of one job per call with a job_key (job_key_mode replace, \
                 the default: a duplicate key updates the waiting job and returns it)"
                    .to_owned(),
            ),
            (
                &[6],
                format!(
                    "WorkerUtils::add_jobs of {} jobs per call, each with a distinct job_key (one \
                     add_jobs statement, one commit)",
                    a.bulk_batch
                ),
            ),
            (
                &[3],
                format!(
                    "{} jobs seeded with add_jobs ({SEED_BATCH} per call, no job_key); \
                     concurrency {}, {}",
                    a.claims,
                    a.workers,
                    throughput(
                        &format!(
                            "{} (concurrency+1, graphile's recommendation)",
                            a.workers + 1
                        ),
                        &(a.workers + 1).to_string()
                    )
                ),
            ),
            (
                &[8],
                format!(
                    "{} jobs seeded with add_jobs ({SEED_BATCH} per call, no job_key); per \
                     concurrency C of {}: concurrency C, {}",
                    a.drain,
                    list(&a.drain_concurrency),
                    throughput(
                        &format!(
                            "{DRAIN_LOCAL_QUEUE} (graphile-worker's performance preset: \
                             concurrentJobs 24, maxPoolSize 25, localQueue size 500, batch \
                             delays 0)"
                        ),
                        "C+1"
                    )
                ),
            ),
            (
                &[9],
                format!(
                    "worker process: WorkerOptions defaults but concurrency {}: LISTEN/NOTIFY, \
                     poll interval 1 s, no local queue, no completion batching, its own pool of \
                     20 (max_pg_conn default); producer: WorkerUtils::add_job of one job per \
                     call at {}/s",
                    a.workers, a.latency_rate
                ),
            ),
        ],
    )
}

//! What the drains of rows 8 and 11 share: the queue filled in bulk before the clock, then one
//! `Consumer` with a no-op handler, timed from its start until every run is recorded as done,
//! with the machine's and this process's CPU over exactly that window.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::spool::{Consumer, ConsumerBuilder, EnqueueItem, Job, Outcome};
use cairn::{ConsumerId, QueueName, RunState, Spool};

use super::super::cpu::{CpuMeter, CpuUse};
use super::super::setup::store_err;
use super::rates::rate;
use super::runs::DrainRun;

/// Runs per `enqueue_many` call while a drain's queue is filled (before the clock).
const FILL_BATCH: usize = 1_000;

/// How long a drain may take before the bench gives up on it.
const DRAIN_DEADLINE: Duration = Duration::from_secs(600);

/// Enqueues `items` on `queue`, [`FILL_BATCH`] per `enqueue_many` call, each awaited before the
/// next; every item must create a new run.
pub(super) async fn fill(
    spool: &dyn Spool,
    queue: &QueueName,
    items: &[EnqueueItem],
) -> Result<(), String> {
    let mut created = 0usize;
    for chunk in items.chunks(FILL_BATCH) {
        let done = spool
            .enqueue_many(queue, chunk.to_vec())
            .await
            .map_err(store_err)?;
        created += done.iter().filter(|e| e.created).count();
    }
    if created != items.len() {
        return Err(format!(
            "filling the queue before the drain created {created} of {} runs",
            items.len()
        ));
    }
    Ok(())
}

/// The consumer of a timed drain.
#[derive(Clone, Copy, Debug)]
pub(super) struct DrainSettings {
    /// Handlers running at once.
    pub(super) concurrency: u64,
    /// Claimed runs waiting for a free slot (a claim takes up to concurrency + prefetch).
    pub(super) prefetch: u64,
}

/// A finished timed drain. Its consumer is still running, so that what the caller reads
/// about the drain's window (Postgres' WAL position) is read before the consumer stops.
pub(super) struct Drained {
    took: Duration,
    cpu: CpuUse,
    jobs: u64,
    concurrency: u64,
    consumer: Consumer,
}

/// Starts a `Consumer` (`name`, `settings`, the other settings the defaults, a no-op handler)
/// on `queue` and the clock with it, and waits until the consumer has recorded `jobs` runs as
/// succeeded.
pub(super) async fn drain(
    spool: Arc<dyn Spool>,
    queue: &QueueName,
    name: &str,
    settings: DrainSettings,
    jobs: u64,
) -> Result<Drained, String> {
    let t = Instant::now();
    let cpu = CpuMeter::start();
    let consumer = ConsumerBuilder::new(
        spool,
        queue.clone(),
        ConsumerId::new(name).map_err(store_err)?,
    )
    .concurrency(usize::try_from(settings.concurrency).map_err(|e| e.to_string())?)
    .prefetch(usize::try_from(settings.prefetch).map_err(|e| e.to_string())?)
    .spawn(|_job: Job| async { Outcome::Done })
    .await
    .map_err(store_err)?;
    let deadline = Instant::now() + DRAIN_DEADLINE;
    loop {
        let done = consumer
            .stats()
            .settled
            .get(&RunState::Succeeded)
            .copied()
            .unwrap_or(0);
        if done >= jobs {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the drain did not finish in {} s ({done} of {jobs} done)",
                DRAIN_DEADLINE.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let took = t.elapsed();
    Ok(Drained {
        took,
        cpu: cpu.stop(jobs),
        jobs,
        concurrency: settings.concurrency,
        consumer,
    })
}

impl Drained {
    /// The drain's figures (`wal_bytes`: what the caller measured over the same window).
    pub(super) fn run(&self, wal_bytes: Option<f64>) -> DrainRun {
        let secs = self.took.as_secs_f64();
        DrainRun {
            concurrency: self.concurrency,
            jobs: self.jobs,
            rate: rate(self.jobs, self.took),
            busy_cpu_s: self.cpu.busy_cores.map(|b| b * secs),
            own_cpu_s: self
                .cpu
                .process_per_op
                .map(|d| d.as_secs_f64() * self.jobs as f64),
            wal_bytes,
        }
    }

    /// Shuts the consumer down; an unclean shutdown or a handler error fails the drain.
    pub(super) async fn stop(self) -> Result<(), String> {
        let report = self.consumer.shutdown().await;
        if !report.is_clean() || report.stats.errors > 0 {
            return Err(format!(
                "the drain consumer did not finish cleanly: {report:?}"
            ));
        }
        Ok(())
    }
}

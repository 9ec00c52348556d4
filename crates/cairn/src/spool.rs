//! The spool: a durable, interprocess-safe work queue — what a service uses of it.
//!
//! A *run* is one submission to a *queue*, identified within it by a [`DedupKey`]: enqueueing
//! the same `(queue, key)` again — from any process — returns the same [`RunId`]. A consumer
//! *claims* runs under a lease ([`LeaseToken`] + expiry), extends it with heartbeats and
//! finishes with `ack` or `nack`; an expired lease makes the run claimable again after backoff
//! ([`SpoolConfig`]). Runs carry an append-only event stream and write-once facts; retention
//! ([`Spool::retention_pass`]) bounds what finished work leaves behind. Every method, its
//! contract and its errors are on the [`Spool`] trait; [`crate::Store::spool`] hands one out.
//!
//! [`ConsumerBuilder`] runs the worker loop a service needs on top of any spool: claims as
//! work arrives ([`Spool::subscribe`]), heartbeats while a [`Job`] runs, settles it from the
//! handler's [`Outcome`], and shuts down in order ([`Consumer::shutdown`]). [`MemorySpool`] is
//! the in-memory reference model, handy in a service's own tests. [`Scheduler`] fires the
//! stored cron schedules ([`Schedule`], [`Spool::put_schedule`]) of any spool: each tick is
//! enqueued once, however many schedulers run.
//!
//! This module is the spool's public surface: the trait, its values, its limits and the input
//! checks a front end runs before calling it ([`check_payload`], [`check_limit`],
//! [`check_lease`]). The decisions every backend shares (state transitions, token checks,
//! retention planning) and the legacy replay are not part of it; `cairn import --legacy` is
//! [`crate::legacy`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> cairn::Result<()> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use cairn::spool::{
//!     ConsumerId, DedupKey, EnqueueOptions, ManualClock, MemorySpool, QueueName, RunState, Spool,
//! };
//!
//! let spool: Arc<dyn Spool> = Arc::new(MemorySpool::new(Arc::new(ManualClock::default())));
//! let gate = QueueName::new("gate")?;
//! let key = DedupKey::from_parts(["gate", "refs/heads/main", "3f2a"])?;
//! let first = spool.enqueue(&gate, &key, b"{}".to_vec(), EnqueueOptions::default()).await?;
//! let again = spool.enqueue(&gate, &key, b"{}".to_vec(), EnqueueOptions::default()).await?;
//! assert!(first.created && !again.created && again.run_id == first.run_id);
//!
//! let me = ConsumerId::new("worker-1")?;
//! for run in spool.claim(&gate, &me, Duration::from_secs(30), 10).await? {
//!     spool.ack(run.run_id, run.token).await?;
//! }
//! assert_eq!(spool.run(first.run_id).await?.unwrap().state, RunState::Succeeded);
//! # Ok(())
//! # }
//! ```
//!
//! Backend-only decisions are not reachable from here:
//!
//! ```compile_fail
//! use cairn::spool::transition;
//! ```
//!
//! ```compile_fail
//! use cairn::spool::legacy;
//! ```
//!
//! Nor is the jitter's seed (a run's retries are jittered by
//! [`BackoffPolicy::delay_for`]):
//!
//! ```compile_fail
//! use cairn::spool::jitter_seed;
//! ```

// The trait, and the wake-up handle of `Spool::subscribe`.
pub use cairn_core::spool::{Spool, Wakeup};

// Ids and names.
pub use cairn_core::spool::{
    ConsumerId, DedupKey, FactName, LeaseToken, QueueName, RunEventId, RunId, SupersedeGroup,
};

// Time: every time the spool uses comes from its clock.
pub use cairn_core::spool::{Clock, ManualClock, SystemClock, Timestamp};

// What goes in and comes out of the trait's methods.
pub use cairn_core::spool::{
    Action, CancelOutcome, Claimed, CloseOutcome, EnqueueItem, EnqueueOptions, Enqueued,
    EventAppended, EventStream, ExistingRun, FactOutcome, Heartbeat, ImportMarker, ImportSource,
    ImportedEvent, ImportedRun, LeaseInfo, NackKind, Nacked, QueueStats, RunEvent, RunFilter,
    RunImportOutcome, RunInfo, RunState, SpoolStats, Unparked,
};

// The operator's way out of `parked`: one run ([`Spool::retry_parked`], [`Spool::discard`]),
// or a queue's parked runs ([`retry_parked_runs`]).
pub use cairn_core::spool::{
    check_operator, check_producer_event_id, retry_parked_runs, BulkRetry, BULK_RETRY_PAGE,
    MAX_FAILED_RUNS_LISTED, MAX_OPERATOR_LEN, OPERATOR_EVENT_PREFIX,
};

// Configuration: the retry backoff (jittered per run by `BackoffPolicy::delay_for`) and
// retention.
pub use cairn_core::spool::{
    BackoffPolicy, RetentionBudget, RetentionPolicy, RetentionReport, SpoolConfig,
};

// The retention loop a service runs beside its consumers (`cairn serve` runs the same).
pub use cairn_core::spool::{
    RetentionHandle, RetentionWorker, DEFAULT_RETENTION_INTERVAL, DEFAULT_RETENTION_PASS_BUDGET,
    RETENTION_CATCH_UP, RETENTION_PASSES_METRIC, RETENTION_REMOVED_METRIC,
};

// The consumer: the worker loop a service runs.
pub use cairn_core::spool::{
    Consumer, ConsumerBuilder, ConsumerStats, Handler, Job, Outcome, ShutdownReport, StopReason,
    StopSignal, CLAIMED_METRIC, CONSUMER_OUTCOMES, DEFAULT_CLAIM_COALESCE, DEFAULT_CONSUMER_LEASE,
    DEFAULT_POLL_INTERVAL, DEFAULT_SHUTDOWN_TIMEOUT, HANDLED_METRIC, HANDLER_SECONDS_METRIC,
};

// Flow control of a queue (pause and resume, concurrency and rate limits:
// `Spool::set_queue_paused`, `Spool::set_queue_limits`, …) and the trace context a run carries.
pub use cairn_core::spool::{
    check_limits, is_bidi_control, PartitionKey, QueueFlow, QueueLimits, RateLimit, TraceParent,
    MAX_FLOW_LIMIT, MAX_PARTITION_KEY, MAX_RATE_INTERVAL, MIN_RATE_INTERVAL,
};

// Schedules: cron expressions stored in the store ([`Spool::put_schedule`]), each tick
// enqueued once across processes; the scheduler loop that fires them.
pub use cairn_core::spool::{
    check_schedule, next_tick, schedule_tick_key, schedule_tick_of, CatchUp, CronTicks, Schedule,
    ScheduleFired, ScheduleFiring, ScheduleInfo, ScheduleName, Scheduler, SchedulerHandle,
    SchedulerRound, SchedulerStats, DEFAULT_SCHEDULER_GRACE, DEFAULT_SCHEDULER_POLL, MAX_CATCH_UP,
    MAX_CRON_LEN, MAX_FIRE_TICKS, MAX_SCHEDULE_NAME,
};

// The in-memory reference model.
pub use cairn_core::spool::MemorySpool;

// Limits, and the checks a front end runs on its input before calling the spool.
pub use cairn_core::spool::{
    check_enqueue_batch, check_lease, check_limit, check_payload, check_retry_delay,
    DEFAULT_MAX_ATTEMPTS, MAX_ACK_IDS, MAX_ATTEMPTS_LIMIT, MAX_BATCH, MAX_CONSUMER_LEN,
    MAX_DEDUP_KEY, MAX_ENQUEUE_BATCH, MAX_ENQUEUE_BATCH_BYTES, MAX_FACT_NAME, MAX_FACT_VALUE,
    MAX_IMPORT_DESCRIPTION, MAX_LEASE, MAX_QUEUE_LEN, MAX_REASON_LEN, MAX_RUN_EVENT_ID,
    MAX_RUN_EVENT_PAYLOAD, MAX_RUN_PAYLOAD, MAX_SUPERSEDE_GROUP, MIN_LEASE,
};

//! The spool: a durable, interprocess-safe work queue.
//!
//! A *run* is one submission to a *queue*, identified within it by a [`DedupKey`]: enqueueing
//! the same `(queue, key)` again — from any process — returns the same [`RunId`]. A consumer
//! *claims* runs under a lease ([`LeaseToken`] + expiry), extends it with heartbeats and
//! finishes with `ack` or `nack`; an expired lease makes the run claimable again after backoff.
//! Runs carry an append-only event stream and write-once facts. Retention bounds what finished
//! work leaves behind.
//!
//! A run's producer *closes* it ([`Spool::close_run`]) after its last event: from then on, and
//! once the run finished, appends are refused ([`crate::Error::RunClosed`]), so a consumer that
//! sees a closed run with no unacknowledged event has delivered all of them ([`EventStream`]).
//!
//! ```text
//! queued ──claim──▶ claimed ──ack──▶ succeeded
//!   ▲ │                │ ├─nack(failed)──▶ failed
//!   │ │                │ ├─nack(permanent) / attempts exhausted / last lease expired──▶ parked
//!   │ │                │ └─nack or expiry after a cancel request──▶ canceled
//!   │ │                ├─nack(retryable), lease expiry: back to queued after backoff
//!   │ │                └─release: back to queued, the attempt given back
//!   │ ├─cancel──▶ canceled
//!   │ └─newer run of its supersede group──▶ superseded
//!   └──────retry_parked (an operator)──── parked ──discard (an operator)──▶ canceled
//! ```
//!
//! This module holds the [`Spool`] trait, its value types, the pure decisions every backend
//! shares ([`transition`], [`backoff`], [`RetentionPass`]), the [`Clock`] all spool time comes
//! from, and [`MemorySpool`], the in-memory reference model the conformance suite compares real
//! backends with. On top of any spool: [`Consumer`], the worker loop a service runs
//! ([`ConsumerBuilder`]), [`Scheduler`], the loop that fires stored cron schedules
//! ([`Schedule`]: each tick enqueued once across processes), and [`legacy`], the planner that
//! reads the replaced system's state directory for [`Spool::import_runs`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> cairn_core::Result<()> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use cairn_core::spool::{ConsumerId, DedupKey, EnqueueOptions, QueueName, RunState};
//! use cairn_core::{ManualClock, MemorySpool, Spool};
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
//!     // … do the work, heartbeating while it runs …
//!     spool.ack(run.run_id, run.token).await?;
//! }
//! assert_eq!(spool.run(first.run_id).await?.unwrap().state, RunState::Succeeded);
//! # Ok(())
//! # }
//! ```
//!
//! # For backend authors
//! - Read `now` from the spool's [`Clock`] once per operation and pass it into SQL; never use
//!   the engine's `now()`, or the suite's simulated clock cannot drive leases and retention.
//! - Create ids with [`RunId::generate`] before writing: enqueue is then one upsert on
//!   `(queue, dedup_key)` that returns the stored id, and `created` is "the returned id is the
//!   one generated". Superseding adds one `UPDATE` in the same transaction (or a CTE).
//! - Keep one `due_at` column: the not-before time of a queued run, and lease expiry plus
//!   backoff ([`backoff`] with [`jitter_seed`]) of a claimed one. A claim is then one indexed
//!   range over `(queue, state ∈ {queued, claimed}, due_at ≤ now)` ordered by
//!   `priority DESC, due_at, enqueue order`, taking up to `limit` rows in one statement
//!   (Postgres `FOR UPDATE SKIP LOCKED`).
//! - Decide every state change with [`transition`], [`nack_action`] and [`expiry_action`];
//!   check tokens with [`check_token`]; check input with the checks of `checks.rs`
//!   ([`check_enqueue`], [`check_enqueue_batch`], [`check_import`], [`check_lease`], …) before
//!   reading or writing anything. These decision functions are the backend contract: exported
//!   for the backend crates, not re-exported by the facade `cairn`.

mod backoff;
mod checks;
mod clock;
mod consumer;
mod contract;
mod dedup;
mod flow;
mod ids;
mod import;
pub mod legacy;
mod limits;
mod memory;
mod operator;
#[cfg(feature = "otel")]
mod otel;
mod retention;
mod retention_worker;
mod schedule;
mod scheduler;
mod state;
mod timestamp;
mod transition;
mod types;

pub use backoff::{backoff, backoff_ceiling, jitter_seed, BackoffPolicy};
pub use checks::{
    check_append, check_enqueue, check_enqueue_batch, check_lease, check_limit, check_payload,
    check_producer_key, check_release_delay, check_retry_delay, clip_reason, is_bidi_control,
    CheckedEnqueue, SCHEDULE_KEY_PART,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use consumer::{
    Consumer, ConsumerBuilder, ConsumerStats, Handler, Job, Outcome, ShutdownReport, StopReason,
    StopSignal, CLAIMED_METRIC, CONSUMER_OUTCOMES, DEFAULT_CLAIM_COALESCE, DEFAULT_CONSUMER_LEASE,
    DEFAULT_POLL_INTERVAL, DEFAULT_SHUTDOWN_TIMEOUT, HANDLED_METRIC, HANDLER_SECONDS_METRIC,
};
pub use contract::{Spool, Wakeup};
pub use dedup::{DedupKey, SupersedeGroup, MAX_DEDUP_KEY, MAX_SUPERSEDE_GROUP};
pub use flow::{
    check_limits, claim_allowance, flow_revision_missing, pick_within_partitions,
    rate_window_start, QueueFlow, QueueLimits, RateLimit, FLOW_REVISION, MAX_FLOW_LIMIT,
    MAX_RATE_INTERVAL, MIN_RATE_INTERVAL,
};
pub use ids::{
    ConsumerId, FactName, LeaseToken, PartitionKey, QueueName, RunEventId, RunId, ScheduleName,
    TraceParent, MAX_CONSUMER_LEN, MAX_FACT_NAME, MAX_PARTITION_KEY, MAX_QUEUE_LEN,
    MAX_RUN_EVENT_ID, MAX_SCHEDULE_NAME,
};
pub use import::{
    check_import, ExistingRun, ImportMarker, ImportSource, ImportedEvent, ImportedRun,
    RunImportOutcome, MAX_IMPORT_DESCRIPTION,
};
pub use limits::{
    DEFAULT_MAX_ATTEMPTS, MAX_ACK_IDS, MAX_ATTEMPTS_LIMIT, MAX_BATCH, MAX_ENQUEUE_BATCH,
    MAX_ENQUEUE_BATCH_BYTES, MAX_FACT_VALUE, MAX_LEASE, MAX_REASON_LEN, MAX_RUN_EVENT_PAYLOAD,
    MAX_RUN_PAYLOAD, MIN_LEASE,
};
pub use memory::MemorySpool;
pub use operator::{
    check_operator, check_producer_event_id, operator_event, retry_parked_runs, BulkRetry,
    BULK_RETRY_PAGE, MAX_FAILED_RUNS_LISTED, MAX_OPERATOR_LEN, OPERATOR_EVENT_PREFIX,
};
pub use retention::{
    plan_event_batch, plan_run_batch, EventBatch, EventMeta, RetentionBudget, RetentionPass,
    RetentionPolicy, RetentionReport, RetentionStep, RunMeta,
};
pub use retention_worker::{
    RetentionHandle, RetentionWorker, DEFAULT_RETENTION_INTERVAL, DEFAULT_RETENTION_PASS_BUDGET,
    RETENTION_CATCH_UP, RETENTION_PASSES_METRIC, RETENTION_REMOVED_METRIC,
};
pub use schedule::{
    check_fire_ticks, check_schedule, due_ticks, next_tick, schedule_tick_key, schedule_tick_of,
    schedules_need_revision, CatchUp, CronTicks, Schedule, ScheduleFired, ScheduleInfo,
    MAX_CATCH_UP, MAX_CRON_LEN, MAX_FIRE_TICKS,
};
pub use scheduler::{
    ScheduleFiring, Scheduler, SchedulerHandle, SchedulerRound, SchedulerStats,
    DEFAULT_SCHEDULER_GRACE, DEFAULT_SCHEDULER_POLL,
};
pub use state::{closed_reason, Action, EventStream, RunState};
pub use timestamp::Timestamp;
pub use transition::{
    check_token, exhausted_park_reason, expired_park_reason, expiry_action, nack_action,
    release_action, transition,
};
pub use types::{
    keep_events_within, CancelOutcome, Claimed, CloseOutcome, EnqueueItem, EnqueueOptions,
    Enqueued, EventAppended, FactOutcome, Heartbeat, LeaseInfo, NackKind, Nacked, QueueStats,
    RunEvent, RunFilter, RunInfo, SpoolConfig, SpoolStats, Unparked,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    /// Spool errors say what happened and what to do, and never print a fact's value.
    #[test]
    fn spool_errors_say_what_to_do() {
        let run = RunId([7; 16]);
        let msgs = [
            Error::UnknownRun { run }.to_string(),
            Error::LeaseLost { run }.to_string(),
            Error::InvalidTransition {
                from: RunState::Succeeded,
                action: Action::Cancel,
            }
            .to_string(),
            Error::FactConflict {
                name: FactName::new("review").unwrap(),
                existing: b"secret-value".to_vec(),
            }
            .to_string(),
        ];
        assert!(msgs[0].contains(&run.to_string()) && msgs[0].contains("check the id"));
        assert!(msgs[1].contains("stop working on it"));
        assert!(msgs[2].starts_with("cannot cancel a run that is succeeded"));
        assert!(msgs[3].contains("review") && !msgs[3].contains("secret-value"));
    }

    /// The append rule refuses exactly terminal or closed runs, and says which.
    #[test]
    fn appends_are_refused_for_closed_or_finished_runs() {
        let run = RunId([7; 16]);
        for state in RunState::ALL {
            for stream in [
                EventStream::Open,
                EventStream::Closed,
                EventStream::Unmarked,
            ] {
                let refused = state.is_terminal() || stream == EventStream::Closed;
                assert_eq!(
                    check_append(run, state, stream).is_err(),
                    refused,
                    "{state} {stream:?}"
                );
            }
        }
        let closed = check_append(run, RunState::Queued, EventStream::Closed).unwrap_err();
        assert!(
            closed.to_string().contains("its producer closed it"),
            "{closed}"
        );
        let done = check_append(run, RunState::Canceled, EventStream::Open).unwrap_err();
        assert!(done.to_string().contains("it is canceled"), "{done}");
        assert!(done.to_string().contains("nothing was appended"), "{done}");
    }
}

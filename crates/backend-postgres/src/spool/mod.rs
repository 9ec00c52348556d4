//! [`PgSpool`]: the spool ([`cairn_core::Spool`]) on PostgreSQL.
//!
//! The spool lives in the store's schema (revisions `0002_spool`, `0003_spool_import` and
//! `0005` of cairn's migration set: `spool_run`, `spool_event`, `spool_fact`, the import
//! markers and the claim columns) and runs on the store's own pool ([`PgSpool::from_store`]).
//! It follows [`cairn_core::MemorySpool`] exactly: every state change is decided by the core's
//! pure functions (`transition`, `nack_action`, `expiry_action`, `check_token`, the backoff
//! with its per-run jitter), either in Rust on values read from the row and written back with
//! a compare-and-set (a statement that applies only if the row still holds what was read), or,
//! for the common claim, by the same function of the same inputs in SQL; so concurrent writers
//! from any process never lose an update.
//!
//! One module per step, the same files and function names as the SQLite spool: `enqueue`
//! (`enqueue_tx`), `claim` (`claim_tx`), `settle` (`heartbeat_tx`, `ack_tx`, `nack_tx`,
//! `release_tx`, `cancel_tx`), `events` (`append_event_tx`, `close_run_tx`, `events_tx`,
//! `acknowledge_events_tx`, `set_fact_tx`, `facts_tx`), `read` (`run_tx`, `runs_tx`,
//! `stats_tx`, `next_due_q`), `import` (`import_runs_tx`), `retention`
//! (`retention_events_tx`, `retention_runs_tx`), `row` (conversions), `sql` (statements),
//! `wake` (wake-up); and, Postgres only, `lane`: the batching lane enqueues and acks share.
//!
//! Statements per operation:
//! - enqueue: one. Without a supersede group, concurrent enqueues of one spool share one
//!   multi-row `INSERT … ON CONFLICT DO NOTHING RETURNING` (the enqueue lane) and a lone one
//!   runs `INSERT … ON CONFLICT (queue, dedup_key) DO NOTHING` with the read of the key's
//!   existing run and the `NOTIFY` in the same statement (again on a new snapshot when the
//!   key's run committed after the statement's); with a supersede group, that statement also
//!   supersedes the group's queued runs and runs after the group's advisory lock in one
//!   transaction, so enqueues of one group supersede each other in commit order;
//! - claim: one statement when no expired lease of the queue is due and every run taken carries
//!   its next attempt's jitter (`claim_attempt`, `claim_jitter`, written by enqueue, nack and
//!   release): it locks (`FOR NO KEY UPDATE SKIP LOCKED`), writes and returns the runs and
//!   computes each new `due_at` (lease expiry plus backoff) in SQL. Otherwise one transaction
//!   of two statements — one read that locks both the expired leases to settle and the next
//!   `limit` due runs, and one `UPDATE … FROM unnest(…)` that writes every picked run, decided
//!   in Rust between the two;
//! - ack: one statement; concurrent acks of one spool share one (the ack lane);
//! - heartbeat, nack, cancel: one read and one compare-and-set write; release: one read and one
//!   compare-and-set write of its own;
//! - append_event, close_run, acknowledge_events, set_fact: one statement each (a fact conflict
//!   reads the stored value with a second);
//! - retention: each batch is one transaction of one read and one `DELETE`;
//! - import_runs: one transaction under the source's advisory lock;
//! - schedules (`schedule`): put and remove one statement each; a fire one transaction that
//!   locks the schedule's row, enqueues each due tick with the unbatched enqueue statement
//!   (its `spool_ready` row and `NOTIFY` included) and moves the high-water mark.
//!
//! Wake-up: an enqueue that creates a run, a retryable nack, a release and an import of queued
//! runs `NOTIFY` the queue's channel (`cairn_spool_` + 16 hex digits derived from schema and
//! queue, so stores in different schemas never wake each other) inside their own statement or
//! transaction. [`cairn_core::Spool::subscribe`] registers with the spool's one listening
//! connection (`wake`), which `LISTEN`s on every subscribed queue's channel and reconnects by
//! itself; a subscription also returns every [`WAKE_POLL`] (see [`PgSpool::set_wake_poll`]) as
//! a fallback poll.
//!
//! Time comes from the spool's [`Clock`], never from the server's `now()`. Each operation reads
//! it once, here (or, inside a transaction, in `crate::tx`), and hands `now` to its step, as
//! the SQLite spool does; the one step that reads it again is `enqueue_many_tx`, for a round it
//! runs again after a deadlock (see there).

/// A write the spool sends outside a transaction of its own (`$on`: the executor it runs on),
/// committed before the operation goes on. On a direct connection `$on` is the pool, as always
/// (autocommit). Behind a transaction-mode pooler every checkout is a transaction
/// (`crate::pooler`) that would commit only when its connection is given back — after the
/// operation answered, so its caller's next read could miss the write; there `$on` is one
/// checkout, committed right after `$body`.
macro_rules! autocommit {
    ($s:expr, |$on:ident| $body:expr) => {{
        match $s.pooled_checkout().await {
            Err(e) => Err(e),
            Ok(Some(mut checkout)) => {
                let done = {
                    let $on = &mut *checkout;
                    $body
                };
                $s.finish(checkout, done).await
            }
            Ok(None) => {
                let $on = $s.pool();
                $body
            }
        }
    }};
}

mod batched;
mod claim;
pub(crate) mod enqueue;
pub(crate) mod events;
mod flow;
mod handle;
#[cfg(feature = "testkit")]
mod hooks;
mod import;
mod keys;
mod lane;
mod layout;
mod read;
mod retention;
mod row;
mod schedule;
pub(crate) mod settle;
mod sql;
mod sql_enqueue;
mod sql_flow;
mod sql_record;
#[cfg(feature = "testkit")]
pub mod testkit;
mod wake;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::spool::{
    check_enqueue, check_enqueue_batch, check_limits, check_retry_delay, Action, CancelOutcome,
    CheckedEnqueue, Claimed, Clock, CloseOutcome, ConsumerId, DedupKey, EnqueueItem,
    EnqueueOptions, Enqueued, EventAppended, FactName, FactOutcome, Heartbeat, ImportSource,
    ImportedRun, LeaseToken, NackKind, Nacked, QueueFlow, QueueLimits, QueueName, RetentionBudget,
    RetentionPass, RetentionPolicy, RetentionReport, RetentionStep, RunEvent, RunEventId,
    RunFilter, RunId, RunImportOutcome, RunInfo, Spool, SpoolStats, Timestamp, Unparked, Wakeup,
};
use cairn_core::spool::{
    check_fire_ticks, check_schedule, Schedule, ScheduleFired, ScheduleInfo, ScheduleName,
};
use cairn_core::Result;

pub use handle::PgSpool;
use keys::wake_channel;
pub use wake::WAKE_POLL;

#[async_trait]
impl Spool for PgSpool {
    fn clock(&self) -> &dyn Clock {
        self.inner.clock.as_ref()
    }

    async fn enqueue(
        &self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let CheckedEnqueue { max_attempts, now } =
            check_enqueue(key, &payload, &options, self.clock())?;
        enqueue::enqueue_tx(self, queue, key, payload, options, max_attempts, now).await
    }

    async fn enqueue_many(
        &self,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>> {
        let attempts = check_enqueue_batch(&items)?;
        if items.is_empty() {
            return Ok(Vec::new());
        }
        enqueue::enqueue_many_tx(self, queue, items, &attempts, self.now()).await
    }

    async fn claim(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>> {
        claim::claim_tx(self, queue, consumer, lease, limit, self.now()).await
    }

    async fn heartbeat(&self, run: RunId, token: LeaseToken, lease: Duration) -> Result<Heartbeat> {
        settle::heartbeat_tx(self, run, token, lease, self.now()).await
    }

    async fn ack(&self, run: RunId, token: LeaseToken) -> Result<()> {
        settle::ack_tx(self, run, token, self.now()).await
    }

    async fn nack(
        &self,
        run: RunId,
        token: LeaseToken,
        kind: NackKind,
        reason: &str,
    ) -> Result<Nacked> {
        settle::nack_tx(self, run, token, kind, reason, self.now(), None).await
    }

    async fn retry_after(
        &self,
        run: RunId,
        token: LeaseToken,
        reason: &str,
        delay: Duration,
    ) -> Result<Nacked> {
        check_retry_delay(delay)?;
        let now = self.now();
        settle::nack_tx(
            self,
            run,
            token,
            NackKind::Retryable,
            reason,
            now,
            Some(delay),
        )
        .await
    }

    async fn cancel(&self, run: RunId) -> Result<CancelOutcome> {
        settle::cancel_tx(self, run, self.now()).await
    }

    async fn close_run(&self, run: RunId) -> Result<CloseOutcome> {
        events::close_run_tx(self, run).await
    }

    async fn release(&self, run: RunId, token: LeaseToken, delay: Duration) -> Result<Nacked> {
        settle::release_tx(self, run, token, delay, self.now()).await
    }

    async fn retry_parked(&self, run: RunId, by: &str) -> Result<Unparked> {
        settle::unpark_tx(self, run, Action::Requeue, by, self.now()).await
    }

    async fn discard(&self, run: RunId, by: &str) -> Result<Unparked> {
        settle::unpark_tx(self, run, Action::Discard, by, self.now()).await
    }

    async fn run(&self, run: RunId) -> Result<Option<RunInfo>> {
        read::run_tx(self, run).await
    }

    async fn payload(&self, run: RunId) -> Result<Option<Vec<u8>>> {
        read::payload_tx(self, run).await
    }

    async fn runs(&self, filter: &RunFilter, limit: usize) -> Result<Vec<RunInfo>> {
        read::runs_tx(self, filter, limit).await
    }

    async fn stats(&self) -> Result<SpoolStats> {
        read::stats_tx(self).await
    }

    async fn append_event(
        &self,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended> {
        events::append_event_tx(self, run, event_id, payload, self.now()).await
    }

    async fn events(&self, run: RunId, after: u64, limit: usize) -> Result<Vec<RunEvent>> {
        events::events_tx(self, run, after, limit, usize::MAX).await
    }

    async fn events_within(
        &self,
        run: RunId,
        after: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<RunEvent>> {
        events::events_tx(self, run, after, limit, max_bytes).await
    }

    async fn acknowledge_events(&self, run: RunId, event_ids: &[RunEventId]) -> Result<u64> {
        events::acknowledge_events_tx(self, run, event_ids).await
    }

    async fn set_fact(&self, run: RunId, name: &FactName, value: Vec<u8>) -> Result<FactOutcome> {
        events::set_fact_tx(self, run, name, value, self.now()).await
    }

    async fn facts(&self, run: RunId) -> Result<BTreeMap<FactName, Vec<u8>>> {
        events::facts_tx(self, run).await
    }

    async fn retention_pass(
        &self,
        policy: &RetentionPolicy,
        budget: &RetentionBudget,
    ) -> Result<RetentionReport> {
        let mut pass = RetentionPass::new(*policy, *budget, self.now())?;
        while let Some(step) = pass.next_step(self.now()) {
            match step {
                RetentionStep::Events => retention::retention_events_tx(self, &mut pass).await?,
                RetentionStep::Runs => retention::retention_runs_tx(self, &mut pass).await?,
            }
        }
        Ok(pass.finish())
    }

    async fn import_runs(
        &self,
        source: &ImportSource,
        runs: Vec<ImportedRun>,
    ) -> Result<RunImportOutcome> {
        import::import_runs_tx(self, source, runs, self.now()).await
    }

    async fn put_schedule(&self, schedule: &Schedule) -> Result<ScheduleInfo> {
        let now = self.now();
        check_schedule(schedule, now)?;
        schedule::put_schedule_tx(self, schedule, now).await
    }

    async fn schedule(&self, name: &ScheduleName) -> Result<Option<ScheduleInfo>> {
        schedule::schedule_q(self, name).await
    }

    async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        schedule::schedules_q(self).await
    }

    async fn remove_schedule(&self, name: &ScheduleName) -> Result<bool> {
        schedule::remove_schedule_tx(self, name).await
    }

    async fn fire_schedule(
        &self,
        name: &ScheduleName,
        revision: u64,
        ticks: &[Timestamp],
    ) -> Result<ScheduleFired> {
        check_fire_ticks(ticks)?;
        schedule::fire_schedule_tx(self, name, revision, ticks, self.now()).await
    }

    async fn next_due(&self, queue: &QueueName) -> Result<Option<Timestamp>> {
        read::next_due_q(self, queue).await
    }

    async fn set_queue_paused(&self, queue: &QueueName, paused: bool) -> Result<QueueFlow> {
        flow::set_paused_tx(self, queue, paused, self.now()).await
    }

    async fn set_queue_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<QueueFlow> {
        check_limits(limits)?;
        flow::set_limits_tx(self, queue, limits, self.now()).await
    }

    async fn queue_flow(&self, queue: &QueueName) -> Result<QueueFlow> {
        flow::flow_q(self, queue).await
    }

    async fn queue_flows(&self) -> Result<Vec<(QueueName, QueueFlow)>> {
        flow::flows_q(self).await
    }

    async fn subscribe(&self, queue: &QueueName) -> Result<Box<dyn Wakeup>> {
        let channel = wake_channel(&self.inner.schema, queue);
        Ok(Box::new(
            self.inner.wake.subscribe(channel, self.wake_poll()).await?,
        ))
    }
}

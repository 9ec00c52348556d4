//! [`MemorySpool`]: the in-memory reference model of the [`Spool`] contract.
//!
//! Its data and shared steps are in `memory/state.rs`, its import in `memory/import.rs`;
//! this file holds each operation of the contract.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::backoff::jitter_seed;
use super::checks::{
    check_append, check_enqueue, check_enqueue_batch, check_lease, check_limit, check_payload,
    check_release_delay, check_retry_delay, clip_reason, CheckedEnqueue,
};
use super::clock::{Clock, SystemClock};
use super::contract::{Spool, Wakeup};
use super::dedup::DedupKey;
use super::flow::{check_limits, QueueFlow, QueueLimits};
use super::ids::{ConsumerId, FactName, LeaseToken, QueueName, RunEventId, RunId, ScheduleName};
use super::import::{check_import, ImportSource, ImportedRun, RunImportOutcome};
use super::limits::{MAX_ACK_IDS, MAX_FACT_VALUE, MAX_RUN_EVENT_PAYLOAD};
use super::operator::check_producer_event_id;
use super::retention::{
    EventMeta, RetentionBudget, RetentionPass, RetentionPolicy, RetentionReport, RetentionStep,
    RunMeta,
};
use super::schedule::{check_fire_ticks, check_schedule, Schedule, ScheduleFired, ScheduleInfo};
use super::state::{Action, EventStream, RunState};
use super::timestamp::Timestamp;
use super::transition::{
    check_token, exhausted_park_reason, nack_action, release_action, transition,
};
use super::types::{
    CancelOutcome, Claimed, CloseOutcome, EnqueueItem, EnqueueOptions, Enqueued, EventAppended,
    FactOutcome, Heartbeat, NackKind, Nacked, RunEvent, RunFilter, RunInfo, SpoolConfig,
    SpoolStats, Unparked,
};
use crate::error::{Error, Result};

mod claim;
mod flow;
mod import;
mod schedule;
mod state;
mod unpark;

use state::{Lease, Run, State, StoredEvent};

#[derive(Debug)]
struct Shared {
    clock: Arc<dyn Clock>,
    config: SpoolConfig,
    state: Mutex<State>,
}

/// The in-memory reference model of the [`Spool`] contract.
///
/// It implements every contract bullet directly and serially (one lock), so the conformance
/// suite can run the same operations on a real backend and on a fresh `MemorySpool` sharing its
/// clock and require identical answers. Clones share the same data, like two processes opening
/// one store file. It is also a handy spool for tests of code that takes an `Arc<dyn Spool>`;
/// nothing is durable beyond the process.
#[derive(Debug, Clone)]
pub struct MemorySpool {
    shared: Arc<Shared>,
}

impl Default for MemorySpool {
    /// An empty spool on the system clock with the default config.
    fn default() -> Self {
        Self::new(Arc::new(SystemClock))
    }
}

impl MemorySpool {
    /// An empty spool reading time from `clock`, with the default config.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self::with_config(clock, SpoolConfig::default())
    }

    /// An empty spool reading time from `clock`, with `config`.
    pub fn with_config(clock: Arc<dyn Clock>, config: SpoolConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                clock,
                config,
                state: Mutex::new(State::default()),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every mutation below validates first and then applies infallible steps, so a panic
        // while holding the lock cannot leave a half-applied write behind.
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    fn retry_delay(&self, queue: &QueueName, key: &DedupKey, attempt: u32) -> Duration {
        self.shared
            .config
            .backoff
            .delay(attempt, jitter_seed(queue, key, attempt))
    }

    /// A nack; a run queued again is due after `delay`, or after the backoff without one.
    fn nack_with(
        &self,
        run: RunId,
        token: LeaseToken,
        kind: NackKind,
        reason: &str,
        delay: Option<Duration>,
    ) -> Result<Nacked> {
        let now = self.now();
        let mut st = self.lock();
        let r = st.run_mut(run)?;
        check_token(run, r.token, token)?;
        let action = nack_action(kind, r.attempts, r.max_attempts, r.cancel_requested);
        let to = transition(r.state, action)?;
        let mut retry_at = None;
        r.reason = Some(if action == Action::Park && kind == NackKind::Retryable {
            exhausted_park_reason(r.attempts, reason)
        } else {
            clip_reason(reason)
        });
        if to == RunState::Queued {
            let delay = delay.unwrap_or_else(|| self.retry_delay(&r.queue, &r.key, r.attempts));
            let at = now.saturating_add(delay);
            r.state = to;
            r.updated_at = now;
            r.lease = None;
            r.due_at = Some(at);
            retry_at = Some(at);
            let queue = r.queue.clone();
            st.notify(&queue);
        } else {
            r.enter(to, now);
        }
        Ok(Nacked {
            state: to,
            retry_at,
        })
    }
}

/// The model's [`Wakeup`]: a watch channel per queue.
#[derive(Debug)]
struct MemoryWakeup {
    rx: watch::Receiver<u64>,
}

#[async_trait]
impl Wakeup for MemoryWakeup {
    async fn wait(&mut self) -> Result<()> {
        self.rx.changed().await.map_err(|_| Error::Unavailable {
            detail: "the in-memory spool was dropped".into(),
            source: None,
        })
    }
}

#[async_trait]
impl Spool for MemorySpool {
    fn clock(&self) -> &dyn Clock {
        self.shared.clock.as_ref()
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
        let mut st = self.lock();
        let done = st.enqueue(queue, key, payload, options, max_attempts, now);
        if done.created {
            st.notify(queue);
        }
        Ok(done)
    }

    async fn enqueue_many(
        &self,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>> {
        let attempts = check_enqueue_batch(&items)?;
        let now = self.now();
        // One lock for the whole batch: nothing else sees a part of it.
        let mut st = self.lock();
        let mut created = false;
        let done: Vec<Enqueued> = items
            .into_iter()
            .zip(attempts)
            .map(|(item, max_attempts)| {
                let e = st.enqueue(
                    queue,
                    &item.key,
                    item.payload,
                    item.options,
                    max_attempts,
                    now,
                );
                created |= e.created;
                e
            })
            .collect();
        if created {
            st.notify(queue);
        }
        Ok(done)
    }

    async fn claim(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>> {
        check_limit(limit)?;
        check_lease(lease)?;
        let now = self.now();
        let mut guard = self.lock();
        let st = &mut *guard;
        let picked = st.pick(queue, now, limit)?;
        let mut out = Vec::new();
        for id in picked {
            let delay_for = |r: &Run| self.retry_delay(&r.queue, &r.key, r.attempts);
            let Some(r) = st.runs.get_mut(&id) else {
                continue;
            };
            let action = if r.state == RunState::Queued {
                Action::Claim
            } else {
                Action::Reclaim
            };
            let to = transition(r.state, action)?;
            r.state = to;
            r.updated_at = now;
            r.attempts += 1;
            let token = LeaseToken::generate();
            let expires_at = now.saturating_add(lease);
            r.token = Some(token);
            r.lease = Some(Lease {
                consumer: consumer.clone(),
                expires_at,
            });
            r.due_at = Some(expires_at.saturating_add(delay_for(r)));
            out.push(Claimed {
                run_id: r.id,
                dedup_key: r.key.clone(),
                payload: r.payload.clone(),
                attempt: r.attempts,
                token,
                expires_at,
                traceparent: r.traceparent.clone(),
            });
        }
        st.flow.claimed(queue, now, out.len());
        Ok(out)
    }

    async fn heartbeat(&self, run: RunId, token: LeaseToken, lease: Duration) -> Result<Heartbeat> {
        check_lease(lease)?;
        let now = self.now();
        let mut st = self.lock();
        let r = st.run_mut(run)?;
        check_token(run, r.token, token)?;
        transition(r.state, Action::Heartbeat)?;
        let expires_at = now.saturating_add(lease);
        let delay = self.retry_delay(&r.queue, &r.key, r.attempts);
        if let Some(l) = r.lease.as_mut() {
            l.expires_at = expires_at;
        }
        r.due_at = Some(expires_at.saturating_add(delay));
        Ok(Heartbeat {
            expires_at,
            cancel_requested: r.cancel_requested,
        })
    }

    async fn ack(&self, run: RunId, token: LeaseToken) -> Result<()> {
        let now = self.now();
        let mut st = self.lock();
        let r = st.run_mut(run)?;
        check_token(run, r.token, token)?;
        let to = transition(r.state, Action::Ack)?;
        if r.state != to {
            r.enter(to, now);
            r.reason = None;
        }
        Ok(())
    }

    async fn nack(
        &self,
        run: RunId,
        token: LeaseToken,
        kind: NackKind,
        reason: &str,
    ) -> Result<Nacked> {
        self.nack_with(run, token, kind, reason, None)
    }

    async fn retry_after(
        &self,
        run: RunId,
        token: LeaseToken,
        reason: &str,
        delay: Duration,
    ) -> Result<Nacked> {
        check_retry_delay(delay)?;
        self.nack_with(run, token, NackKind::Retryable, reason, Some(delay))
    }

    async fn cancel(&self, run: RunId) -> Result<CancelOutcome> {
        let now = self.now();
        let mut st = self.lock();
        let r = st.run_mut(run)?;
        let to = transition(r.state, Action::Cancel)?;
        if to == RunState::Claimed {
            r.cancel_requested = true;
            Ok(CancelOutcome::Requested)
        } else {
            r.enter(to, now);
            Ok(CancelOutcome::Canceled)
        }
    }

    async fn run(&self, run: RunId) -> Result<Option<RunInfo>> {
        Ok(self.lock().runs.get(&run).map(Run::info))
    }

    async fn payload(&self, run: RunId) -> Result<Option<Vec<u8>>> {
        Ok(self.lock().runs.get(&run).map(|r| r.payload.clone()))
    }

    async fn runs(&self, filter: &RunFilter, limit: usize) -> Result<Vec<RunInfo>> {
        check_limit(limit)?;
        let st = self.lock();
        let lower = filter.after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(st
            .runs
            .range((lower, Bound::Unbounded))
            .map(|(_, r)| r)
            .filter(|r| filter.queue.as_ref().is_none_or(|q| *q == r.queue))
            .filter(|r| filter.state.is_none_or(|s| s == r.state))
            .take(limit)
            .map(Run::info)
            .collect())
    }

    async fn stats(&self) -> Result<SpoolStats> {
        let now = self.now();
        let st = self.lock();
        let mut stats = SpoolStats {
            events: st.by_age.len() as u64,
            event_bytes: st.event_bytes,
            oldest_event: st.by_age.keys().next().map(|(t, _)| *t),
            ..SpoolStats::default()
        };
        for r in st.runs.values() {
            stats.add_runs(r.queue.clone(), r.state, 1, Some(r.enqueued_at));
            if r.state == RunState::Queued && r.due_at.is_some_and(|d| d > now) {
                stats.add_scheduled(r.queue.clone(), 1);
            }
        }
        Ok(stats)
    }

    async fn append_event(
        &self,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended> {
        check_producer_event_id(event_id)?;
        check_payload("run event payload", MAX_RUN_EVENT_PAYLOAD, &payload)?;
        let now = self.now();
        let mut st = self.lock();
        let serial = st.next_event_serial;
        let r = st.run_mut(run)?;
        if let Some(seq) = r.event_ids.get(event_id) {
            return Ok(EventAppended {
                seq: *seq,
                created: false,
            });
        }
        check_append(run, r.state, r.stream)?;
        let seq = r.last_event_seq + 1;
        let bytes = payload.len() as u64;
        r.last_event_seq = seq;
        r.event_ids.insert(event_id.clone(), seq);
        r.events.insert(
            seq,
            StoredEvent {
                id: event_id.clone(),
                payload,
                created_at: now,
                serial,
            },
        );
        st.next_event_serial += 1;
        st.by_age.insert((now, serial), (run, seq));
        st.event_bytes += bytes;
        Ok(EventAppended { seq, created: true })
    }

    async fn close_run(&self, run: RunId) -> Result<CloseOutcome> {
        let mut st = self.lock();
        let r = st.run_mut(run)?;
        if r.stream.is_closed() {
            return Ok(CloseOutcome::AlreadyClosed);
        }
        r.stream = EventStream::Closed;
        Ok(CloseOutcome::Closed)
    }

    async fn release(&self, run: RunId, token: LeaseToken, delay: Duration) -> Result<Nacked> {
        check_release_delay(delay)?;
        let now = self.now();
        let mut st = self.lock();
        let r = st.run_mut(run)?;
        check_token(run, r.token, token)?;
        let to = transition(r.state, release_action(r.cancel_requested))?;
        if to != RunState::Queued {
            r.enter(to, now);
            return Ok(Nacked {
                state: to,
                retry_at: None,
            });
        }
        let at = now.saturating_add(delay);
        r.state = to;
        r.updated_at = now;
        r.attempts = r.attempts.saturating_sub(1);
        r.lease = None;
        r.due_at = Some(at);
        Ok(Nacked {
            state: to,
            retry_at: Some(at),
        })
    }

    async fn retry_parked(&self, run: RunId, by: &str) -> Result<Unparked> {
        self.unpark(run, Action::Requeue, by)
    }

    async fn discard(&self, run: RunId, by: &str) -> Result<Unparked> {
        self.unpark(run, Action::Discard, by)
    }

    async fn events(&self, run: RunId, after: u64, limit: usize) -> Result<Vec<RunEvent>> {
        check_limit(limit)?;
        let st = self.lock();
        let r = st.runs.get(&run).ok_or(Error::UnknownRun { run })?;
        Ok(r.events
            .range((Bound::Excluded(after), Bound::Unbounded))
            .take(limit)
            .map(|(seq, e)| RunEvent {
                seq: *seq,
                event_id: e.id.clone(),
                payload: e.payload.clone(),
                created_at: e.created_at,
            })
            .collect())
    }

    async fn acknowledge_events(&self, run: RunId, event_ids: &[RunEventId]) -> Result<u64> {
        if event_ids.len() > MAX_ACK_IDS {
            return Err(Error::invalid(
                "event ids",
                format!("{} ids; the limit is {MAX_ACK_IDS}", event_ids.len()),
            ));
        }
        let mut st = self.lock();
        let r = st.run_mut(run)?;
        let seqs: Vec<u64> = event_ids
            .iter()
            .filter_map(|id| r.event_ids.get(id).copied())
            .collect();
        let mut removed = 0;
        for seq in seqs {
            if st.remove_event(run, seq) {
                removed += 1;
            }
        }
        Ok(removed)
    }

    async fn set_fact(&self, run: RunId, name: &FactName, value: Vec<u8>) -> Result<FactOutcome> {
        check_payload("fact value", MAX_FACT_VALUE, &value)?;
        let mut st = self.lock();
        let r = st.run_mut(run)?;
        match r.facts.get(name) {
            None => {
                r.facts.insert(name.clone(), value);
                Ok(FactOutcome::Set)
            }
            Some(existing) if *existing == value => Ok(FactOutcome::AlreadySet),
            Some(existing) => Err(Error::FactConflict {
                name: name.clone(),
                existing: existing.clone(),
            }),
        }
    }

    async fn facts(&self, run: RunId) -> Result<BTreeMap<FactName, Vec<u8>>> {
        let st = self.lock();
        let r = st.runs.get(&run).ok_or(Error::UnknownRun { run })?;
        Ok(r.facts.clone())
    }

    async fn retention_pass(
        &self,
        policy: &RetentionPolicy,
        budget: &RetentionBudget,
    ) -> Result<RetentionReport> {
        let mut pass = RetentionPass::new(*policy, *budget, self.now())?;
        while let Some(step) = pass.next_step(self.now()) {
            // One lock per batch: the model's transaction.
            let mut st = self.lock();
            match step {
                RetentionStep::Events => {
                    let oldest: Vec<EventMeta> = st
                        .by_age
                        .iter()
                        .take(pass.batch_size())
                        .map(|((created_at, _), (run, seq))| EventMeta {
                            run: *run,
                            seq: *seq,
                            created_at: *created_at,
                            bytes: st.runs[run].events[seq].payload.len() as u64,
                        })
                        .collect();
                    let batch = pass.plan_events(st.event_bytes, &oldest);
                    for (run, seq) in &batch.events {
                        st.remove_event(*run, *seq);
                    }
                    pass.events_deleted(&batch);
                }
                RetentionStep::Runs => {
                    let cutoff = pass.cutoff();
                    let mut candidates: Vec<(Timestamp, u64, RunId)> = st
                        .runs
                        .values()
                        .filter(|r| r.state.is_terminal() && r.events.is_empty())
                        .filter_map(|r| {
                            r.finished_at
                                .filter(|t| *t < cutoff)
                                .map(|t| (t, r.serial, r.id))
                        })
                        .collect();
                    candidates.sort();
                    let window: Vec<RunMeta> = candidates
                        .into_iter()
                        .take(pass.batch_size())
                        .map(|(finished_at, _, run)| RunMeta { run, finished_at })
                        .collect();
                    let ids = pass.plan_runs(&window);
                    for id in &ids {
                        if let Some(r) = st.runs.remove(id) {
                            st.by_key.remove(&(r.queue, r.key));
                        }
                    }
                    pass.runs_deleted(ids.len());
                }
            }
        }
        Ok(pass.finish())
    }

    async fn import_runs(
        &self,
        source: &ImportSource,
        runs: Vec<ImportedRun>,
    ) -> Result<RunImportOutcome> {
        check_import(source, &runs)?;
        let now = self.now();
        self.lock().import(source, runs, now)
    }

    async fn next_due(&self, queue: &QueueName) -> Result<Option<Timestamp>> {
        let st = self.lock();
        Ok(st
            .runs
            .values()
            .filter(|r| r.queue == *queue)
            .filter_map(|r| r.due_at)
            .min())
    }

    async fn put_schedule(&self, schedule: &Schedule) -> Result<ScheduleInfo> {
        let now = self.now();
        check_schedule(schedule, now)?;
        Ok(self.lock().put_schedule(schedule, now))
    }

    async fn schedule(&self, name: &ScheduleName) -> Result<Option<ScheduleInfo>> {
        Ok(self.lock().schedules.get(name).cloned())
    }

    async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        Ok(self.lock().schedules.values().cloned().collect())
    }

    async fn remove_schedule(&self, name: &ScheduleName) -> Result<bool> {
        Ok(self.lock().schedules.remove(name).is_some())
    }

    async fn fire_schedule(
        &self,
        name: &ScheduleName,
        revision: u64,
        ticks: &[Timestamp],
    ) -> Result<ScheduleFired> {
        check_fire_ticks(ticks)?;
        let now = self.now();
        self.lock().fire_schedule(name, revision, ticks, now)
    }

    async fn set_queue_paused(&self, queue: &QueueName, paused: bool) -> Result<QueueFlow> {
        let now = self.now();
        let mut st = self.lock();
        let flow = st.flow.set_paused(queue, paused, now);
        if !paused {
            st.notify(queue);
        }
        Ok(flow)
    }

    async fn set_queue_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<QueueFlow> {
        check_limits(limits)?;
        let now = self.now();
        let mut st = self.lock();
        let flow = st.flow.set_limits(queue, *limits, now);
        st.notify(queue);
        Ok(flow)
    }

    async fn queue_flow(&self, queue: &QueueName) -> Result<QueueFlow> {
        Ok(self.lock().flow.get(queue))
    }

    async fn queue_flows(&self) -> Result<Vec<(QueueName, QueueFlow)>> {
        Ok(self.lock().flow.all())
    }

    async fn subscribe(&self, queue: &QueueName) -> Result<Box<dyn Wakeup>> {
        let mut st = self.lock();
        let rx = st
            .wake
            .entry(queue.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        Ok(Box::new(MemoryWakeup { rx }))
    }
}

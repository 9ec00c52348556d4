//! What the in-memory spool holds: its runs with their leases, events and facts, the indexes
//! over them (by key, by event age), the wake-up channels and the import markers; and the
//! steps every operation shares (enqueue one run, remove one event, wake a queue).

use std::collections::{BTreeMap, HashMap};

use tokio::sync::watch;

use super::super::dedup::{DedupKey, SupersedeGroup};
use super::super::ids::{
    ConsumerId, FactName, LeaseToken, PartitionKey, QueueName, RunEventId, RunId, ScheduleName,
    TraceParent,
};
use super::super::import::ImportMarker;
use super::super::schedule::ScheduleInfo;
use super::super::state::{Action, EventStream, RunState};
use super::super::timestamp::Timestamp;
use super::super::transition::transition;
use super::super::types::{EnqueueOptions, Enqueued, LeaseInfo, RunInfo};
use super::flow::FlowState;
use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub(super) struct Lease {
    pub(super) consumer: ConsumerId,
    pub(super) expires_at: Timestamp,
}

#[derive(Debug, Clone)]
pub(super) struct StoredEvent {
    pub(super) id: RunEventId,
    pub(super) payload: Vec<u8>,
    pub(super) created_at: Timestamp,
    /// Store-wide insertion order: the tie-break of the retention age order.
    pub(super) serial: u64,
}

#[derive(Debug, Clone)]
pub(super) struct Run {
    pub(super) id: RunId,
    /// Store-wide enqueue order: the last tie-break of the claim order.
    pub(super) serial: u64,
    pub(super) queue: QueueName,
    pub(super) key: DedupKey,
    pub(super) group: Option<SupersedeGroup>,
    pub(super) payload: Vec<u8>,
    pub(super) state: RunState,
    pub(super) attempts: u32,
    pub(super) max_attempts: u32,
    pub(super) priority: i32,
    pub(super) enqueued_at: Timestamp,
    pub(super) updated_at: Timestamp,
    /// Live runs only: the earliest time a claim may take the run.
    pub(super) due_at: Option<Timestamp>,
    pub(super) finished_at: Option<Timestamp>,
    pub(super) lease: Option<Lease>,
    /// The token of the latest claim; kept after the run finishes so a repeated ack succeeds.
    pub(super) token: Option<LeaseToken>,
    pub(super) cancel_requested: bool,
    pub(super) reason: Option<String>,
    pub(super) facts: BTreeMap<FactName, Vec<u8>>,
    pub(super) events: BTreeMap<u64, StoredEvent>,
    pub(super) event_ids: HashMap<RunEventId, u64>,
    pub(super) last_event_seq: u64,
    pub(super) stream: EventStream,
    pub(super) partition: Option<PartitionKey>,
    /// The enqueuer's trace context, handed to every claim.
    pub(super) traceparent: Option<TraceParent>,
}

impl Run {
    pub(super) fn info(&self) -> RunInfo {
        RunInfo {
            run_id: self.id,
            queue: self.queue.clone(),
            dedup_key: self.key.clone(),
            supersede_group: self.group.clone(),
            state: self.state,
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            priority: self.priority,
            payload_bytes: self.payload.len() as u64,
            enqueued_at: self.enqueued_at,
            updated_at: self.updated_at,
            due_at: self.due_at,
            finished_at: self.finished_at,
            lease: self.lease.as_ref().map(|l| LeaseInfo {
                consumer: l.consumer.clone(),
                expires_at: l.expires_at,
            }),
            cancel_requested: self.cancel_requested,
            reason: self.reason.clone(),
            facts: self.facts.clone(),
            events: self.events.len() as u64,
            stream: self.stream,
            partition_key: self.partition.clone(),
            traceparent: self.traceparent.clone(),
        }
    }

    /// Applies a transition the state machine allows; the caller has checked it.
    pub(super) fn enter(&mut self, to: RunState, now: Timestamp) {
        self.state = to;
        self.updated_at = now;
        if to.is_terminal() {
            self.due_at = None;
            self.finished_at = Some(now);
            self.lease = None;
            self.cancel_requested = false;
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) runs: BTreeMap<RunId, Run>,
    pub(super) by_key: HashMap<(QueueName, DedupKey), RunId>,
    pub(super) next_run_serial: u64,
    pub(super) next_event_serial: u64,
    /// Every stored event in retention age order: `(created_at, serial)` → `(run, seq)`.
    pub(super) by_age: BTreeMap<(Timestamp, u64), (RunId, u64)>,
    pub(super) event_bytes: u64,
    pub(super) wake: HashMap<QueueName, watch::Sender<u64>>,
    /// Completion markers of imports, by source fingerprint.
    pub(super) imports: HashMap<[u8; 32], ImportMarker>,
    /// Stored schedules, by name (`memory/schedule.rs`).
    pub(super) schedules: BTreeMap<ScheduleName, ScheduleInfo>,
    /// Every queue's flow control (`memory/flow.rs`).
    pub(super) flow: FlowState,
}

impl State {
    pub(super) fn run_mut(&mut self, run: RunId) -> Result<&mut Run> {
        self.runs.get_mut(&run).ok_or(Error::UnknownRun { run })
    }

    /// Inserts the run of `(queue, key)` or finds the one there (the caller wakes the queue).
    pub(super) fn enqueue(
        &mut self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
        max_attempts: u32,
        now: Timestamp,
    ) -> Enqueued {
        if let Some(id) = self.by_key.get(&(queue.clone(), key.clone())) {
            return Enqueued {
                run_id: *id,
                created: false,
            };
        }
        let mut id = RunId::generate(now);
        while self.runs.contains_key(&id) {
            id = RunId::generate(now);
        }
        if let Some(group) = &options.supersede_group {
            for r in self.runs.values_mut() {
                if r.state == RunState::Queued
                    && r.queue == *queue
                    && r.group.as_ref() == Some(group)
                {
                    // Queued -> superseded is a transition of the table; it cannot fail.
                    if let Ok(to) = transition(r.state, Action::Supersede) {
                        r.enter(to, now);
                    }
                }
            }
        }
        let serial = self.next_run_serial;
        self.next_run_serial += 1;
        self.runs.insert(
            id,
            Run {
                id,
                serial,
                queue: queue.clone(),
                key: key.clone(),
                group: options.supersede_group,
                partition: options.partition_key,
                traceparent: options.traceparent,
                payload,
                state: RunState::Queued,
                attempts: 0,
                max_attempts,
                priority: options.priority,
                enqueued_at: now,
                updated_at: now,
                due_at: Some(options.not_before.unwrap_or(now)),
                finished_at: None,
                lease: None,
                token: None,
                cancel_requested: false,
                reason: None,
                facts: BTreeMap::new(),
                events: BTreeMap::new(),
                event_ids: HashMap::new(),
                last_event_seq: 0,
                stream: EventStream::Open,
            },
        );
        self.by_key.insert((queue.clone(), key.clone()), id);
        Enqueued {
            run_id: id,
            created: true,
        }
    }

    pub(super) fn notify(&self, queue: &QueueName) {
        if let Some(tx) = self.wake.get(queue) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    pub(super) fn remove_event(&mut self, run: RunId, seq: u64) -> bool {
        let Some(r) = self.runs.get_mut(&run) else {
            return false;
        };
        let Some(ev) = r.events.remove(&seq) else {
            return false;
        };
        r.event_ids.remove(&ev.id);
        self.by_age.remove(&(ev.created_at, ev.serial));
        self.event_bytes -= ev.payload.len() as u64;
        true
    }
}

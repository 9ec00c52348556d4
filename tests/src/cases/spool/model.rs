//! The spool model property test: random operation sequences applied to a fresh spool of the
//! backend under test and to a fresh [`MemorySpool`] on the same clock must give the same
//! answers and leave the same observable state after every step.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{
    EnqueueItem, RetentionBudget, RetentionPolicy, RunFilter, RunInfo, MAX_BATCH,
};
use cairn_core::{
    DedupKey, EnqueueOptions, Error, FactName, LeaseToken, MemorySpool, NackKind, QueueName,
    RunEventId, RunId, Spool, SupersedeGroup,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

use super::support::{consumer, kind};
use crate::{proptest_cases, SpoolHarness};

/// One step. Keys, groups, events and fact names come from small ranges so steps collide;
/// `lease` indices pick among every lease issued so far (modulo their number), stale ones
/// included.
#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        key: u8,
        group: Option<u8>,
        delay_secs: Option<u8>,
        max_attempts: u8,
        priority: i8,
    },
    /// A bulk enqueue: `(key, group)` per item, keys repeating inside the batch.
    EnqueueMany {
        items: Vec<(u8, Option<u8>)>,
    },
    Claim {
        limit: usize,
        lease_secs: u8,
    },
    Heartbeat {
        lease: usize,
        lease_secs: u8,
    },
    Ack {
        lease: usize,
    },
    Nack {
        lease: usize,
        kind: u8,
    },
    Cancel {
        key: u8,
    },
    Close {
        key: u8,
    },
    /// An operator's retry of a (hopefully parked) run.
    RetryParked {
        key: u8,
    },
    /// An operator's discard of a (hopefully parked) run.
    Discard {
        key: u8,
    },
    Release {
        lease: usize,
        delay_secs: u8,
    },
    /// A retry with the caller's own delay (`Spool::retry_after`).
    RetryAfter {
        lease: usize,
        delay_secs: u8,
    },
    Append {
        key: u8,
        event: u8,
        size: u8,
    },
    AckEvents {
        key: u8,
        events: Vec<u8>,
    },
    SetFact {
        key: u8,
        name: u8,
        value: u8,
    },
    Advance {
        secs: u16,
    },
    Retention {
        max_age_secs: u16,
        max_bytes: u16,
        batch: usize,
        max_batches: u32,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    // Four keys and mostly immediate runs, so most steps hit a live run; event sizes against
    // caps of a few hundred bytes, so retention deletes often.
    let key = 0u8..4;
    let delay = prop::option::weighted(0.2, 0u8..90);
    prop_oneof![
        4 => (key.clone(), prop::option::of(0u8..2), delay, 1u8..4, -1i8..=1)
            .prop_map(|(key, group, delay_secs, max_attempts, priority)| Op::Enqueue {
                key, group, delay_secs, max_attempts, priority
            }),
        1 => prop::collection::vec((key.clone(), prop::option::of(0u8..2)), 0..5)
            .prop_map(|items| Op::EnqueueMany { items }),
        3 => (1usize..4, 1u8..60).prop_map(|(limit, lease_secs)| Op::Claim { limit, lease_secs }),
        1 => (any::<usize>(), 1u8..60).prop_map(|(lease, lease_secs)| Op::Heartbeat { lease, lease_secs }),
        2 => any::<usize>().prop_map(|lease| Op::Ack { lease }),
        2 => (any::<usize>(), 0u8..3).prop_map(|(lease, kind)| Op::Nack { lease, kind }),
        1 => key.clone().prop_map(|key| Op::Cancel { key }),
        1 => key.clone().prop_map(|key| Op::Close { key }),
        1 => key.clone().prop_map(|key| Op::RetryParked { key }),
        1 => key.clone().prop_map(|key| Op::Discard { key }),
        1 => (any::<usize>(), 0u8..30).prop_map(|(lease, delay_secs)| Op::Release { lease, delay_secs }),
        1 => (any::<usize>(), 0u8..30).prop_map(|(lease, delay_secs)| Op::RetryAfter { lease, delay_secs }),
        3 => (key.clone(), 0u8..6, 0u8..200).prop_map(|(key, event, size)| Op::Append { key, event, size }),
        1 => (key.clone(), prop::collection::vec(0u8..6, 0..3)).prop_map(|(key, events)| Op::AckEvents { key, events }),
        1 => (key, 0u8..2, 0u8..2).prop_map(|(key, name, value)| Op::SetFact { key, name, value }),
        2 => (0u16..200).prop_map(|secs| Op::Advance { secs }),
        1 => (1u16..400, 0u16..600, 1usize..4, 1u32..5).prop_map(|(max_age_secs, max_bytes, batch, max_batches)| {
            Op::Retention { max_age_secs, max_bytes, batch, max_batches }
        }),
    ]
}

/// A result reduced to what must match: the value, or the error's variant (with the existing
/// value for a fact conflict).
type Outcome<T> = Result<T, String>;

fn outcome<T>(r: cairn_core::Result<T>) -> Outcome<T> {
    r.map_err(|e| match &e {
        Error::FactConflict { existing, .. } => format!("FactConflict({existing:?})"),
        _ => kind(&e).to_owned(),
    })
}

fn check<T: PartialEq + Debug>(
    step: usize,
    op: &Op,
    what: &str,
    real: &T,
    model: &T,
) -> Result<(), TestCaseError> {
    if real == model {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "step {step} ({op:?}): {what} differs\n  real:  {real:?}\n  model: {model:?}"
        )))
    }
}

/// A run's info with its id blanked (ids are random per store; runs are matched by key).
fn blank(info: Option<RunInfo>) -> Option<RunInfo> {
    info.map(|i| RunInfo {
        run_id: RunId([0; 16]),
        ..i
    })
}

/// The pair of spools under comparison and what maps one's ids to the other's.
struct Pair {
    real: Arc<dyn Spool>,
    model: MemorySpool,
    queue: QueueName,
    /// Key → (real run id, model run id) of the run the key currently names.
    runs: HashMap<u8, (RunId, RunId)>,
    /// Every lease issued: (real run, real token, model run, model token).
    leases: Vec<(RunId, LeaseToken, RunId, LeaseToken)>,
}

impl Pair {
    /// The ids a step on `key` addresses: one of the keys enqueued so far (by `key` modulo
    /// their number, so steps rarely miss), or one unknown id before the first enqueue. A run
    /// retention removed keeps its ids here, so later steps on it exercise `UnknownRun`.
    fn ids(&self, key: u8) -> (RunId, RunId) {
        let mut known: Vec<u8> = self.runs.keys().copied().collect();
        known.sort_unstable();
        if known.is_empty() {
            let unknown = RunId([0xee; 16]);
            (unknown, unknown)
        } else {
            self.runs[&known[usize::from(key) % known.len()]]
        }
    }

    fn lease(&self, i: usize) -> Option<(RunId, LeaseToken, RunId, LeaseToken)> {
        (!self.leases.is_empty()).then(|| self.leases[i % self.leases.len()])
    }

    async fn step(&mut self, step: usize, op: &Op) -> Result<(), TestCaseError> {
        let me = consumer("model");
        let (real, model) = (self.real.as_ref(), &self.model);
        match op {
            Op::Enqueue {
                key,
                group,
                delay_secs,
                max_attempts,
                priority,
            } => {
                let k = dedup(*key);
                let mut options = EnqueueOptions::default()
                    .max_attempts(u32::from(*max_attempts))
                    .priority(i32::from(*priority));
                if let Some(g) = group {
                    options =
                        options.supersede(SupersedeGroup::from_parts([[*g]]).expect("valid group"));
                }
                if let Some(d) = delay_secs {
                    let at = model
                        .clock()
                        .now()
                        .saturating_add(Duration::from_secs(u64::from(*d)));
                    options = options.not_before(at);
                }
                let payload = vec![*key; 3];
                let r = outcome(
                    real.enqueue(&self.queue, &k, payload.clone(), options.clone())
                        .await,
                );
                let m = outcome(model.enqueue(&self.queue, &k, payload, options).await);
                check(
                    step,
                    op,
                    "created",
                    &r.as_ref().map(|e| e.created),
                    &m.as_ref().map(|e| e.created),
                )?;
                if let (Ok(r), Ok(m)) = (r, m) {
                    if r.created {
                        self.runs.insert(*key, (r.run_id, m.run_id));
                    } else {
                        check(
                            step,
                            op,
                            "existing run ids",
                            &Some((r.run_id, m.run_id)),
                            &self.runs.get(key).copied(),
                        )?;
                    }
                }
            }
            Op::EnqueueMany { items } => {
                let batch: Vec<EnqueueItem> = items
                    .iter()
                    .map(|(key, group)| {
                        let mut options = EnqueueOptions::default();
                        if let Some(g) = group {
                            options = options.supersede(
                                SupersedeGroup::from_parts([[*g]]).expect("valid group"),
                            );
                        }
                        EnqueueItem::new(dedup(*key), vec![*key; 3]).with_options(options)
                    })
                    .collect();
                let r = outcome(real.enqueue_many(&self.queue, batch.clone()).await);
                let m = outcome(model.enqueue_many(&self.queue, batch).await);
                let created = |x: &Outcome<Vec<cairn_core::Enqueued>>| {
                    x.as_ref()
                        .map(|v| v.iter().map(|e| e.created).collect::<Vec<_>>())
                        .map_err(Clone::clone)
                };
                check(step, op, "created per item", &created(&r), &created(&m))?;
                if let (Ok(r), Ok(m)) = (r, m) {
                    for (((key, _), r), m) in items.iter().zip(&r).zip(&m) {
                        if r.created {
                            self.runs.insert(*key, (r.run_id, m.run_id));
                        } else {
                            check(
                                step,
                                op,
                                "existing run ids",
                                &Some((r.run_id, m.run_id)),
                                &self.runs.get(key).copied(),
                            )?;
                        }
                    }
                }
            }
            Op::Claim { limit, lease_secs } => {
                let lease = Duration::from_secs(u64::from(*lease_secs));
                let r = outcome(real.claim(&self.queue, &me, lease, *limit).await);
                let m = outcome(model.claim(&self.queue, &me, lease, *limit).await);
                let strip = |v: &Outcome<Vec<cairn_core::Claimed>>| {
                    v.as_ref()
                        .map(|v| {
                            v.iter()
                                .map(|c| {
                                    (
                                        c.dedup_key.clone(),
                                        c.payload.clone(),
                                        c.attempt,
                                        c.expires_at,
                                    )
                                })
                                .collect::<Vec<_>>()
                        })
                        .map_err(Clone::clone)
                };
                check(step, op, "claimed runs", &strip(&r), &strip(&m))?;
                if let (Ok(r), Ok(m)) = (r, m) {
                    for (r, m) in r.iter().zip(&m) {
                        self.leases.push((r.run_id, r.token, m.run_id, m.token));
                    }
                }
            }
            Op::Heartbeat { lease, lease_secs } => {
                if let Some((rr, rt, mr, mt)) = self.lease(*lease) {
                    let d = Duration::from_secs(u64::from(*lease_secs));
                    let r = outcome(real.heartbeat(rr, rt, d).await);
                    let m = outcome(model.heartbeat(mr, mt, d).await);
                    check(step, op, "heartbeat", &r, &m)?;
                }
            }
            Op::Ack { lease } => {
                if let Some((rr, rt, mr, mt)) = self.lease(*lease) {
                    check(
                        step,
                        op,
                        "ack",
                        &outcome(real.ack(rr, rt).await),
                        &outcome(model.ack(mr, mt).await),
                    )?;
                }
            }
            Op::Nack { lease, kind } => {
                if let Some((rr, rt, mr, mt)) = self.lease(*lease) {
                    let kind = [NackKind::Retryable, NackKind::Permanent, NackKind::Failed]
                        [usize::from(*kind) % 3];
                    let r = outcome(real.nack(rr, rt, kind, "model nack").await);
                    let m = outcome(model.nack(mr, mt, kind, "model nack").await);
                    check(step, op, "nack", &r, &m)?;
                }
            }
            Op::Cancel { key } => {
                let (r, m) = self.ids(*key);
                check(
                    step,
                    op,
                    "cancel",
                    &outcome(real.cancel(r).await),
                    &outcome(model.cancel(m).await),
                )?;
            }
            Op::RetryParked { key } => {
                let (r, m) = self.ids(*key);
                check(
                    step,
                    op,
                    "retry_parked",
                    &outcome(real.retry_parked(r, "model").await),
                    &outcome(model.retry_parked(m, "model").await),
                )?;
            }
            Op::Discard { key } => {
                let (r, m) = self.ids(*key);
                check(
                    step,
                    op,
                    "discard",
                    &outcome(real.discard(r, "model").await),
                    &outcome(model.discard(m, "model").await),
                )?;
            }
            Op::Close { key } => {
                let (r, m) = self.ids(*key);
                check(
                    step,
                    op,
                    "close_run",
                    &outcome(real.close_run(r).await),
                    &outcome(model.close_run(m).await),
                )?;
            }
            Op::Release { lease, delay_secs } => {
                if let Some((rr, rt, mr, mt)) = self.lease(*lease) {
                    let d = Duration::from_secs(u64::from(*delay_secs));
                    let r = outcome(real.release(rr, rt, d).await);
                    let m = outcome(model.release(mr, mt, d).await);
                    check(step, op, "release", &r, &m)?;
                }
            }
            Op::RetryAfter { lease, delay_secs } => {
                if let Some((rr, rt, mr, mt)) = self.lease(*lease) {
                    let d = Duration::from_secs(u64::from(*delay_secs));
                    let r = outcome(real.retry_after(rr, rt, "model retry", d).await);
                    let m = outcome(model.retry_after(mr, mt, "model retry", d).await);
                    check(step, op, "retry_after", &r, &m)?;
                }
            }
            Op::Append { key, event, size } => {
                let (r, m) = self.ids(*key);
                let id = event_id(*event);
                let payload = vec![*event; usize::from(*size)];
                let ro = outcome(real.append_event(r, &id, payload.clone()).await);
                let mo = outcome(model.append_event(m, &id, payload).await);
                check(step, op, "append_event", &ro, &mo)?;
            }
            Op::AckEvents { key, events } => {
                let (r, m) = self.ids(*key);
                let ids: Vec<RunEventId> = events.iter().map(|e| event_id(*e)).collect();
                let ro = outcome(real.acknowledge_events(r, &ids).await);
                let mo = outcome(model.acknowledge_events(m, &ids).await);
                check(step, op, "acknowledge_events", &ro, &mo)?;
            }
            Op::SetFact { key, name, value } => {
                let (r, m) = self.ids(*key);
                let name = FactName::new(format!("fact-{name}")).expect("valid fact name");
                let value = vec![*value; 2];
                let ro = outcome(real.set_fact(r, &name, value.clone()).await);
                let mo = outcome(model.set_fact(m, &name, value).await);
                check(step, op, "set_fact", &ro, &mo)?;
            }
            Op::Advance { .. } => {}
            Op::Retention {
                max_age_secs,
                max_bytes,
                batch,
                max_batches,
            } => {
                let policy = RetentionPolicy {
                    max_age: Duration::from_secs(u64::from(*max_age_secs)),
                    max_bytes: u64::from(*max_bytes),
                };
                let budget = RetentionBudget {
                    batch_size: *batch,
                    max_batches: *max_batches,
                    max_duration: Duration::from_secs(3600),
                };
                let ro = outcome(real.retention_pass(&policy, &budget).await);
                let mo = outcome(model.retention_pass(&policy, &budget).await);
                check(step, op, "retention report", &ro, &mo)?;
            }
        }
        Ok(())
    }

    async fn compare_state(&self, step: usize, op: &Op) -> Result<(), TestCaseError> {
        let (real, model) = (self.real.as_ref(), &self.model);
        let mut keys: Vec<u8> = self.runs.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            let (r, m) = self.runs[&key];
            let what = format!("run of key {key}");
            check(
                step,
                op,
                &what,
                &outcome(real.run(r).await).map(blank),
                &outcome(model.run(m).await).map(blank),
            )?;
            let what = format!("events of key {key}");
            check(
                step,
                op,
                &what,
                &outcome(real.events(r, 0, MAX_BATCH).await),
                &outcome(model.events(m, 0, MAX_BATCH).await),
            )?;
        }
        check(
            step,
            op,
            "stats",
            &outcome(real.stats().await),
            &outcome(model.stats().await),
        )?;
        let filter = RunFilter {
            queue: Some(self.queue.clone()),
            ..RunFilter::default()
        };
        let listing = |v: cairn_core::Result<Vec<RunInfo>>| {
            outcome(v).map(|v| {
                let mut v: Vec<(DedupKey, cairn_core::RunState)> =
                    v.into_iter().map(|i| (i.dedup_key, i.state)).collect();
                v.sort();
                v
            })
        };
        check(
            step,
            op,
            "runs()",
            &listing(real.runs(&filter, MAX_BATCH).await),
            &listing(model.runs(&filter, MAX_BATCH).await),
        )
    }
}

fn dedup(key: u8) -> DedupKey {
    DedupKey::from_parts([format!("key-{key}")]).expect("valid key")
}

fn event_id(event: u8) -> RunEventId {
    RunEventId::new(format!("event-{event}")).expect("valid event id")
}

async fn run_case<H: SpoolHarness>(h: &H, ops: &[Op]) -> Result<(), TestCaseError> {
    let real = h
        .fresh_spool()
        .await
        .map_err(|e| TestCaseError::fail(format!("cannot open a fresh spool: {e}")))?;
    let mut pair = Pair {
        real,
        model: MemorySpool::new(Arc::new(h.clock().clone())),
        queue: QueueName::new("model").expect("valid queue"),
        runs: HashMap::new(),
        leases: Vec::new(),
    };
    for (step, op) in ops.iter().enumerate() {
        if let Op::Advance { secs } = op {
            h.clock().advance(Duration::from_secs(u64::from(*secs)));
        }
        pair.step(step, op).await?;
        pair.compare_state(step, op).await?;
    }
    Ok(())
}

/// Random sequences of {enqueue with options, claim, heartbeat, ack, nack of each kind, cancel,
/// close, an operator's retry and discard, release, append/acknowledge events, set facts, clock advances, retention passes} give the same
/// answers on the spool under test and on a fresh [`MemorySpool`] sharing its clock, and leave
/// both with the same runs, events, stats and listings after every step. Stale leases are
/// replayed on purpose.
///
/// Runs [`proptest_cases`] cases, each on a fresh store ([`SpoolHarness::fresh_spool`]), so
/// store-wide retention compares exactly. Needs the multi-threaded runtime the
/// [`crate::spool_suite!`] macro sets up.
pub async fn spool_model_random_ops_match_reference<H: SpoolHarness>(h: &H) {
    let config = Config {
        cases: proptest_cases(),
        failure_persistence: None,
        max_shrink_iters: 512,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = prop::collection::vec(op_strategy(), 1..=40);
    let handle = tokio::runtime::Handle::current();
    let result = tokio::task::block_in_place(|| {
        runner.run(&strategy, |ops| handle.block_on(run_case(h, &ops)))
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, ops)) => panic!(
            "{}: the spool diverged from the reference model: {reason}\nminimal failing op sequence ({} steps):\n{ops:#?}",
            h.backend(),
            ops.len()
        ),
        Err(TestError::Abort(reason)) => panic!("{}: spool model test aborted: {reason}", h.backend()),
    }
}

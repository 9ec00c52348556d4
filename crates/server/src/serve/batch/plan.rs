//! How `POST /v1/batch` runs its ops in one transaction: the lock order (module docs of
//! [`super`]), then the ops, results in the request's order.

use cairn::{QueueName, RunId, SpaceId, Transaction};

use super::op::{Op, RunRef};
use super::wire::{created_status, OpOut};
use crate::serve::state::AppState;

/// The order a batch runs its ops in (module docs: the lock order), by op index.
pub(super) struct Plan {
    /// Every space the batch appends to (locked up front).
    pub(super) spaces: Vec<SpaceId>,
    /// The enqueue ops of each queue, queues in name order, ops in the request's order.
    pub(super) enqueues: Vec<(QueueName, Vec<usize>)>,
    /// The append ops, in the request's order.
    pub(super) appends: Vec<usize>,
    /// The ops on runs, in the request's order (sorted by run once references resolve).
    pub(super) on_runs: Vec<usize>,
}

impl Plan {
    pub(super) fn new(ops: &[Op]) -> Self {
        let mut plan = Self {
            spaces: Vec::new(),
            enqueues: Vec::new(),
            appends: Vec::new(),
            on_runs: Vec::new(),
        };
        let mut queues: std::collections::BTreeMap<&str, (QueueName, Vec<usize>)> =
            std::collections::BTreeMap::new();
        for (index, op) in ops.iter().enumerate() {
            match op {
                Op::Enqueue { queue, .. } => queues
                    .entry(queue.as_str())
                    .or_insert_with(|| (queue.clone(), Vec::new()))
                    .1
                    .push(index),
                Op::Append { space, .. } => {
                    if !plan.spaces.contains(space) {
                        plan.spaces.push(space.clone());
                    }
                    plan.appends.push(index);
                }
                _ => plan.on_runs.push(index),
            }
        }
        plan.enqueues = queues.into_values().collect();
        plan
    }
}

/// Where an op on a run goes among the batch's ops on runs: by run id, then a run's stream ops
/// (`append_event`, `cancel`, `close_run`: one row, in the request's order) before its facts
/// (by name). Sorting is stable, so equal keys keep the request's order.
pub(super) fn run_order(op: &Op, run: RunId) -> ([u8; 16], u8, Option<&str>) {
    let bytes = *run.as_bytes();
    match op {
        Op::SetFact { name, .. } => (bytes, 1, Some(name.as_str())),
        _ => (bytes, 0, None),
    }
}

/// Runs `ops` in one transaction in the order of their locks (module docs) and commits it; the
/// results in the ops' order. On error, the index of the op that failed (if an op did) and the
/// error, with the transaction rolled back.
pub(super) async fn run_batch(
    state: &AppState,
    ops: Vec<Op>,
) -> Result<Vec<OpOut>, (Option<usize>, cairn::Error)> {
    let plan = Plan::new(&ops);
    let mut tx = state.store.begin().await.map_err(|e| (None, e))?;
    match run_planned(&mut tx, &plan, ops).await {
        Ok(results) => {
            tx.commit().await.map_err(|e| (None, e))?;
            Ok(results)
        }
        Err(e) => {
            // The transaction can only roll back now; doing it here frees the connection (and
            // SQLite's writer) before the answer goes out. A failed rollback leaves nothing
            // committed either.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

pub(super) async fn run_planned(
    tx: &mut Transaction,
    plan: &Plan,
    ops: Vec<Op>,
) -> Result<Vec<OpOut>, (Option<usize>, cairn::Error)> {
    let mut results: Vec<Option<OpOut>> = (0..ops.len()).map(|_| None).collect();
    let mut runs: Vec<Option<RunId>> = vec![None; ops.len()];
    let mut ops: Vec<Option<Op>> = ops.into_iter().map(Some).collect();
    if !plan.spaces.is_empty() {
        tx.lock_spaces(&plan.spaces)
            .await
            .map_err(|e| (Some(plan.appends[0]), e))?;
    }
    for (queue, indices) in &plan.enqueues {
        let items = indices
            .iter()
            .map(|&i| match ops[i].take() {
                Some(Op::Enqueue { item, .. }) => item,
                _ => unreachable!("the plan's enqueues are enqueue ops"),
            })
            .collect();
        // The bulk enqueue's error is the first op's of its queue: it fails (or not) whole.
        let done = tx
            .enqueue_many(queue, items)
            .await
            .map_err(|e| (Some(indices[0]), e))?;
        for (&i, e) in indices.iter().zip(&done) {
            runs[i] = Some(e.run_id);
            results[i] = Some(OpOut::Enqueue {
                run_id: e.run_id.to_string(),
                created: e.created,
                status: created_status(e.created),
            });
        }
    }
    for &i in &plan.appends {
        let Some(Op::Append { space, events }) = ops[i].take() else {
            unreachable!("the plan's appends are append ops")
        };
        let a = tx.append(&space, events).await.map_err(|e| (Some(i), e))?;
        results[i] = Some(OpOut::Append {
            seq: a.seq.0,
            id: a.id.to_string(),
            parents: a.parents.iter().map(ToString::to_string).collect(),
        });
    }
    let mut on_runs: Vec<(usize, RunId)> = plan
        .on_runs
        .iter()
        .map(|&i| {
            let run = match ops[i].as_ref().and_then(Op::run) {
                Some(RunRef::Id(run)) => run,
                // `check_references` made it an earlier enqueue op, answered above.
                Some(RunRef::Op(target)) => runs[target].expect("an enqueue op's run"),
                None => unreachable!("the plan's ops on runs are on a run"),
            };
            (i, run)
        })
        .collect();
    on_runs.sort_by(|a, b| {
        let (x, y) = (ops[a.0].as_ref(), ops[b.0].as_ref());
        run_order(x.expect("an op"), a.1).cmp(&run_order(y.expect("an op"), b.1))
    });
    for (i, run) in on_runs {
        let op = ops[i].take().expect("each op runs once");
        results[i] = Some(op.run_on(run, tx).await.map_err(|e| (Some(i), e))?);
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("every op ran"))
        .collect())
}

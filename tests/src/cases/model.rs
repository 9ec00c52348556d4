//! The model-based property test: random operation sequences applied to the real store and to
//! the in-memory reference backend must agree after every step.

use std::fmt::Debug;

use cairn_core::{EpochDiagnostics, EpochId, EpochStore, MemoryStore, SpaceId};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

use super::support::{evs, foreign, open, variant};
use crate::{proptest_cases, random_space, Harness};

/// One step of a generated history. Indices pick among the epochs written so far (modulo
/// their number).
#[derive(Clone, Debug)]
enum Op {
    /// `append` of `events` events.
    Append { events: usize },
    /// A legacy writer's append (anti-join parents, cache untouched).
    LegacyAppend,
    /// A legacy writer's append naming one existing epoch as its only parent (a fork).
    LegacyFork { parent: usize },
    /// `repair_heads`.
    Repair,
    /// Import of a foreign epoch whose parents are existing epochs (none: a new root).
    Import { parents: Vec<usize> },
    /// Import of an epoch that is already present.
    Reimport { epoch: usize },
    /// Import naming a parent the space does not have (refused).
    ImportUnknownParent,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..=3).prop_map(|events| Op::Append { events }),
        2 => Just(Op::LegacyAppend),
        2 => any::<usize>().prop_map(|parent| Op::LegacyFork { parent }),
        1 => Just(Op::Repair),
        2 => prop::collection::vec(any::<usize>(), 0..=2).prop_map(|parents| Op::Import { parents }),
        1 => any::<usize>().prop_map(|epoch| Op::Reimport { epoch }),
        1 => Just(Op::ImportUnknownParent),
    ]
}

/// A result reduced to what must match: the value, or the error's variant.
type Outcome<T> = std::result::Result<T, &'static str>;

fn outcome<T>(r: cairn_core::Result<T>) -> Outcome<T> {
    r.map_err(|e| variant(&e))
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

async fn compare_state(
    step: usize,
    op: &Op,
    store: &dyn EpochDiagnostics,
    model: &MemoryStore,
    space: &SpaceId,
) -> Result<(), TestCaseError> {
    check(
        step,
        op,
        "heads()",
        &outcome(EpochStore::heads(store, space).await),
        &outcome(EpochStore::heads(model, space).await),
    )?;
    check(
        step,
        op,
        "cached_heads()",
        &outcome(store.cached_heads(space).await),
        &outcome(model.cached_heads(space).await),
    )?;
    check(
        step,
        op,
        "computed_heads()",
        &outcome(store.computed_heads(space).await),
        &outcome(model.computed_heads(space).await),
    )?;
    check(
        step,
        op,
        "next_seq()",
        &outcome(store.next_seq(space).await),
        &outcome(model.next_seq(space).await),
    )
}

async fn run_case<H: Harness>(
    h: &H,
    store: &dyn EpochDiagnostics,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let space = random_space("model");
    let model = MemoryStore::new();
    // Every epoch written so far, in write order.
    let mut known: Vec<EpochId> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let tag = format!("model-{step}");
        match op {
            Op::Append { events } => {
                let batch = evs(&tag, *events);
                let real = outcome(store.append(&space, batch.clone()).await);
                let want = outcome(model.append(&space, batch).await);
                check(step, op, "append result", &real, &want)?;
                known.extend(want.iter().map(|a| a.id));
            }
            Op::LegacyAppend | Op::LegacyFork { .. } => {
                let parents = match op {
                    Op::LegacyFork { parent } if !known.is_empty() => {
                        Some(vec![known[parent % known.len()]])
                    }
                    Op::LegacyFork { .. } => Some(vec![]),
                    _ => None,
                };
                let batch = evs(&tag, 1);
                let real = outcome(
                    h.legacy_append(&space, parents.clone(), batch.clone())
                        .await,
                );
                let want = outcome(model.legacy_append(&space, parents, batch));
                check(step, op, "legacy append result", &real, &want)?;
                known.extend(want.iter().map(|a| a.id));
            }
            Op::Repair => {
                let real = outcome(store.repair_heads(&space).await);
                let want = outcome(model.repair_heads(&space).await);
                check(step, op, "repair result", &real, &want)?;
            }
            Op::Import { parents } => {
                let parents: Vec<EpochId> = if known.is_empty() {
                    Vec::new()
                } else {
                    parents.iter().map(|p| known[p % known.len()]).collect()
                };
                let f = foreign(&space, &parents, evs(&tag, 2));
                let real = outcome(store.import(f.clone()).await);
                let want = outcome(model.import(f.clone()).await);
                check(step, op, "import result", &real, &want)?;
                if want.is_ok() {
                    known.push(f.id);
                }
            }
            Op::Reimport { epoch } => {
                if !known.is_empty() {
                    let id = known[epoch % known.len()];
                    let e = model
                        .epoch(&space, &id)
                        .await
                        .map_err(|e| TestCaseError::fail(format!("model lost epoch {id}: {e}")))?
                        .ok_or_else(|| TestCaseError::fail(format!("model lost epoch {id}")))?;
                    let real_epoch = outcome(store.epoch(&space, &id).await);
                    check(step, op, "stored epoch", &real_epoch, &Ok(Some(e.clone())))?;
                    let real = outcome(store.import(e.to_foreign()).await);
                    let want = outcome(model.import(e.to_foreign()).await);
                    check(step, op, "re-import result", &real, &want)?;
                }
            }
            Op::ImportUnknownParent => {
                let unknown = EpochId(*blake3::hash(tag.as_bytes()).as_bytes());
                let f = foreign(&space, &[unknown], evs(&tag, 1));
                let real = outcome(store.import(f.clone()).await);
                let want = outcome(model.import(f).await);
                check(step, op, "import with unknown parent", &real, &want)?;
            }
        }
        compare_state(step, op, store, &model, &space).await?;
    }
    let end = Op::Repair;
    let real = store
        .events_since(&space, None, 100_000)
        .await
        .map(|p| p.events);
    let want = model
        .events_since(&space, None, 100_000)
        .await
        .map(|p| p.events);
    check(
        ops.len(),
        &end,
        "the whole feed (after the last step)",
        &outcome(real),
        &outcome(want),
    )
}

/// Random sequences of {append, legacy append, legacy fork, repair, import, re-import, import of
/// an orphan} leave the real store and the in-memory reference model with identical results,
/// heads, cache rows, anti-join heads, next seqs and feeds after every step.
///
/// Runs [`proptest_cases`] cases, each in a fresh space of one store instance. Needs the
/// multi-threaded runtime the [`crate::suite!`] macro sets up (the proptest runner is
/// synchronous, so each case blocks in place on the runtime).
pub async fn model_random_ops_match_reference<H: Harness>(h: &H) {
    let store = open(h).await;
    let config = Config {
        cases: proptest_cases(),
        failure_persistence: None,
        max_shrink_iters: 512,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = prop::collection::vec(op_strategy(), 1..=12);
    let handle = tokio::runtime::Handle::current();
    let result = tokio::task::block_in_place(|| {
        runner.run(&strategy, |ops| {
            handle.block_on(run_case(h, store.as_ref(), &ops))
        })
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, ops)) => panic!(
            "{}: the store diverged from the reference model: {reason}\nminimal failing op sequence ({} steps):\n{ops:#?}",
            h.backend(),
            ops.len()
        ),
        Err(TestError::Abort(reason)) => panic!("{}: model test aborted: {reason}", h.backend()),
    }
}

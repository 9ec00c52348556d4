//! Enqueue: a duplicate answered from a read connection, a new run inserted in one `BEGIN
//! IMMEDIATE` transaction (or one savepoint of a group commit) on the writer, with its
//! supersede group's older queued runs marked superseded in the same transaction. A run's
//! partition key and trace context go into the same `INSERT` ([`sql::ENQUEUE_FLOW`], sent only
//! by an enqueue that carries one, after checking the store holds revision `0009_spool_flow`).
//!
//! A duplicate that appeared between the read and the write ends in a rollback: it commits
//! nothing, costs no fsync and wakes no subscriber.

use cairn_core::spool::{
    transition, Action, DedupKey, EnqueueItem, EnqueueOptions, Enqueued, PartitionKey, QueueName,
    RunId, RunState, SupersedeGroup, Timestamp, TraceParent,
};
use cairn_core::Result;
use rusqlite::{params, ToSql};

use super::flow;
use super::row::{len_i64, micros, run_id};
use super::sql;
use crate::db::{Db, End};
use crate::error::corrupt;

/// The run holding `(queue, key)`, read on a read connection: a duplicate enqueue answers
/// from it without taking the writer (a run, once committed, keeps its key until retention
/// removes it after it finished).
pub(super) fn existing_run_q(
    db: &Db<'_>,
    queue: &QueueName,
    key: &DedupKey,
) -> Result<Option<RunId>> {
    let found: Vec<Vec<u8>> = db.rows(
        sql::RUN_ID_BY_KEY,
        params![queue.as_str(), key.as_bytes()],
        |r| r.get(0),
    )?;
    found.first().map(|id| run_id(id)).transpose()
}

/// Inserts a new run of `(queue, key)` (superseding its group's older queued runs), or
/// answers the run that holds the key already.
pub(crate) fn enqueue_tx(
    db: &Db<'_>,
    queue: &QueueName,
    key: &DedupKey,
    payload: &[u8],
    options: &EnqueueOptions,
    max_attempts: u32,
    now: Timestamp,
) -> Result<Enqueued> {
    db.write_tx(|db| {
        let done = enqueue_row(db, queue, key, payload, options, max_attempts, now)?;
        // A duplicate wrote nothing: roll back, so no commit touches the file.
        let end = if done.created {
            End::Commit
        } else {
            End::Rollback
        };
        Ok((done, end))
    })
}

/// Every item of a bulk enqueue, in input order, inside one write transaction (or one
/// savepoint of a group commit): a key's first item inserts its run or finds the stored one,
/// its later items find that run. Nothing is written when no item created a run.
pub(crate) fn enqueue_many_tx(
    db: &Db<'_>,
    queue: &QueueName,
    items: &[EnqueueItem],
    max_attempts: &[u32],
    now: Timestamp,
) -> Result<Vec<Enqueued>> {
    db.write_tx(|db| {
        let done = items
            .iter()
            .zip(max_attempts)
            .map(|(item, &attempts)| {
                enqueue_row(
                    db,
                    queue,
                    &item.key,
                    &item.payload,
                    &item.options,
                    attempts,
                    now,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let end = if done.iter().any(|e| e.created) {
            End::Commit
        } else {
            End::Rollback
        };
        Ok((done, end))
    })
}

/// The statements of one enqueue, inside the caller's transaction: the insert (and its
/// supersede) or the read of the run that holds the key.
pub(crate) fn enqueue_row(
    db: &Db<'_>,
    queue: &QueueName,
    key: &DedupKey,
    payload: &[u8],
    options: &EnqueueOptions,
    max_attempts: u32,
    now: Timestamp,
) -> Result<Enqueued> {
    let id = RunId::generate(now);
    let due = options.not_before.unwrap_or(now);
    let group = options
        .supersede_group
        .as_ref()
        .map(SupersedeGroup::as_bytes);
    let values = params![
        id.as_bytes(),
        queue.as_str(),
        key.as_bytes(),
        group,
        RunState::Queued.as_str(),
        max_attempts,
        options.priority,
        micros(now),
        micros(due),
        len_i64(payload),
        payload
    ];
    let partition = options.partition_key.as_ref().map(PartitionKey::as_str);
    let traceparent = options.traceparent.as_ref().map(TraceParent::as_str);
    // Revision 0009's columns are named only by an enqueue that sets one of them, and only on
    // a store that holds them (a store whose upgrade stopped before 0009 refuses it).
    let inserted: Vec<Vec<u8>> = if partition.is_none() && traceparent.is_none() {
        db.rows(sql::ENQUEUE, values, |r| r.get(0))?
    } else {
        flow::require_run_columns(db)?;
        let mut flow_values = values.to_vec();
        flow_values.extend([&partition as &dyn ToSql, &traceparent]);
        db.rows(sql::ENQUEUE_FLOW, flow_values.as_slice(), |r| r.get(0))?
    };
    if inserted.is_empty() {
        let existing: Vec<Vec<u8>> = db.rows(
            sql::RUN_ID_BY_KEY,
            params![queue.as_str(), key.as_bytes()],
            |r| r.get(0),
        )?;
        let existing = existing
            .first()
            .ok_or_else(|| corrupt("an enqueue conflicted with a run that is not there"))?;
        return Ok(Enqueued {
            run_id: run_id(existing)?,
            created: false,
        });
    }
    if let Some(group) = group {
        let to = transition(RunState::Queued, Action::Supersede)?;
        db.exec(
            sql::SUPERSEDE,
            params![
                queue.as_str(),
                group,
                id.as_bytes(),
                to.as_str(),
                micros(now)
            ],
        )?;
    }
    Ok(Enqueued {
        run_id: id,
        created: true,
    })
}

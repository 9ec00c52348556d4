//! The spool's reads — one run, pages of runs, stats, a queue's next due time — each in one
//! read transaction (or, for the next due time, one statement) on a read-only connection, so
//! every answer is one consistent snapshot.

use std::collections::BTreeMap;

use cairn_core::spool::{
    ConsumerId, EventStream, FactName, LeaseInfo, QueueName, RunFilter, RunId, RunInfo, RunState,
    SpoolStats, SupersedeGroup, Timestamp,
};
use cairn_core::{Error, Result};
use rusqlite::{params, Row};

use super::flow::run_flow_columns_q;
use super::row::{count, dedup_key, non_negative, run_id, state, ts};
use super::sql;
use crate::db::Db;
use crate::error::corrupt;

/// A run row as [`sql::RUN_INFO`] and [`sql::RUNS_PAGE`] return it, before decoding.
struct InfoRow {
    id: Vec<u8>,
    queue: String,
    key: Vec<u8>,
    group: Option<Vec<u8>>,
    state: String,
    attempts: i64,
    max_attempts: i64,
    priority: i64,
    payload_bytes: i64,
    enqueued_at: i64,
    updated_at: i64,
    due_at: Option<i64>,
    finished_at: Option<i64>,
    consumer: Option<String>,
    expires_at: Option<i64>,
    cancel_requested: bool,
    reason: Option<String>,
    events: i64,
    closed: Option<bool>,
}

fn info_row(r: &Row<'_>) -> rusqlite::Result<InfoRow> {
    Ok(InfoRow {
        id: r.get(0)?,
        queue: r.get(1)?,
        key: r.get(2)?,
        group: r.get(3)?,
        state: r.get(4)?,
        attempts: r.get(5)?,
        max_attempts: r.get(6)?,
        priority: r.get(7)?,
        payload_bytes: r.get(8)?,
        enqueued_at: r.get(9)?,
        updated_at: r.get(10)?,
        due_at: r.get(11)?,
        finished_at: r.get(12)?,
        consumer: r.get(13)?,
        expires_at: r.get(14)?,
        cancel_requested: r.get(15)?,
        reason: r.get(16)?,
        events: r.get(17)?,
        closed: r.get(18)?,
    })
}

pub(super) fn facts_of(db: &Db<'_>, run: &[u8]) -> Result<BTreeMap<FactName, Vec<u8>>> {
    db.rows(sql::FACTS, params![run], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
    })?
    .into_iter()
    .map(|(name, value)| {
        let name = FactName::new(name).map_err(|_| corrupt("a stored fact name is invalid"))?;
        Ok((name, value))
    })
    .collect()
}

fn run_info(db: &Db<'_>, row: InfoRow, flow: bool) -> Result<RunInfo> {
    let lease = match (row.consumer, row.expires_at) {
        (Some(consumer), Some(expires_at)) => Some(LeaseInfo {
            consumer: ConsumerId::new(consumer)
                .map_err(|_| corrupt("a stored consumer id is invalid"))?,
            expires_at: ts(expires_at),
        }),
        _ => None,
    };
    let (partition_key, traceparent) = run_flow_columns_q(db, &row.id, flow)?;
    Ok(RunInfo {
        run_id: run_id(&row.id)?,
        facts: facts_of(db, &row.id)?,
        queue: QueueName::new(row.queue).map_err(|_| corrupt("a stored queue name is invalid"))?,
        dedup_key: dedup_key(row.key)?,
        supersede_group: row
            .group
            .map(|g| {
                SupersedeGroup::from_bytes(g)
                    .map_err(|_| corrupt("a stored supersede group is out of bounds"))
            })
            .transpose()?,
        state: state(&row.state)?,
        attempts: count(row.attempts, "attempt count")?,
        max_attempts: count(row.max_attempts, "attempt limit")?,
        priority: i32::try_from(row.priority)
            .map_err(|_| corrupt("a stored priority is out of range"))?,
        payload_bytes: non_negative(row.payload_bytes, "payload size")?,
        enqueued_at: ts(row.enqueued_at),
        updated_at: ts(row.updated_at),
        due_at: row.due_at.map(ts),
        finished_at: row.finished_at.map(ts),
        lease,
        cancel_requested: row.cancel_requested,
        reason: row.reason,
        events: non_negative(row.events, "event count")?,
        partition_key,
        traceparent,
        stream: EventStream::from_stored(row.closed),
    })
}

/// One run's info; `flow`: the store holds revision `0009_spool_flow` (its partition key and
/// trace context are read).
pub(super) fn run_tx(db: &Db<'_>, run: RunId, flow: bool) -> Result<Option<RunInfo>> {
    db.read_tx(|db| {
        let rows = db.rows(sql::RUN_INFO, params![run.as_bytes()], info_row)?;
        rows.into_iter()
            .next()
            .map(|row| run_info(db, row, flow))
            .transpose()
    })
}

/// A page of runs (see [`run_tx`] for `flow`).
pub(super) fn runs_tx(
    db: &Db<'_>,
    filter: &RunFilter,
    limit: usize,
    flow: bool,
) -> Result<Vec<RunInfo>> {
    let after: &[u8] = filter.after.as_ref().map_or(&[], |id| id.as_bytes());
    let queue = filter.queue.as_ref().map(QueueName::as_str);
    let st = filter.state.map(RunState::as_str);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    db.read_tx(|db| {
        db.rows(sql::RUNS_PAGE, params![after, queue, st, limit], info_row)?
            .into_iter()
            .map(|row| run_info(db, row, flow))
            .collect()
    })
}

pub(super) fn stats_tx(db: &Db<'_>, now: Timestamp) -> Result<SpoolStats> {
    db.read_tx(|db| {
        let mut stats = SpoolStats::default();
        let groups: Vec<(String, String, i64, Option<i64>, i64)> = db.rows(
            sql::QUEUE_STATE_COUNTS,
            params![now.as_unix_micros()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )?;
        for (queue, st, n, oldest, scheduled) in groups {
            let queue =
                QueueName::new(queue).map_err(|_| corrupt("a stored queue name is invalid"))?;
            stats.add_scheduled(queue.clone(), non_negative(scheduled, "run count")?);
            stats.add_runs(
                queue,
                state(&st)?,
                non_negative(n, "run count")?,
                oldest.map(ts),
            );
        }
        let totals: Vec<(i64, i64, Option<i64>)> = db.rows(sql::EVENT_TOTALS, [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        if let Some((n, bytes, oldest)) = totals.into_iter().next() {
            stats.events = non_negative(n, "event count")?;
            stats.event_bytes = non_negative(bytes, "event size")?;
            stats.oldest_event = oldest.map(ts);
        }
        Ok(stats)
    })
}

pub(super) fn payload_tx(db: &Db<'_>, run: RunId) -> Result<Option<Vec<u8>>> {
    let found: Vec<Vec<u8>> = db.rows(sql::RUN_PAYLOAD, params![run.as_bytes()], |r| r.get(0))?;
    Ok(found.into_iter().next())
}

pub(super) fn require_run(db: &Db<'_>, run: RunId) -> Result<()> {
    let found: Vec<i64> = db.rows(sql::RUN_EXISTS, params![run.as_bytes()], |r| r.get(0))?;
    if found.is_empty() {
        Err(Error::UnknownRun { run })
    } else {
        Ok(())
    }
}

/// The earliest `due_at` of `queue`'s runs (a queued run's not-before time, a claimed run's
/// lease expiry plus its backoff); `None` when no run of the queue has one.
pub(super) fn next_due_q(db: &Db<'_>, queue: &QueueName) -> Result<Option<Timestamp>> {
    let due: Vec<Option<i64>> = db.rows(sql::NEXT_DUE, params![queue.as_str()], |r| r.get(0))?;
    Ok(due.into_iter().flatten().next().map(ts))
}

//! Queue flow control on SQLite (revision `0009_spool_flow`): the stored flow of a queue
//! (`spool_queue`), its rate window (`spool_claim_tick`), and the limited claim's pick.
//!
//! Every claim runs on the one writer (`BEGIN IMMEDIATE`, or a savepoint of a group commit),
//! so a claim's count of what is in flight and its pick are serialized with every other claim
//! of the store, in every process. A claim reads its queue's flow row first (one primary-key
//! read); a queue without a row, or without a limit, claims as before. A queue whose flow is
//! set back to the defaults (running, unlimited) keeps no row, and one without a rate limit no
//! rate window.
//!
//! A store whose upgrade stopped before the revision (a contract revision before it deferred
//! while older builds are live) has none of these tables: [`FlowSeen`] says whether the spool
//! saw the revision applied; until then claims ignore flow (none can be stored) and the flow
//! methods and partition keys refuse with [`flow_revision_missing`].

use std::collections::BTreeMap;

use cairn_core::spool::{
    claim_allowance, flow_revision_missing, pick_within_partitions, rate_window_start,
    PartitionKey, QueueFlow, QueueLimits, QueueName, RateLimit, Timestamp, TraceParent,
};
use std::time::Duration;

use cairn_core::Result;
use rusqlite::{params, OptionalExtension, Row};

use super::row::{micros, ts};
use super::sql;
use crate::db::Db;
use crate::error::{corrupt, map};

/// Whether the store holds the revision, as far as this handle knows.
pub(super) use cairn_migrate::RevisionSeen as FlowSeen;

/// The store's answer: whether `0009_spool_flow` is in cairn's lineage.
pub(super) fn applied_q(db: &Db<'_>) -> Result<bool> {
    let n: Vec<i64> = db.rows(sql::FLOW_APPLIED, [], |r| r.get(0))?;
    Ok(n.first().is_some_and(|n| *n > 0))
}

fn limit_of(n: Option<i64>, what: &str) -> Result<Option<u32>> {
    n.map(|n| u32::try_from(n).map_err(|_| corrupt(format!("a stored {what} is out of range"))))
        .transpose()
}

/// A flow from the columns `paused, max_claimed, per_partition, rate_claims, rate_per_us,
/// updated_at` starting at `at`.
fn flow_row(r: &Row<'_>, at: usize) -> rusqlite::Result<FlowColumns> {
    Ok((
        r.get(at)?,
        r.get(at + 1)?,
        r.get(at + 2)?,
        r.get(at + 3)?,
        r.get(at + 4)?,
        r.get(at + 5)?,
    ))
}

type FlowColumns = (
    bool,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    i64,
);

fn decode(c: FlowColumns) -> Result<QueueFlow> {
    let (paused, max_claimed, per_partition, rate_claims, rate_per_us, updated_at) = c;
    let rate = match (limit_of(rate_claims, "rate limit")?, rate_per_us) {
        (Some(claims), Some(us)) => Some(RateLimit {
            claims,
            per: Duration::from_micros(
                u64::try_from(us).map_err(|_| corrupt("a stored rate interval is negative"))?,
            ),
        }),
        (None, None) => None,
        _ => return Err(corrupt("a stored rate limit is half set")),
    };
    Ok(QueueFlow {
        paused,
        limits: QueueLimits {
            max_claimed: limit_of(max_claimed, "max claimed")?,
            per_partition: limit_of(per_partition, "per-partition limit")?,
            rate,
        },
        updated_at: Some(ts(updated_at)),
    })
}

/// `queue`'s stored flow ([`QueueFlow::default`] when none).
pub(super) fn flow_q(db: &Db<'_>, queue: &QueueName) -> Result<QueueFlow> {
    db.count();
    let row = db
        .conn()
        .prepare_cached(sql::QUEUE_FLOW)
        .and_then(|mut s| {
            s.query_row(params![queue.as_str()], |r| flow_row(r, 0))
                .optional()
        })
        .map_err(map)?;
    row.map(decode).transpose().map(Option::unwrap_or_default)
}

/// Every stored flow, by queue name.
pub(super) fn flows_q(db: &Db<'_>) -> Result<Vec<(QueueName, QueueFlow)>> {
    db.rows(sql::QUEUE_FLOWS, [], |r| {
        Ok((r.get::<_, String>(0)?, flow_row(r, 1)?))
    })?
    .into_iter()
    .map(|(queue, c)| {
        let queue = QueueName::new(queue).map_err(|_| corrupt("a stored queue name is invalid"))?;
        Ok((queue, decode(c)?))
    })
    .collect()
}

/// Stores `queue`'s pause state; returns the stored flow.
pub(super) fn set_paused_tx(
    db: &Db<'_>,
    queue: &QueueName,
    paused: bool,
    now: Timestamp,
) -> Result<QueueFlow> {
    db.write_tx(|db| {
        db.exec(
            sql::SET_PAUSED,
            params![queue.as_str(), paused, micros(now)],
        )?;
        Ok((settle(db, queue)?, crate::db::End::Commit))
    })
}

/// After a change of `queue`'s flow, inside its transaction: drops the queue's rate window
/// when it has no rate limit, and its row when the flow is back to the defaults (running,
/// unlimited: a queue nobody set keeps no row); returns the flow as stored.
fn settle(db: &Db<'_>, queue: &QueueName) -> Result<QueueFlow> {
    let flow = flow_q(db, queue)?;
    if flow.limits.rate.is_none() {
        db.exec(sql::DROP_TICKS, params![queue.as_str()])?;
    }
    if flow.is_default() {
        db.exec(sql::DELETE_FLOW, params![queue.as_str()])?;
        return Ok(QueueFlow::default());
    }
    Ok(flow)
}

/// Stores `queue`'s limits (checked by the caller); returns the stored flow.
pub(super) fn set_limits_tx(
    db: &Db<'_>,
    queue: &QueueName,
    limits: &QueueLimits,
    now: Timestamp,
) -> Result<QueueFlow> {
    let rate_us = limits
        .rate
        .map(|r| i64::try_from(r.per.as_micros()).unwrap_or(i64::MAX));
    db.write_tx(|db| {
        db.exec(
            sql::SET_LIMITS,
            params![
                queue.as_str(),
                limits.max_claimed,
                limits.per_partition,
                limits.rate.map(|r| r.claims),
                rate_us,
                micros(now)
            ],
        )?;
        Ok((settle(db, queue)?, crate::db::End::Commit))
    })
}

/// Refuses an enqueue that carries a partition key or a trace context (inside the enqueue's
/// transaction) when the store has not applied the revision whose columns hold them.
pub(super) fn require_run_columns(db: &Db<'_>) -> Result<()> {
    if applied_q(db)? {
        Ok(())
    } else {
        Err(flow_revision_missing(
            "an enqueue with a partition key or a traceparent",
        ))
    }
}

/// A run's partition key and trace context (`None`: none, or a store before the revision:
/// `flow` false).
pub(super) fn run_flow_columns_q(
    db: &Db<'_>,
    run: &[u8],
    flow: bool,
) -> Result<(Option<PartitionKey>, Option<TraceParent>)> {
    if !flow {
        return Ok((None, None));
    }
    let found: Vec<(Option<String>, Option<String>)> =
        db.rows(sql::RUN_FLOW_COLUMNS, params![run], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    let Some((partition, traceparent)) = found.into_iter().next() else {
        return Ok((None, None));
    };
    let partition = partition
        .map(|p| {
            PartitionKey::from_stored(p).map_err(|_| corrupt("a stored partition key is invalid"))
        })
        .transpose()?;
    Ok((partition, traceparent_of(traceparent)?))
}

/// A stored trace context.
pub(super) fn traceparent_of(stored: Option<String>) -> Result<Option<TraceParent>> {
    stored
        .map(|t| TraceParent::parse(&t).map_err(|_| corrupt("a stored traceparent is invalid")))
        .transpose()
}

/// The `run_no`s a claim of `queue` asking for `limit` takes at `now` under `flow` (limited),
/// in claim order: counts the runs claimed at once (per partition too) and the rate window
/// (dropping its old claim times), then walks the due runs in claim order until the pick is
/// complete, skipping those whose partition is full.
pub(super) fn pick_limited(
    db: &Db<'_>,
    queue: &QueueName,
    flow: &QueueFlow,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<i64>> {
    let held: Vec<(Option<String>, i64)> = db.rows(
        sql::HELD_BY_PARTITION,
        params![queue.as_str(), micros(now)],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let mut in_flight = 0u64;
    let mut busy: BTreeMap<PartitionKey, u64> = BTreeMap::new();
    for (partition, n) in held {
        let n = u64::try_from(n).map_err(|_| corrupt("a negative count"))?;
        in_flight += n;
        if let Some(p) = partition {
            let p = PartitionKey::from_stored(p)
                .map_err(|_| corrupt("a stored partition key is invalid"))?;
            busy.insert(p, n);
        }
    }
    let mut in_window = 0u64;
    if let Some(rate) = flow.limits.rate {
        let start = micros(rate_window_start(now, &rate));
        db.exec(sql::DROP_OLD_TICKS, params![queue.as_str(), start])?;
        let n: Vec<i64> = db.rows(sql::WINDOW_RUNS, params![queue.as_str(), start], |r| {
            r.get(0)
        })?;
        in_window = n
            .first()
            .map_or(Ok(0), |n| u64::try_from(*n))
            .map_err(|_| corrupt("a negative claim count"))?;
    }
    let allowance = claim_allowance(flow, in_flight, in_window, limit);
    let mut picked = Vec::new();
    if allowance == 0 {
        return Ok(picked);
    }
    db.count();
    let mut stmt = db
        .conn()
        .prepare_cached(sql::FLOW_CANDIDATES)
        .map_err(map)?;
    let mut rows = stmt
        .query(params![queue.as_str(), micros(now)])
        .map_err(map)?;
    let page_size = limit.max(16);
    loop {
        // One page of candidates, then the pick among them with what earlier pages took.
        let mut page: Vec<(i64, Option<PartitionKey>)> = Vec::with_capacity(page_size);
        while page.len() < page_size {
            let Some(r) = rows.next().map_err(map)? else {
                break;
            };
            let partition: Option<String> = r.get(1).map_err(map)?;
            let partition = partition
                .map(|p| {
                    PartitionKey::from_stored(p)
                        .map_err(|_| corrupt("a stored partition key is invalid"))
                })
                .transpose()?;
            page.push((r.get(0).map_err(map)?, partition));
        }
        let last = page.len() < page_size;
        let chosen = pick_within_partitions(
            page.iter().map(|c| c.1.as_ref()),
            &busy,
            flow.limits.per_partition,
            allowance - picked.len(),
        );
        for i in chosen {
            let (run_no, partition) = &page[i];
            if let Some(p) = partition {
                *busy.entry(p.clone()).or_insert(0) += 1;
            }
            picked.push(*run_no);
        }
        if picked.len() >= allowance || last {
            return Ok(picked);
        }
    }
}

/// Records that a claim of `queue` at `now` handed out `runs` runs (rate-limited queues only).
pub(super) fn record_claim(
    db: &Db<'_>,
    queue: &QueueName,
    flow: &QueueFlow,
    now: Timestamp,
    runs: usize,
) -> Result<()> {
    if runs == 0 || flow.limits.rate.is_none() {
        return Ok(());
    }
    let runs = i64::try_from(runs).unwrap_or(i64::MAX);
    db.exec(sql::INSERT_TICK, params![queue.as_str(), micros(now), runs])
        .map(drop)
}

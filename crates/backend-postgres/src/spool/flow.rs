//! Queue flow control on Postgres (revision `0009_spool_flow`): the stored flow of a queue
//! (`spool_queue`), its rate window (`spool_claim_tick`), partition keys, and the limited
//! claim's pick.
//!
//! A claim of a queue without a `spool_queue` row, or whose row sets no pause and no limit, is
//! today's claim: the one-statement claim ([`sql_flow::CLAIM_QUEUED_FLOW`]) reads the row by
//! primary key once and goes ahead. Otherwise it declines, and the claim is one transaction
//! (`claim::claim_pick_apply`) that reads the flow: paused, it hands out and settles nothing;
//! limited, it takes the queue's transaction-scoped advisory lock
//! ([`super::keys::flow_lock_key`]) before counting what is in flight and in the rate window
//! and picking ([`pick_limited`]), so the limited claims of a queue run one at a time in every
//! process and never together exceed a limit. A change of a queue's flow takes the same lock,
//! drops the queue's rate window when it has no rate limit and its row when the flow is back
//! to the defaults, so a queue nobody limits keeps no row (and no window).
//!
//! A store whose upgrade stopped before the revision has none of these tables: claims ignore
//! flow there (none can be stored) and the flow methods and partition keys refuse with
//! [`flow_revision_missing`] (`PgSpool::flow_layout` says which).

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_core::spool::{
    claim_allowance, flow_revision_missing, pick_within_partitions, rate_window_start,
    PartitionKey, QueueFlow, QueueLimits, QueueName, RateLimit, Timestamp,
};
use cairn_core::Result;
use sqlx::postgres::PgRow;
use sqlx::PgConnection;

use super::handle::PgSpool;
use super::keys::{flow_lock_key, wake_channel};
use super::row::{corrupt, get, micros, ts};
use super::sql_flow;
use crate::error::map;

/// Refuses `what` on a store without revision `0009_spool_flow`.
pub(super) async fn require(s: &PgSpool, what: &str) -> Result<()> {
    if s.flow_layout().await? {
        Ok(())
    } else {
        Err(flow_revision_missing(what))
    }
}

fn limit_of(n: Option<i32>, what: &str) -> Result<Option<u32>> {
    n.map(|n| u32::try_from(n).map_err(|_| corrupt(&format!("a negative {what}"))))
        .transpose()
}

/// A flow from [`sql_flow::QUEUE_FLOW`]'s columns, starting at column `at`.
fn decode(row: &PgRow, at: usize) -> Result<QueueFlow> {
    let rate = match (
        limit_of(get(row, at + 3)?, "rate limit")?,
        get::<Option<i64>>(row, at + 4)?,
    ) {
        (Some(claims), Some(us)) => Some(RateLimit {
            claims,
            per: Duration::from_micros(
                u64::try_from(us).map_err(|_| corrupt("a negative rate interval"))?,
            ),
        }),
        (None, None) => None,
        _ => return Err(corrupt("a half-set rate limit")),
    };
    Ok(QueueFlow {
        paused: get(row, at)?,
        limits: QueueLimits {
            max_claimed: limit_of(get(row, at + 1)?, "max claimed")?,
            per_partition: limit_of(get(row, at + 2)?, "per-partition limit")?,
            rate,
        },
        updated_at: Some(ts(get(row, at + 5)?)),
    })
}

/// Stores `queue`'s pause state (resuming notifies its wake channel); returns the stored flow.
pub(super) async fn set_paused_tx(
    s: &PgSpool,
    queue: &QueueName,
    paused: bool,
    now: Timestamp,
) -> Result<QueueFlow> {
    require(s, "pausing or resuming a queue").await?;
    let mut tx = s.pool().begin().await.map_err(map)?;
    lock_flow(s, &mut tx, queue).await?;
    let row = sqlx::query(sql_flow::SET_PAUSED)
        .bind(queue.as_str())
        .bind(paused)
        .bind(micros(now))
        .bind(wake_channel(s.schema(), queue))
        .fetch_one(&mut *tx)
        .await
        .map_err(map)?;
    let flow = settle(&mut tx, queue, decode(&row, 0)?).await?;
    tx.commit().await.map_err(map)?;
    Ok(flow)
}

/// Stores `queue`'s limits (checked by the caller) and notifies its wake channel; returns the
/// stored flow.
pub(super) async fn set_limits_tx(
    s: &PgSpool,
    queue: &QueueName,
    limits: &QueueLimits,
    now: Timestamp,
) -> Result<QueueFlow> {
    require(s, "setting a queue's limits").await?;
    let int = |n: Option<u32>| n.map(|n| i32::try_from(n).unwrap_or(i32::MAX));
    let rate_us = limits
        .rate
        .map(|r| i64::try_from(r.per.as_micros()).unwrap_or(i64::MAX));
    let mut tx = s.pool().begin().await.map_err(map)?;
    lock_flow(s, &mut tx, queue).await?;
    let row = sqlx::query(sql_flow::SET_LIMITS)
        .bind(queue.as_str())
        .bind(int(limits.max_claimed))
        .bind(int(limits.per_partition))
        .bind(int(limits.rate.map(|r| r.claims)))
        .bind(rate_us)
        .bind(micros(now))
        .bind(wake_channel(s.schema(), queue))
        .fetch_one(&mut *tx)
        .await
        .map_err(map)?;
    let flow = settle(&mut tx, queue, decode(&row, 0)?).await?;
    tx.commit().await.map_err(map)?;
    Ok(flow)
}

/// Takes `queue`'s flow lock inside a transaction that changes its flow: the change waits for
/// a limited claim of the queue under way, and such a claim that read the old flow and waits
/// for the lock sees the change when it records its rate window ([`sql_flow::INSERT_TICK`]).
async fn lock_flow(s: &PgSpool, conn: &mut PgConnection, queue: &QueueName) -> Result<()> {
    sqlx::query(sql_flow::LOCK_FLOW)
        .bind(flow_lock_key(s.schema(), queue))
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    Ok(())
}

/// After a change of `queue`'s flow to `flow` (its row locked by the change, under the flow
/// lock): drops the queue's rate window when it has no rate limit, and its row when the flow
/// is back to the defaults (running, unlimited: a queue nobody set keeps no row); returns the
/// flow as stored.
async fn settle(conn: &mut PgConnection, queue: &QueueName, flow: QueueFlow) -> Result<QueueFlow> {
    if flow.limits.rate.is_none() {
        sqlx::query(sql_flow::DROP_TICKS)
            .bind(queue.as_str())
            .execute(&mut *conn)
            .await
            .map_err(map)?;
    }
    if !flow.is_default() {
        return Ok(flow);
    }
    sqlx::query(sql_flow::DELETE_FLOW)
        .bind(queue.as_str())
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    Ok(QueueFlow::default())
}

/// `queue`'s stored flow ([`QueueFlow::default`] when none).
pub(super) async fn flow_q(s: &PgSpool, queue: &QueueName) -> Result<QueueFlow> {
    require(s, "reading a queue's flow").await?;
    let row = sqlx::query(sql_flow::QUEUE_FLOW)
        .bind(queue.as_str())
        .fetch_optional(s.pool())
        .await
        .map_err(map)?;
    row.map(|r| decode(&r, 0))
        .transpose()
        .map(Option::unwrap_or_default)
}

/// Every stored flow, by queue name.
pub(super) async fn flows_q(s: &PgSpool) -> Result<Vec<(QueueName, QueueFlow)>> {
    require(s, "listing queue flows").await?;
    let rows = sqlx::query(sql_flow::QUEUE_FLOWS)
        .fetch_all(s.pool())
        .await
        .map_err(map)?;
    rows.iter()
        .map(|r| {
            let queue = QueueName::new(get::<String>(r, 0)?)
                .map_err(|_| corrupt("an invalid queue name"))?;
            Ok((queue, decode(r, 1)?))
        })
        .collect()
}

/// `queue`'s flow, read inside a claim's transaction.
pub(super) async fn read_flow(conn: &mut PgConnection, queue: &QueueName) -> Result<QueueFlow> {
    let row = sqlx::query(sql_flow::QUEUE_FLOW)
        .bind(queue.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(map)?;
    row.map(|r| decode(&r, 0))
        .transpose()
        .map(Option::unwrap_or_default)
}

/// A limited claim's rows, inside its transaction: after the queue's flow lock, counts the runs
/// claimed at once (per partition too) and the rate window (dropping its old claim times),
/// then returns [`sql_flow::CLAIM_PICK_FLOW`]'s expired leases (kind `e`) and the candidates
/// the claim takes (kind `c`, in claim order): pages of due runs in claim order, leaving out
/// partitions that are full, each page picked by [`pick_within_partitions`] with what earlier
/// pages took — so a busy partition at the head of the queue hides nothing behind it.
pub(super) async fn pick_limited(
    s: &PgSpool,
    conn: &mut PgConnection,
    queue: &QueueName,
    flow: &QueueFlow,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<PgRow>> {
    sqlx::query(sql_flow::LOCK_FLOW)
        .bind(flow_lock_key(s.schema(), queue))
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    let held = sqlx::query(sql_flow::HELD_BY_PARTITION)
        .bind(queue.as_str())
        .bind(micros(now))
        .fetch_all(&mut *conn)
        .await
        .map_err(map)?;
    let mut in_flight = 0u64;
    let mut busy: BTreeMap<PartitionKey, u64> = BTreeMap::new();
    for row in &held {
        let n = u64::try_from(get::<i64>(row, 1)?).map_err(|_| corrupt("a negative count"))?;
        in_flight += n;
        if let Some(p) = get::<Option<String>>(row, 0)? {
            busy.insert(partition(p)?, n);
        }
    }
    let mut in_window = 0u64;
    if let Some(rate) = flow.limits.rate {
        let start = micros(rate_window_start(now, &rate));
        sqlx::query(sql_flow::DROP_OLD_TICKS)
            .bind(queue.as_str())
            .bind(start)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        let n: i64 = sqlx::query_scalar(sql_flow::WINDOW_RUNS)
            .bind(queue.as_str())
            .bind(start)
            .fetch_one(&mut *conn)
            .await
            .map_err(map)?;
        in_window = u64::try_from(n).map_err(|_| corrupt("a negative claim count"))?;
    }
    let allowance = claim_allowance(flow, in_flight, in_window, limit);
    // The expired leases the claim settles (and those it may take back, which come again as
    // candidates below).
    let mut rows = sqlx::query(sql_flow::CLAIM_PICK_FLOW)
        .bind(queue.as_str())
        .bind(micros(now))
        .bind(0i64)
        .fetch_all(&mut *conn)
        .await
        .map_err(map)?;
    let page_size = limit.max(16);
    let mut after = (i64::MIN, i64::MIN, i64::MIN);
    let mut taken = 0;
    while taken < allowance {
        let full: Vec<String> = match flow.limits.per_partition {
            Some(cap) => busy
                .iter()
                .filter(|(_, n)| **n >= u64::from(cap))
                .map(|(p, _)| p.as_str().to_owned())
                .collect(),
            None => Vec::new(),
        };
        let page = sqlx::query(sql_flow::FLOW_CANDIDATES)
            .bind(queue.as_str())
            .bind(micros(now))
            .bind(i64::try_from(page_size).unwrap_or(i64::MAX))
            .bind(after.0)
            .bind(after.1)
            .bind(after.2)
            .bind(full)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        let partitions = page
            .iter()
            .map(|r| get::<Option<String>>(r, 12)?.map(partition).transpose())
            .collect::<Result<Vec<_>>>()?;
        let chosen = pick_within_partitions(
            partitions.iter().map(Option::as_ref),
            &busy,
            flow.limits.per_partition,
            allowance - taken,
        );
        let last = page.len() < page_size;
        if let Some(end) = page.last() {
            let priority: i32 = get(end, 8)?;
            after = (-i64::from(priority), get(end, 9)?, get(end, 10)?);
        }
        let mut page: Vec<Option<PgRow>> = page.into_iter().map(Some).collect();
        for i in chosen {
            if let Some(p) = &partitions[i] {
                *busy.entry(p.clone()).or_insert(0) += 1;
            }
            rows.extend(page[i].take());
            taken += 1;
        }
        if last {
            break;
        }
    }
    Ok(rows)
}

fn partition(p: String) -> Result<PartitionKey> {
    PartitionKey::from_stored(p).map_err(|_| corrupt("an invalid partition key"))
}

/// Records that a claim of `queue` at `now` handed out `runs` runs (rate-limited queues only),
/// inside its transaction.
pub(super) async fn record_claim(
    conn: &mut PgConnection,
    queue: &QueueName,
    flow: &QueueFlow,
    now: Timestamp,
    runs: usize,
) -> Result<()> {
    if runs == 0 || flow.limits.rate.is_none() {
        return Ok(());
    }
    sqlx::query(sql_flow::INSERT_TICK)
        .bind(queue.as_str())
        .bind(micros(now))
        .bind(i32::try_from(runs).unwrap_or(i32::MAX))
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    Ok(())
}

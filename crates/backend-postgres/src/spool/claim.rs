//! Claims, through `spool_ready` once the store holds the contract revision
//! `0008_spool_ready_contract` and through `spool_run`'s own claim indexes before
//! (`spool::layout`; the `_RECORD` statements). The common case — no expired lease due in the queue, and every run taken carrying
//! the jitter of the attempt it starts (`claim_attempt`, `claim_jitter`, written by enqueue and
//! nack) — is one statement, [`sql::CLAIM_QUEUED`]: it locks, writes and returns the runs, and
//! computes each run's `due_at` (lease expiry plus backoff) in SQL. Every other claim is one
//! transaction of one locking pick ([`sql::CLAIM_PICK`]) and one batched write
//! ([`sql::CLAIM_APPLY`]), every run decided by the core's `expiry_action` and `transition`.
//!
//! Both paths write the same thing (tests: `crates/backend-postgres/tests/spool/claims.rs`):
//! a queued run goes `queued → claimed` ([`transition`] with [`Action::Claim`], the only
//! transition the one-statement path makes), its attempts counted up by one, a new token, the
//! consumer, `expires_at = now + lease` and `due_at = expires_at + backoff(attempt,
//! jitter_seed(queue, key, attempt))`, the same function of the same inputs in SQL as in Rust.

use std::collections::HashSet;
use std::time::Duration;

use cairn_core::spool::{
    check_lease, check_limit, expired_park_reason, expiry_action, transition, Action, Claimed,
    ConsumerId, DedupKey, LeaseToken, QueueFlow, QueueName, RunId, RunState, Timestamp,
};
use cairn_core::{Error, Result};

use super::flow;
use super::handle::PgSpool;
use super::row::{get, micros, run_id, state, traceparent_of, u32_of};
use super::sql;
use super::sql_flow;
use super::sql_record;
use crate::error::map;

/// The rows a claim writes, one array per column of [`sql::CLAIM_APPLY`].
#[derive(Default)]
struct ClaimWrites {
    ids: Vec<Vec<u8>>,
    states: Vec<String>,
    attempts: Vec<i32>,
    tokens: Vec<Option<Vec<u8>>>,
    consumers: Vec<Option<String>>,
    expires: Vec<Option<i64>>,
    due: Vec<Option<i64>>,
    finished: Vec<Option<i64>>,
    cancel: Vec<bool>,
    reasons: Vec<Option<String>>,
}

impl ClaimWrites {
    /// A run settled by the claim: canceled or parked, with `reason` (None: keep).
    fn settle(&mut self, id: RunId, to: RunState, attempts: i32, reason: Option<String>, now: i64) {
        self.ids.push(id.as_bytes().to_vec());
        self.states.push(to.as_str().to_owned());
        self.attempts.push(attempts);
        self.tokens.push(None);
        self.consumers.push(None);
        self.expires.push(None);
        self.due.push(None);
        self.finished.push(Some(now));
        self.cancel.push(false);
        self.reasons.push(reason);
    }

    #[allow(clippy::too_many_arguments)]
    fn claim(
        &mut self,
        id: RunId,
        attempt: i32,
        token: LeaseToken,
        consumer: &ConsumerId,
        expires_at: Timestamp,
        due_at: Timestamp,
        cancel_requested: bool,
    ) {
        self.ids.push(id.as_bytes().to_vec());
        self.states.push(RunState::Claimed.as_str().to_owned());
        self.attempts.push(attempt);
        self.tokens.push(Some(token.as_bytes().to_vec()));
        self.consumers.push(Some(consumer.as_str().to_owned()));
        self.expires.push(Some(micros(expires_at)));
        self.due.push(Some(micros(due_at)));
        self.finished.push(None);
        self.cancel.push(cancel_requested);
        self.reasons.push(None);
    }
}

/// Claims up to `limit` runs of `queue` for `consumer` at `now`: in one statement when it can,
/// else in a transaction that also settles the queue's expired leases.
pub(super) async fn claim_tx(
    s: &PgSpool,
    queue: &QueueName,
    consumer: &ConsumerId,
    lease: Duration,
    limit: usize,
    now: Timestamp,
) -> Result<Vec<Claimed>> {
    check_limit(limit)?;
    check_lease(lease)?;
    let flow = s.flow_layout().await?;
    if one_statement_claims(s) {
        if let Some(claimed) = claim_queued(s, queue, consumer, lease, limit, now, flow).await? {
            #[cfg(feature = "testkit")]
            s.inner.hooks.claimed_by(0);
            return Ok(claimed);
        }
    }
    #[cfg(feature = "testkit")]
    s.inner.hooks.claimed_by(1);
    claim_pick_apply(s, queue, consumer, lease, limit, now, flow).await
}

/// Whether a claim tries [`sql::CLAIM_QUEUED`] first: always, unless a test said otherwise
/// (`testkit_one_statement_claims`).
#[cfg(feature = "testkit")]
fn one_statement_claims(s: &PgSpool) -> bool {
    s.inner.hooks.one_statement_claims()
}

/// Whether a claim tries [`sql::CLAIM_QUEUED`] first: always.
#[cfg(not(feature = "testkit"))]
fn one_statement_claims(_: &PgSpool) -> bool {
    true
}

/// The one-statement claim ([`sql::CLAIM_QUEUED`]; with `flow`, the store holding revision
/// `0009_spool_flow`, [`sql_flow::CLAIM_QUEUED_FLOW`], which also returns each run's trace
/// context); `None` when it could not decide (an expired lease is due, a run lacks its jitter,
/// or the queue is paused or limited), having written nothing.
async fn claim_queued(
    s: &PgSpool,
    queue: &QueueName,
    consumer: &ConsumerId,
    lease: Duration,
    limit: usize,
    now: Timestamp,
    flow: bool,
) -> Result<Option<Vec<Claimed>>> {
    let tokens: Vec<LeaseToken> = (0..limit).map(|_| LeaseToken::generate()).collect();
    let expires_at = now.saturating_add(lease);
    let policy = s.inner.config.backoff;
    let statement = if flow {
        sql_flow::CLAIM_QUEUED_FLOW
    } else if s.ready_layout().await? {
        sql::CLAIM_QUEUED
    } else {
        sql_record::CLAIM_QUEUED_RECORD
    };
    let rows = autocommit!(s, |on| sqlx::query(statement)
        .bind(queue.as_str())
        .bind(micros(now))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(
            tokens
                .iter()
                .map(|t| t.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
        .bind(consumer.as_str())
        .bind(micros(expires_at))
        .bind(policy.base.as_nanos().to_string())
        .bind(policy.cap.as_nanos().to_string())
        .fetch_all(on)
        .await
        .map_err(map))?;
    let Some(first) = rows.first() else {
        return Err(Error::corrupt("the one-statement claim returned no row"));
    };
    if !get::<bool>(first, 0)? {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let Some(i) = get::<Option<i64>>(row, 1)? else {
            continue;
        };
        let token = usize::try_from(i - 1)
            .ok()
            .and_then(|i| tokens.get(i))
            .copied()
            .ok_or_else(|| Error::corrupt("the one-statement claim numbered a run wrongly"))?;
        let key = DedupKey::from_bytes(get::<Vec<u8>>(row, 3)?)
            .map_err(|_| Error::corrupt("an invalid dedup key in the spool tables"))?;
        out.push(Claimed {
            run_id: run_id(&get::<Vec<u8>>(row, 2)?)?,
            dedup_key: key,
            payload: get(row, 4)?,
            attempt: u32_of(get(row, 5)?)?,
            token,
            expires_at,
            traceparent: if flow {
                traceparent_of(get(row, 6)?)?
            } else {
                None
            },
        });
    }
    Ok(Some(out))
}

/// The claim transaction: one locking pick ([`sql::CLAIM_PICK`]) of the expired leases and the
/// next due runs, every run decided in Rust, and one batched write ([`sql::CLAIM_APPLY`]).
/// With `flow` (the store holds revision `0009_spool_flow`) it reads the queue's flow first: a
/// paused queue hands out and settles nothing, a limited one picks under its flow lock
/// ([`flow::pick_limited`]) and records a rate-limited claim's time, and the pick returns each
/// run's trace context ([`sql_flow::CLAIM_PICK_FLOW`]).
async fn claim_pick_apply(
    s: &PgSpool,
    queue: &QueueName,
    consumer: &ConsumerId,
    lease: Duration,
    limit: usize,
    now: Timestamp,
    flow: bool,
) -> Result<Vec<Claimed>> {
    // 0009 comes after the contract revision 0008: a store that holds it holds 0008.
    let traced = flow;
    let statement = if traced {
        sql_flow::CLAIM_PICK_FLOW
    } else if s.ready_layout().await? {
        sql::CLAIM_PICK
    } else {
        sql_record::CLAIM_PICK_RECORD
    };
    let mut tx = s.pool().begin().await.map_err(map)?;
    let flow = if flow {
        flow::read_flow(&mut tx, queue).await?
    } else {
        QueueFlow::default()
    };
    if flow.paused {
        tx.rollback().await.map_err(map)?;
        return Ok(Vec::new());
    }
    let rows = if flow.limited() {
        flow::pick_limited(s, &mut tx, queue, &flow, now, limit).await?
    } else {
        sqlx::query(statement)
            .bind(queue.as_str())
            .bind(micros(now))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(map)?
    };
    let mut writes = ClaimWrites::default();
    let mut settled = HashSet::new();
    let mut out = Vec::new();
    let expires_at = now.saturating_add(lease);
    for row in &rows {
        let kind: String = get(row, 0)?;
        let id = run_id(&get::<Vec<u8>>(row, 1)?)?;
        let from = state(&get::<String>(row, 2)?)?;
        let attempts_raw: i32 = get(row, 3)?;
        let attempts = u32_of(attempts_raw)?;
        let max_attempts = u32_of(get(row, 4)?)?;
        let cancel_requested: bool = get(row, 5)?;
        let action = match from {
            RunState::Queued => Action::Claim,
            _ => expiry_action(attempts, max_attempts, cancel_requested),
        };
        if matches!(action, Action::Claim | Action::Reclaim) {
            if kind == "e" || out.len() >= limit {
                // A reclaimable expired lease is handed out from the ordered rows only.
                continue;
            }
            let to = transition(from, action)?;
            debug_assert_eq!(to, RunState::Claimed);
            let key = DedupKey::from_bytes(get::<Vec<u8>>(row, 6)?)
                .map_err(|_| Error::corrupt("an invalid dedup key in the spool tables"))?;
            let payload: Vec<u8> = get(row, 7)?;
            let attempt = attempts + 1;
            let token = LeaseToken::generate();
            let due_at = expires_at.saturating_add(s.retry_delay(queue, &key, attempt));
            writes.claim(
                id,
                attempts_raw.saturating_add(1),
                token,
                consumer,
                expires_at,
                due_at,
                cancel_requested,
            );
            out.push(Claimed {
                run_id: id,
                dedup_key: key,
                payload,
                attempt,
                token,
                expires_at,
                traceparent: if traced {
                    traceparent_of(get(row, 11)?)?
                } else {
                    None
                },
            });
        } else if settled.insert(id) {
            let to = transition(from, action)?;
            let reason = (action == Action::Park).then(|| expired_park_reason(attempts));
            writes.settle(id, to, attempts_raw, reason, micros(now));
        }
    }
    if !writes.ids.is_empty() {
        sqlx::query(sql::CLAIM_APPLY)
            .bind(micros(now))
            .bind(writes.ids)
            .bind(writes.states)
            .bind(writes.attempts)
            .bind(writes.tokens)
            .bind(writes.consumers)
            .bind(writes.expires)
            .bind(writes.due)
            .bind(writes.finished)
            .bind(writes.cancel)
            .bind(writes.reasons)
            .execute(&mut *tx)
            .await
            .map_err(map)?;
    }
    flow::record_claim(&mut tx, queue, &flow, now, out.len()).await?;
    tx.commit().await.map_err(map)?;
    Ok(out)
}

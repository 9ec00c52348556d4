//! Claim: one `BEGIN IMMEDIATE` transaction (or one savepoint of a group commit) on the writer
//! that first settles the queue's expired leases the claim does not take back (canceled or out
//! of attempts: finished by [`expiry_action`]), then hands out up to `limit` due runs in claim
//! order — one range of the partial index `spool_run_claim`, then one `UPDATE` by primary key
//! per run. The lease's backoff margin is computed in Rust ([`delay`]), which SQL cannot call.
//!
//! A claim that changes nothing (no expired lease to settle, no due run) ends in a rollback,
//! so it commits nothing, costs no fsync and wakes no subscriber.

use std::time::Duration;

use cairn_core::spool::{
    expired_park_reason, expiry_action, jitter_seed, transition, Action, BackoffPolicy, Claimed,
    ConsumerId, DedupKey, LeaseToken, QueueFlow, QueueName, RunState, Timestamp,
};
use cairn_core::Result;
use rusqlite::params;

use super::flow;
use super::row::{count, dedup_key, micros, run_id, state};
use super::sql;
use crate::db::{Db, End};

/// The backoff after `attempt` (the retry delay of a nack, the margin after a lease's expiry).
pub(super) fn delay(
    policy: &BackoffPolicy,
    queue: &QueueName,
    key: &DedupKey,
    attempt: u32,
) -> Duration {
    policy.delay(attempt, jitter_seed(queue, key, attempt))
}

/// Finishes `queue`'s expired leases that are not reclaimed (a cancel was requested, or the
/// attempts are spent: parked); a reclaimable one is left for the claim to take back. Says
/// whether it wrote anything.
pub(super) fn settle_expired_tx(db: &Db<'_>, queue: &QueueName, now: Timestamp) -> Result<bool> {
    let mut wrote = false;
    let expired: Vec<(i64, i64, i64, bool)> =
        db.rows(sql::EXPIRED, params![queue.as_str(), micros(now)], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?;
    for (run_no, attempts, max_attempts, cancel_requested) in expired {
        let attempts = count(attempts, "attempt count")?;
        let max_attempts = count(max_attempts, "attempt limit")?;
        let action = expiry_action(attempts, max_attempts, cancel_requested);
        if action == Action::Reclaim {
            continue;
        }
        let to = transition(RunState::Claimed, action)?;
        let reason = (action == Action::Park).then(|| expired_park_reason(attempts));
        db.exec(
            sql::FINISH,
            params![run_no, to.as_str(), reason, micros(now)],
        )?;
        wrote = true;
    }
    Ok(wrote)
}

/// A candidate's `run_no`, run id, dedup key, state, attempts, payload and trace context.
type CandidateRow = (i64, Vec<u8>, Vec<u8>, String, i64, Vec<u8>, Option<String>);

/// A row of [`sql::CANDIDATES`] (no trace context: a store before revision `0009_spool_flow`
/// has no such column), or with `traced` of [`sql::CANDIDATES_FLOW`] / [`sql::CANDIDATE`].
fn candidate_row(traced: bool) -> impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<CandidateRow> {
    move |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            if traced { r.get(6)? } else { None },
        ))
    }
}

/// Claims up to `limit` due runs of `queue` for `consumer`, each leased until `now + lease`
/// and due again after that plus the backoff of the attempt it starts. With `flow` (the store
/// holds revision `0009_spool_flow`) the queue's stored flow is read first: a paused queue
/// hands out and settles nothing, a limited one picks within its limits (`flow::pick_limited`),
/// and each run's trace context is read with it (before the revision: `None`).
#[allow(clippy::too_many_arguments)]
pub(super) fn claim_tx(
    db: &Db<'_>,
    queue: &QueueName,
    consumer: &ConsumerId,
    lease: Duration,
    limit: usize,
    now: Timestamp,
    backoff: &BackoffPolicy,
    flow: bool,
) -> Result<Vec<Claimed>> {
    db.write_tx(|db| {
        let traced = flow;
        let flow = if flow {
            flow::flow_q(db, queue)?
        } else {
            QueueFlow::default()
        };
        if flow.paused {
            return Ok((Vec::new(), End::Rollback));
        }
        let wrote = settle_expired_tx(db, queue, now)?;
        let rows: Vec<CandidateRow> = if flow.limited() {
            let mut rows = Vec::new();
            for run_no in flow::pick_limited(db, queue, &flow, now, limit)? {
                rows.extend(db.rows(sql::CANDIDATE, params![run_no], candidate_row(true))?);
            }
            rows
        } else {
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let candidates = if traced {
                sql::CANDIDATES_FLOW
            } else {
                sql::CANDIDATES
            };
            db.rows(
                candidates,
                params![queue.as_str(), micros(now), limit],
                candidate_row(traced),
            )?
        };
        let expires_at = now.saturating_add(lease);
        let mut out = Vec::with_capacity(rows.len());
        for (run_no, id, key, from, attempts, payload, traceparent) in rows {
            let from = state(&from)?;
            let action = if from == RunState::Queued {
                Action::Claim
            } else {
                Action::Reclaim
            };
            let to = transition(from, action)?;
            let attempt = count(attempts, "attempt count")?.saturating_add(1);
            let key = dedup_key(key)?;
            let due = expires_at.saturating_add(delay(backoff, queue, &key, attempt));
            let token = LeaseToken::generate();
            db.exec(
                sql::TAKE,
                params![
                    run_no,
                    to.as_str(),
                    attempt,
                    micros(now),
                    token.as_bytes(),
                    consumer.as_str(),
                    micros(expires_at),
                    micros(due)
                ],
            )?;
            out.push(Claimed {
                run_id: run_id(&id)?,
                dedup_key: key,
                payload,
                attempt,
                token,
                expires_at,
                traceparent: flow::traceparent_of(traceparent)?,
            });
        }
        flow::record_claim(db, queue, &flow, now, out.len())?;
        let end = if wrote || !out.is_empty() {
            End::Commit
        } else {
            End::Rollback
        };
        Ok((out, end))
    })
}

//! Settling a lease — heartbeat, ack, nack, release — and cancel, and an operator's retry or
//! discard of a parked run ([`unpark_tx`]): each one `BEGIN IMMEDIATE`
//! transaction on the writer (all but cancel: one savepoint of a group commit) that reads the
//! run's lease ([`lease_row`]), checks the caller's token (cancel takes none) and decides the
//! state change with cairn-core's pure functions.
//!
//! A write that changes nothing (a repeated ack, a second cancel request) ends in a rollback,
//! so it commits nothing, costs no fsync and wakes no subscriber.

use std::time::Duration;

use cairn_core::spool::{
    check_operator, check_token, clip_reason, exhausted_park_reason, nack_action, operator_event,
    release_action, transition, Action, BackoffPolicy, CancelOutcome, DedupKey, Heartbeat,
    LeaseToken, NackKind, Nacked, QueueName, RunId, RunState, Timestamp, Unparked,
};
use cairn_core::{Error, Result};
use rusqlite::params;

use super::claim::delay;
use super::row::{count, dedup_key, len_i64, micros, non_negative, state};
use super::sql;
use crate::db::{Db, End};
use crate::error::corrupt;

/// What the lease operations decide from.
struct LeaseRow {
    run_no: i64,
    queue: QueueName,
    key: DedupKey,
    state: RunState,
    attempts: u32,
    max_attempts: u32,
    cancel_requested: bool,
    token: Option<LeaseToken>,
}

type LeaseTuple = (
    i64,
    String,
    Vec<u8>,
    String,
    i64,
    i64,
    bool,
    Option<Vec<u8>>,
);

/// The lease state of `run`.
///
/// # Errors
/// [`Error::UnknownRun`] when no such run is stored.
fn lease_row(db: &Db<'_>, run: RunId) -> Result<LeaseRow> {
    let rows: Vec<LeaseTuple> = db.rows(sql::LEASE_STATE, params![run.as_bytes()], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
            r.get(7)?,
        ))
    })?;
    let Some((run_no, queue, key, st, attempts, max_attempts, cancel_requested, token)) =
        rows.into_iter().next()
    else {
        return Err(Error::UnknownRun { run });
    };
    Ok(LeaseRow {
        run_no,
        queue: QueueName::new(queue).map_err(|_| corrupt("a stored queue name is invalid"))?,
        key: dedup_key(key)?,
        state: state(&st)?,
        attempts: count(attempts, "attempt count")?,
        max_attempts: count(max_attempts, "attempt limit")?,
        cancel_requested,
        token: token
            .map(|t| {
                LeaseToken::from_slice(&t)
                    .map_err(|_| corrupt("a stored lease token is not 16 bytes"))
            })
            .transpose()?,
    })
}

/// Extends `run`'s lease to `now + lease` (and its due time past that by the backoff).
pub(super) fn heartbeat_tx(
    db: &Db<'_>,
    run: RunId,
    token: LeaseToken,
    lease: Duration,
    now: Timestamp,
    backoff: &BackoffPolicy,
) -> Result<Heartbeat> {
    db.write_tx(|db| {
        let row = lease_row(db, run)?;
        check_token(run, row.token, token)?;
        transition(row.state, Action::Heartbeat)?;
        let expires_at = now.saturating_add(lease);
        let due = expires_at.saturating_add(delay(backoff, &row.queue, &row.key, row.attempts));
        db.exec(
            sql::EXTEND,
            params![row.run_no, micros(expires_at), micros(due)],
        )?;
        let beat = Heartbeat {
            expires_at,
            cancel_requested: row.cancel_requested,
        };
        Ok((beat, End::Commit))
    })
}

/// Finishes `run` as succeeded; a repeated ack of a succeeded run writes nothing.
pub(super) fn ack_tx(db: &Db<'_>, run: RunId, token: LeaseToken, now: Timestamp) -> Result<()> {
    db.write_tx(|db| {
        let row = lease_row(db, run)?;
        check_token(run, row.token, token)?;
        let to = transition(row.state, Action::Ack)?;
        if to == row.state {
            // A repeated ack of a succeeded run: nothing to write.
            return Ok(((), End::Rollback));
        }
        db.exec(sql::ACK, params![row.run_no, to.as_str(), micros(now)])?;
        Ok(((), End::Commit))
    })
}

/// How long a run a nack queues again waits.
#[derive(Clone, Copy, Debug)]
pub(super) enum RetryWait {
    /// The queue's backoff for the attempt ([`Spool::nack`](cairn_core::Spool::nack)).
    Backoff(BackoffPolicy),
    /// The caller's own delay ([`Spool::retry_after`](cairn_core::Spool::retry_after)).
    Fixed(Duration),
}

/// A nack's outcome and, for a retry, the queue whose subscribers to wake.
pub(super) fn nack_tx(
    db: &Db<'_>,
    run: RunId,
    token: LeaseToken,
    kind: NackKind,
    reason: &str,
    now: Timestamp,
    wait: RetryWait,
) -> Result<(Nacked, Option<QueueName>)> {
    db.write_tx(|db| {
        let row = lease_row(db, run)?;
        check_token(run, row.token, token)?;
        let action = nack_action(kind, row.attempts, row.max_attempts, row.cancel_requested);
        let to = transition(row.state, action)?;
        let reason = if action == Action::Park && kind == NackKind::Retryable {
            exhausted_park_reason(row.attempts, reason)
        } else {
            clip_reason(reason)
        };
        if to == RunState::Queued {
            let wait = match wait {
                RetryWait::Backoff(backoff) => delay(&backoff, &row.queue, &row.key, row.attempts),
                RetryWait::Fixed(d) => d,
            };
            let at = now.saturating_add(wait);
            db.exec(
                sql::RETRY,
                params![row.run_no, to.as_str(), reason, micros(now), micros(at)],
            )?;
            let nacked = Nacked {
                state: to,
                retry_at: Some(at),
            };
            return Ok(((nacked, Some(row.queue)), End::Commit));
        }
        db.exec(
            sql::FINISH,
            params![row.run_no, to.as_str(), reason, micros(now)],
        )?;
        let nacked = Nacked {
            state: to,
            retry_at: None,
        };
        Ok(((nacked, None), End::Commit))
    })
}

/// Gives `run` back (queued again after `delay`, the claim's attempt returned), or finishes it
/// as canceled when a cancel was requested.
pub(super) fn release_tx(
    db: &Db<'_>,
    run: RunId,
    token: LeaseToken,
    delay: Duration,
    now: Timestamp,
) -> Result<Nacked> {
    db.write_tx(|db| {
        let row = lease_row(db, run)?;
        check_token(run, row.token, token)?;
        let to = transition(row.state, release_action(row.cancel_requested))?;
        if to != RunState::Queued {
            db.exec(
                sql::FINISH,
                params![row.run_no, to.as_str(), None::<String>, micros(now)],
            )?;
            let nacked = Nacked {
                state: to,
                retry_at: None,
            };
            return Ok((nacked, End::Commit));
        }
        let at = now.saturating_add(delay);
        db.exec(
            sql::RELEASE,
            params![
                row.run_no,
                to.as_str(),
                row.attempts.saturating_sub(1),
                micros(now),
                micros(at)
            ],
        )?;
        let nacked = Nacked {
            state: to,
            retry_at: Some(at),
        };
        Ok((nacked, End::Commit))
    })
}

/// Cancels `run`: a queued run is canceled at once, a claimed one gets a cancel request its
/// consumer sees (a second request writes nothing).
pub(crate) fn cancel_tx(db: &Db<'_>, run: RunId, now: Timestamp) -> Result<CancelOutcome> {
    db.write_tx(|db| {
        let row = lease_row(db, run)?;
        let to = transition(row.state, Action::Cancel)?;
        if to == RunState::Claimed {
            if row.cancel_requested {
                return Ok((CancelOutcome::Requested, End::Rollback));
            }
            db.exec(sql::REQUEST_CANCEL, params![row.run_no])?;
            return Ok((CancelOutcome::Requested, End::Commit));
        }
        db.exec(
            sql::FINISH,
            params![row.run_no, to.as_str(), None::<String>, micros(now)],
        )?;
        Ok((CancelOutcome::Canceled, End::Commit))
    })
}

/// An operator's retry (`Action::Requeue`) or discard (`Action::Discard`) of a parked run, with
/// the event recording it, in one transaction. Returns the outcome and, for a retry, the queue
/// whose subscribers to wake after commit.
pub(super) fn unpark_tx(
    db: &Db<'_>,
    run: RunId,
    action: Action,
    by: &str,
    now: Timestamp,
) -> Result<(Unparked, Option<QueueName>)> {
    check_operator(by)?;
    db.write_tx(|db| {
        type Row = (i64, String, String, i64, Option<String>, i64);
        let rows: Vec<Row> = db.rows(sql::UNPARK_ROW, params![run.as_bytes()], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?;
        let Some((run_no, queue, st, attempts, reason, last)) = rows.into_iter().next() else {
            return Err(Error::UnknownRun { run });
        };
        let to = transition(state(&st)?, action)?;
        let seq = last
            .checked_add(1)
            .ok_or_else(|| corrupt("a run's event counter is exhausted"))?;
        let attempts = count(attempts, "attempt count")?;
        let (event_id, payload) = operator_event(
            action,
            non_negative(seq, "event seq")?,
            by,
            now,
            reason.as_deref(),
            attempts,
        )?;
        if to == RunState::Queued {
            db.exec(
                sql::REQUEUE_PARKED,
                params![run_no, to.as_str(), micros(now), seq],
            )?;
        } else {
            db.exec(
                sql::FINISH,
                params![run_no, to.as_str(), None::<String>, micros(now)],
            )?;
            db.exec(sql::SET_LAST_EVENT_SEQ, params![run_no, seq])?;
        }
        db.exec(
            sql::INSERT_EVENT,
            params![
                run.as_bytes(),
                seq,
                event_id.as_bytes(),
                micros(now),
                len_i64(&payload),
                payload
            ],
        )?;
        let woken = (to == RunState::Queued)
            .then(|| QueueName::new(queue))
            .transpose()
            .map_err(|_| corrupt("a stored queue name is invalid"))?;
        let unparked = Unparked {
            state: to,
            parked_reason: reason,
            event_seq: non_negative(seq, "event seq")?,
            at: now,
        };
        Ok(((unparked, woken), End::Commit))
    })
}

//! The run lifecycle's transactions — enqueue, claim, heartbeat, ack, nack, cancel — each one
//! `BEGIN IMMEDIATE` transaction on the writer, deciding every state change with cairn-core's
//! pure functions.
//!
//! A write that changes nothing (a duplicate enqueue, a repeated ack, an empty claim) ends in a
//! rollback, so it commits nothing, costs no fsync and wakes no subscriber.

use std::time::Duration;

use cairn_core::spool::{
    check_token, clip_reason, exhausted_park_reason, expired_park_reason, expiry_action,
    nack_action, release_action, transition, Action, BackoffPolicy, CancelOutcome, Claimed,
    ConsumerId, DedupKey, EnqueueOptions, Enqueued, Heartbeat, LeaseToken, NackKind, Nacked,
    QueueName, RunId, RunState, SupersedeGroup, Timestamp,
};
use cairn_core::{Error, Result};
use rusqlite::params;

use super::convert::{count, dedup_key, delay, len_i64, micros, run_id, state, ts};
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

pub(super) fn enqueue_tx(
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
    db.write_tx(|db| {
        let inserted: Vec<Vec<u8>> = db.rows(
            sql::ENQUEUE,
            params![
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
            ],
            |r| r.get(0),
        )?;
        if inserted.is_empty() {
            let existing: Vec<Vec<u8>> = db.rows(
                sql::RUN_ID_BY_KEY,
                params![queue.as_str(), key.as_bytes()],
                |r| r.get(0),
            )?;
            let existing = existing
                .first()
                .ok_or_else(|| corrupt("an enqueue conflicted with a run that is not there"))?;
            let found = Enqueued {
                run_id: run_id(existing)?,
                created: false,
            };
            return Ok((found, End::Rollback));
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
        let created = Enqueued {
            run_id: id,
            created: true,
        };
        Ok((created, End::Commit))
    })
}

type CandidateRow = (i64, Vec<u8>, Vec<u8>, String, i64, Vec<u8>);

#[allow(clippy::too_many_arguments)]
pub(super) fn claim_tx(
    db: &Db<'_>,
    queue: &QueueName,
    consumer: &ConsumerId,
    lease: Duration,
    limit: usize,
    now: Timestamp,
    backoff: &BackoffPolicy,
) -> Result<Vec<Claimed>> {
    db.write_tx(|db| {
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
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<CandidateRow> = db.rows(
            sql::CANDIDATES,
            params![queue.as_str(), micros(now), limit],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            },
        )?;
        let expires_at = now.saturating_add(lease);
        let mut out = Vec::with_capacity(rows.len());
        for (run_no, id, key, from, attempts, payload) in rows {
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
            });
        }
        let end = if wrote || !out.is_empty() {
            End::Commit
        } else {
            End::Rollback
        };
        Ok((out, end))
    })
}

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

pub(super) fn ack_tx(db: &Db<'_>, run: RunId, token: LeaseToken, now: Timestamp) -> Result<()> {
    db.write_tx(|db| {
        let row = lease_row(db, run)?;
        check_token(run, row.token, token)?;
        let to = transition(row.state, Action::Ack)?;
        if to == row.state {
            // A repeated ack of a succeeded run: nothing to write.
            return Ok(((), End::Rollback));
        }
        db.exec(
            sql::FINISH,
            params![row.run_no, to.as_str(), None::<String>, micros(now)],
        )?;
        Ok(((), End::Commit))
    })
}

/// A nack's outcome and, for a retry, the queue whose subscribers to wake.
pub(super) fn nack_tx(
    db: &Db<'_>,
    run: RunId,
    token: LeaseToken,
    kind: NackKind,
    reason: &str,
    now: Timestamp,
    backoff: &BackoffPolicy,
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
            let at = now.saturating_add(delay(backoff, &row.queue, &row.key, row.attempts));
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

pub(super) fn cancel_tx(db: &Db<'_>, run: RunId, now: Timestamp) -> Result<CancelOutcome> {
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

pub(super) fn next_due_q(db: &Db<'_>, queue: &QueueName) -> Result<Option<Timestamp>> {
    let due: Vec<Option<i64>> = db.rows(sql::NEXT_DUE, params![queue.as_str()], |r| r.get(0))?;
    Ok(due.into_iter().flatten().next().map(ts))
}

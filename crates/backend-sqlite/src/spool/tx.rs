//! The spool's transactions: one function per operation, each one `BEGIN IMMEDIATE`
//! transaction on the writer (or one read transaction on a read connection), deciding every
//! state change with cairn-core's pure functions.
//!
//! A write that changes nothing (a duplicate enqueue, a repeated ack, an empty claim) ends in a
//! rollback, so it commits nothing, costs no fsync and wakes no subscriber.

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_core::spool::{
    check_token, clip_reason, exhausted_park_reason, expired_park_reason, expiry_action,
    jitter_seed, nack_action, transition, Action, BackoffPolicy, CancelOutcome, Claimed,
    ConsumerId, DedupKey, EnqueueOptions, Enqueued, EventAppended, EventBatch, EventMeta, FactName,
    FactOutcome, Heartbeat, LeaseInfo, LeaseToken, NackKind, Nacked, QueueName, RetentionPass,
    RunEvent, RunEventId, RunFilter, RunId, RunInfo, RunMeta, RunState, SpoolStats, SupersedeGroup,
    Timestamp,
};
use cairn_core::{Error, Result};
use rusqlite::{params, Row};

use super::sql;
use crate::db::{Db, End};
use crate::error::corrupt;

fn micros(t: Timestamp) -> i64 {
    t.as_unix_micros()
}

fn ts(micros: i64) -> Timestamp {
    Timestamp::from_unix_micros(micros)
}

fn len_i64(bytes: &[u8]) -> i64 {
    i64::try_from(bytes.len()).unwrap_or(i64::MAX)
}

fn count(n: i64, what: &str) -> Result<u32> {
    u32::try_from(n).map_err(|_| corrupt(format!("a stored {what} is out of range")))
}

fn non_negative(n: i64, what: &str) -> Result<u64> {
    u64::try_from(n).map_err(|_| corrupt(format!("a stored {what} is negative")))
}

fn run_id(bytes: &[u8]) -> Result<RunId> {
    RunId::from_slice(bytes).map_err(|_| corrupt("a stored run id is not 16 bytes"))
}

fn state(s: &str) -> Result<RunState> {
    RunState::parse(s).map_err(|_| corrupt("a stored run state is unknown"))
}

fn dedup_key(bytes: Vec<u8>) -> Result<DedupKey> {
    DedupKey::from_bytes(bytes).map_err(|_| corrupt("a stored dedup key is out of bounds"))
}

/// The backoff after `attempt` (the retry delay of a nack, the margin after a lease's expiry).
fn delay(policy: &BackoffPolicy, queue: &QueueName, key: &DedupKey, attempt: u32) -> Duration {
    policy.delay(attempt, jitter_seed(queue, key, attempt))
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
    })
}

fn facts_of(db: &Db<'_>, run: &[u8]) -> Result<BTreeMap<FactName, Vec<u8>>> {
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

fn run_info(db: &Db<'_>, row: InfoRow) -> Result<RunInfo> {
    let lease = match (row.consumer, row.expires_at) {
        (Some(consumer), Some(expires_at)) => Some(LeaseInfo {
            consumer: ConsumerId::new(consumer)
                .map_err(|_| corrupt("a stored consumer id is invalid"))?,
            expires_at: ts(expires_at),
        }),
        _ => None,
    };
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
    })
}

pub(super) fn run_tx(db: &Db<'_>, run: RunId) -> Result<Option<RunInfo>> {
    db.read_tx(|db| {
        let rows = db.rows(sql::RUN_INFO, params![run.as_bytes()], info_row)?;
        rows.into_iter()
            .next()
            .map(|row| run_info(db, row))
            .transpose()
    })
}

pub(super) fn runs_tx(db: &Db<'_>, filter: &RunFilter, limit: usize) -> Result<Vec<RunInfo>> {
    let after: &[u8] = filter.after.as_ref().map_or(&[], |id| id.as_bytes());
    let queue = filter.queue.as_ref().map(QueueName::as_str);
    let st = filter.state.map(RunState::as_str);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    db.read_tx(|db| {
        db.rows(sql::RUNS_PAGE, params![after, queue, st, limit], info_row)?
            .into_iter()
            .map(|row| run_info(db, row))
            .collect()
    })
}

pub(super) fn stats_tx(db: &Db<'_>) -> Result<SpoolStats> {
    db.read_tx(|db| {
        let mut stats = SpoolStats::default();
        for (st, n) in db.rows(sql::STATE_COUNTS, [], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })? {
            stats
                .runs
                .insert(state(&st)?, non_negative(n, "run count")?);
        }
        let oldest: Vec<Option<i64>> = db.rows(sql::OLDEST_QUEUED, [], |r| r.get(0))?;
        stats.oldest_queued = oldest.into_iter().flatten().next().map(ts);
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

fn require_run(db: &Db<'_>, run: RunId) -> Result<()> {
    let found: Vec<i64> = db.rows(sql::RUN_EXISTS, params![run.as_bytes()], |r| r.get(0))?;
    if found.is_empty() {
        Err(Error::UnknownRun { run })
    } else {
        Ok(())
    }
}

pub(super) fn append_event_tx(
    db: &Db<'_>,
    run: RunId,
    event_id: &RunEventId,
    payload: &[u8],
    now: Timestamp,
) -> Result<EventAppended> {
    db.write_tx(|db| {
        let heads: Vec<(i64, i64)> =
            db.rows(sql::LAST_EVENT_SEQ, params![run.as_bytes()], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        let Some((run_no, last)) = heads.into_iter().next() else {
            return Err(Error::UnknownRun { run });
        };
        let held: Vec<i64> = db.rows(
            sql::EVENT_SEQ_BY_ID,
            params![run.as_bytes(), event_id.as_bytes()],
            |r| r.get(0),
        )?;
        if let Some(seq) = held.first() {
            let seq = non_negative(*seq, "event seq")?;
            return Ok((
                EventAppended {
                    seq,
                    created: false,
                },
                End::Rollback,
            ));
        }
        let seq = last
            .checked_add(1)
            .ok_or_else(|| corrupt("a run's event counter is exhausted"))?;
        db.exec(
            sql::INSERT_EVENT,
            params![
                run.as_bytes(),
                seq,
                event_id.as_bytes(),
                micros(now),
                len_i64(payload),
                payload
            ],
        )?;
        db.exec(sql::SET_LAST_EVENT_SEQ, params![run_no, seq])?;
        let appended = EventAppended {
            seq: non_negative(seq, "event seq")?,
            created: true,
        };
        Ok((appended, End::Commit))
    })
}

pub(super) fn events_tx(
    db: &Db<'_>,
    run: RunId,
    after: u64,
    limit: usize,
) -> Result<Vec<RunEvent>> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    db.read_tx(|db| {
        require_run(db, run)?;
        db.rows(
            sql::EVENTS_AFTER,
            params![run.as_bytes(), after, limit],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            },
        )?
        .into_iter()
        .map(|(seq, id, payload, created_at)| {
            Ok(RunEvent {
                seq: non_negative(seq, "event seq")?,
                event_id: RunEventId::new(id)
                    .map_err(|_| corrupt("a stored event id is out of bounds"))?,
                payload,
                created_at: ts(created_at),
            })
        })
        .collect()
    })
}

pub(super) fn acknowledge_events_tx(
    db: &Db<'_>,
    run: RunId,
    event_ids: &[RunEventId],
) -> Result<u64> {
    db.write_tx(|db| {
        require_run(db, run)?;
        let mut removed = 0u64;
        for id in event_ids {
            removed += db.exec(
                sql::DELETE_EVENT_BY_ID,
                params![run.as_bytes(), id.as_bytes()],
            )? as u64;
        }
        let end = if removed > 0 {
            End::Commit
        } else {
            End::Rollback
        };
        Ok((removed, end))
    })
}

pub(super) fn set_fact_tx(
    db: &Db<'_>,
    run: RunId,
    name: &FactName,
    value: &[u8],
    now: Timestamp,
) -> Result<FactOutcome> {
    db.write_tx(|db| {
        require_run(db, run)?;
        let inserted = db.exec(
            sql::INSERT_FACT,
            params![run.as_bytes(), name.as_str(), micros(now), value],
        )?;
        if inserted == 1 {
            return Ok((FactOutcome::Set, End::Commit));
        }
        let stored: Vec<Vec<u8>> = db.rows(
            sql::FACT_VALUE,
            params![run.as_bytes(), name.as_str()],
            |r| r.get(0),
        )?;
        let existing = stored
            .into_iter()
            .next()
            .ok_or_else(|| corrupt("a fact insert conflicted with a fact that is not there"))?;
        if existing == value {
            Ok((FactOutcome::AlreadySet, End::Rollback))
        } else {
            Err(Error::FactConflict {
                name: name.clone(),
                existing,
            })
        }
    })
}

pub(super) fn facts_tx(db: &Db<'_>, run: RunId) -> Result<BTreeMap<FactName, Vec<u8>>> {
    db.read_tx(|db| {
        require_run(db, run)?;
        facts_of(db, run.as_bytes())
    })
}

/// One event batch of a retention pass: reads the oldest events and the total, lets `pass`
/// plan the batch and deletes it, all in one transaction.
pub(super) fn retention_events_tx(db: &Db<'_>, pass: &RetentionPass) -> Result<EventBatch> {
    let window = i64::try_from(pass.batch_size()).unwrap_or(i64::MAX);
    db.write_tx(|db| {
        let total: Vec<i64> = db.rows(sql::EVENT_BYTES, [], |r| r.get(0))?;
        let total = non_negative(total.first().copied().unwrap_or(0), "event size")?;
        let oldest = db
            .rows(sql::OLDEST_EVENTS, params![window], |r| {
                Ok((
                    r.get::<_, Vec<u8>>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })?
            .into_iter()
            .map(|(run, seq, created_at, bytes)| {
                Ok(EventMeta {
                    run: run_id(&run)?,
                    seq: non_negative(seq, "event seq")?,
                    created_at: ts(created_at),
                    bytes: non_negative(bytes, "event size")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let batch = pass.plan_events(total, &oldest);
        for (run, seq) in &batch.events {
            let seq = i64::try_from(*seq).map_err(|_| corrupt("an event seq is out of range"))?;
            db.exec(sql::DELETE_EVENT, params![run.as_bytes(), seq])?;
        }
        let end = if batch.events.is_empty() {
            End::Rollback
        } else {
            End::Commit
        };
        Ok((batch, end))
    })
}

/// One run batch of a retention pass: terminal runs without events finished before the
/// cutoff, with their facts, in one transaction. Returns how many were removed.
pub(super) fn retention_runs_tx(db: &Db<'_>, pass: &RetentionPass) -> Result<usize> {
    let window = i64::try_from(pass.batch_size()).unwrap_or(i64::MAX);
    let cutoff = micros(pass.cutoff());
    db.write_tx(|db| {
        let candidates = db
            .rows(sql::REMOVABLE_RUNS, params![cutoff, window], |r| {
                Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?))
            })?
            .into_iter()
            .map(|(run, finished_at)| {
                Ok(RunMeta {
                    run: run_id(&run)?,
                    finished_at: ts(finished_at),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let ids = pass.plan_runs(&candidates);
        for id in &ids {
            db.exec(sql::DELETE_FACTS, params![id.as_bytes()])?;
            db.exec(sql::DELETE_RUN, params![id.as_bytes()])?;
        }
        let end = if ids.is_empty() {
            End::Rollback
        } else {
            End::Commit
        };
        Ok((ids.len(), end))
    })
}

pub(super) fn next_due_q(db: &Db<'_>, queue: &QueueName) -> Result<Option<Timestamp>> {
    let due: Vec<Option<i64>> = db.rows(sql::NEXT_DUE, params![queue.as_str()], |r| r.get(0))?;
    Ok(due.into_iter().flatten().next().map(ts))
}

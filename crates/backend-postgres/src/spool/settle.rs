//! Settling a claimed run: heartbeat, ack (with its batch lane), nack, release, cancel; and an
//! operator's retry or discard of a parked run ([`unpark_tx`], one transaction holding the run
//! row's lock). Each of the others
//! decides with the core's pure functions (`transition`, `nack_action`, `check_token`, the
//! backoff) on the run as read, and writes back with one compare-and-set statement
//! ([`sql::WRITE_RUN`]) that applies only if the run still holds what was read; a run that
//! changed meanwhile is read and decided again. An ack is one statement ([`sql::ACK`]) that
//! applies only to the claimed run with its token; concurrent acks of one spool share one
//! statement ([`sql::ACK_MANY`]) on the ack lane.
//!
//! Invariants of the ack lane (tests: `crates/backend-postgres/tests/spool/ack_batch.rs`):
//! - **Answered after commit.** An ack is answered `Ok` only after the statement that wrote it
//!   returned, i.e. committed.
//! - **Only the applied acks are answered by the batch.** An ack the statement did not apply
//!   (a stale token, a run already acked or otherwise ended, a lease lost, an unknown run, the
//!   second of two acks of one run) runs alone on the unbatched path afterwards and gets
//!   exactly the result it gets without batching (a repeated ack with its own token is `Ok`, a
//!   stale token is [`cairn_core::Error::LeaseLost`], …).
//! - **Failures stay with their owner.** If the batch statement fails (a lock timeout, a
//!   deadlock with another instance's batch, a dropped connection), nothing of it was written,
//!   and every ack of the batch runs again alone on the unbatched path. [`sql::ACK_MANY`]
//!   writes each run exactly what [`sql::ACK`] writes (the succeeded state, `updated_at` and
//!   `finished_at` at that ack's own time, lease, due time, cancel flag and reason cleared);
//!   like the single ack, it notifies nobody.

use std::collections::HashSet;
use std::time::Duration;

use cairn_core::spool::{
    check_lease, check_operator, check_release_delay, check_token, clip_reason,
    exhausted_park_reason, nack_action, operator_event, release_action, transition, Action,
    CancelOutcome, DedupKey, Heartbeat, LeaseToken, NackKind, Nacked, QueueName, RunId, RunState,
    Timestamp, Unparked,
};
use cairn_core::{Error, Result};
use sqlx::{PgConnection, PgExecutor};

use super::batched::PendingAck;
use super::handle::PgSpool;
use super::keys::{changed_too_often, wake_channel, CAS_ROUNDS};
use super::lane::{answer, Reply};
use super::row::{
    bytes_len, claim_jitter, count, get, micros, next_attempt, run_id, state, u32_of, RunRow,
};
use super::sql;
use crate::error::{map, rolled_back};

/// Acks one batch takes at most.
const MAX_ACKS: usize = 256;

/// What the model's `Run::enter` does: a terminal state drops the lease, the due time and the
/// cancel request and records when the run finished.
fn enter(r: &mut RunRow, to: RunState, now: Timestamp) {
    r.state = to;
    r.updated_at = now;
    if to.is_terminal() {
        r.due_at = None;
        r.finished_at = Some(now);
        r.consumer = None;
        r.lease_expires_at = None;
        r.cancel_requested = false;
    }
}

async fn read_run<'e>(on: impl PgExecutor<'e>, run: RunId) -> Result<Option<RunRow>> {
    let row = sqlx::query(sql::READ_RUN)
        .bind(run.as_bytes().as_slice())
        .fetch_optional(on)
        .await
        .map_err(map)?;
    row.as_ref().map(RunRow::from_row).transpose()
}

async fn read_existing<'e>(on: impl PgExecutor<'e>, run: RunId) -> Result<RunRow> {
    read_run(on, run).await?.ok_or(Error::UnknownRun { run })
}

async fn write_run<'e>(
    s: &PgSpool,
    on: impl PgExecutor<'e>,
    before: &RunRow,
    after: &RunRow,
    wake: bool,
) -> Result<Option<bool>> {
    // Only a queued run is claimed, so only it needs the claim jitter (no hash on the
    // heartbeat's and the lone ack's path).
    let queued = after.state == RunState::Queued;
    let row = sqlx::query(sql::WRITE_RUN)
        .bind(before.run_id.as_bytes().as_slice())
        .bind(before.state.as_str())
        .bind(before.token.map(|t| t.as_bytes().to_vec()))
        .bind(before.cancel_requested)
        .bind(after.state.as_str())
        .bind(micros(after.updated_at))
        .bind(after.due_at.map(micros))
        .bind(after.finished_at.map(micros))
        .bind(after.consumer.as_ref().map(|c| c.as_str().to_owned()))
        .bind(after.lease_expires_at.map(micros))
        .bind(after.cancel_requested)
        .bind(after.reason.clone())
        .bind(wake)
        .bind(wake_channel(&s.inner.schema, &after.queue))
        .bind(queued.then(|| next_attempt(after.attempts)).flatten())
        .bind(
            queued
                .then(|| claim_jitter(&after.queue, &after.dedup_key, after.attempts))
                .flatten(),
        )
        .fetch_optional(on)
        .await
        .map_err(map)?;
    row.map(|r| get::<bool>(&r, 0)).transpose()
}

pub(super) async fn heartbeat_tx(
    s: &PgSpool,
    run: RunId,
    token: LeaseToken,
    lease: Duration,
    now: Timestamp,
) -> Result<Heartbeat> {
    check_lease(lease)?;
    for _ in 0..CAS_ROUNDS {
        let before = read_existing(s.pool(), run).await?;
        check_token(run, before.token, token)?;
        let to = transition(before.state, Action::Heartbeat)?;
        let expires_at = now.saturating_add(lease);
        let delay = s.retry_delay(&before.queue, &before.dedup_key, before.attempts);
        let mut after = before.clone();
        after.state = to;
        after.lease_expires_at = Some(expires_at);
        after.due_at = Some(expires_at.saturating_add(delay));
        if let Some(cancel_requested) =
            autocommit!(s, |on| write_run(s, on, &before, &after, false).await)?
        {
            return Ok(Heartbeat {
                expires_at,
                cancel_requested,
            });
        }
    }
    Err(changed_too_often(run))
}

pub(super) async fn ack_tx(
    s: &PgSpool,
    run: RunId,
    token: LeaseToken,
    now: Timestamp,
) -> Result<()> {
    let succeeded = transition(RunState::Claimed, Action::Ack)?;
    // Concurrent acks share one statement (the ack lane); a lone ack, and one the
    // batch did not apply, runs the single statement below.
    if ack_batched(s, PendingAck { run, token, now })
        .await?
        .is_some()
    {
        return Ok(());
    }
    for _ in 0..CAS_ROUNDS {
        let done = autocommit!(s, |on| sqlx::query(sql::ACK)
            .bind(run.as_bytes().as_slice())
            .bind(token.as_bytes().as_slice())
            .bind(succeeded.as_str())
            .bind(micros(now))
            .fetch_one(on)
            .await
            .map_err(map))?;
        if get::<i64>(&done, 0)? == 1 {
            return Ok(());
        }
        let before = read_existing(s.pool(), run).await?;
        check_token(run, before.token, token)?;
        let to = transition(before.state, Action::Ack)?;
        if before.state == to {
            // A repeated ack of the run this token acked.
            return Ok(());
        }
    }
    Err(changed_too_often(run))
}

/// A nack; a run queued again is due after `retry_in`, or after the queue's backoff without one.
pub(super) async fn nack_tx(
    s: &PgSpool,
    run: RunId,
    token: LeaseToken,
    kind: NackKind,
    reason: &str,
    now: Timestamp,
    retry_in: Option<Duration>,
) -> Result<Nacked> {
    for _ in 0..CAS_ROUNDS {
        let before = read_existing(s.pool(), run).await?;
        check_token(run, before.token, token)?;
        let action = nack_action(
            kind,
            before.attempts,
            before.max_attempts,
            before.cancel_requested,
        );
        let to = transition(before.state, action)?;
        let mut after = before.clone();
        after.reason = Some(if action == Action::Park && kind == NackKind::Retryable {
            exhausted_park_reason(before.attempts, reason)
        } else {
            clip_reason(reason)
        });
        let mut retry_at = None;
        if to == RunState::Queued {
            let wait = retry_in.unwrap_or_else(|| {
                s.retry_delay(&before.queue, &before.dedup_key, before.attempts)
            });
            let at = now.saturating_add(wait);
            after.state = to;
            after.updated_at = now;
            after.consumer = None;
            after.lease_expires_at = None;
            after.due_at = Some(at);
            retry_at = Some(at);
        } else {
            enter(&mut after, to, now);
        }
        let wake = to == RunState::Queued;
        if autocommit!(s, |on| write_run(s, on, &before, &after, wake).await)?.is_some() {
            return Ok(Nacked {
                state: to,
                retry_at,
            });
        }
    }
    Err(changed_too_often(run))
}

pub(super) async fn release_tx(
    s: &PgSpool,
    run: RunId,
    token: LeaseToken,
    delay: Duration,
    now: Timestamp,
) -> Result<Nacked> {
    check_release_delay(delay)?;
    for _ in 0..CAS_ROUNDS {
        let before = read_existing(s.pool(), run).await?;
        check_token(run, before.token, token)?;
        let to = transition(before.state, release_action(before.cancel_requested))?;
        if to != RunState::Queued {
            let mut after = before.clone();
            enter(&mut after, to, now);
            if autocommit!(s, |on| write_run(s, on, &before, &after, false).await)?.is_some() {
                return Ok(Nacked {
                    state: to,
                    retry_at: None,
                });
            }
            continue;
        }
        let at = now.saturating_add(delay);
        let attempts = i32::try_from(before.attempts)
            .map_err(|_| Error::corrupt("an attempt count out of range in the spool tables"))?;
        let left = before.attempts.saturating_sub(1);
        let applied = autocommit!(s, |on| sqlx::query(sql::RELEASE)
            .bind(run.as_bytes().as_slice())
            .bind(token.as_bytes().as_slice())
            .bind(attempts)
            .bind(to.as_str())
            .bind(micros(now))
            .bind(micros(at))
            .bind(next_attempt(left))
            .bind(claim_jitter(&before.queue, &before.dedup_key, left))
            .fetch_optional(on)
            .await
            .map_err(map))?;
        if applied.is_some() {
            return Ok(Nacked {
                state: to,
                retry_at: Some(at),
            });
        }
    }
    Err(changed_too_often(run))
}

pub(super) async fn cancel_tx(s: &PgSpool, run: RunId, now: Timestamp) -> Result<CancelOutcome> {
    let mut conn = s.pool().acquire().await.map_err(map)?;
    let done = cancel_on(s, &mut conn, run, now).await;
    s.finish(conn, done).await
}

/// [`cancel_tx`] on `conn`: on a pooled connection in autocommit, or inside a transaction
/// (the caller's), where the run row's write lock is then held until it ends.
pub(crate) async fn cancel_on(
    s: &PgSpool,
    conn: &mut PgConnection,
    run: RunId,
    now: Timestamp,
) -> Result<CancelOutcome> {
    for _ in 0..CAS_ROUNDS {
        let before = read_existing(&mut *conn, run).await?;
        let to = transition(before.state, Action::Cancel)?;
        let mut after = before.clone();
        let outcome = if to == RunState::Claimed {
            after.cancel_requested = true;
            CancelOutcome::Requested
        } else {
            enter(&mut after, to, now);
            CancelOutcome::Canceled
        };
        if write_run(s, &mut *conn, &before, &after, false)
            .await?
            .is_some()
        {
            return Ok(outcome);
        }
    }
    Err(changed_too_often(run))
}

/// An operator's retry (`Action::Requeue`) or discard (`Action::Discard`) of a parked run and
/// the event recording it, in one transaction that holds the run row's lock
/// ([`sql::UNPARK_ROW`]); a retry's `NOTIFY` is sent on commit.
pub(super) async fn unpark_tx(
    s: &PgSpool,
    run: RunId,
    action: Action,
    by: &str,
    now: Timestamp,
) -> Result<Unparked> {
    check_operator(by)?;
    let mut tx = s.pool().begin().await.map_err(map)?;
    // The row is locked (FOR UPDATE) from the first statement: a refusal rolls back before it
    // answers (see `crate::error::rolled_back`).
    let done: Result<(RunState, Option<String>, i64)> = async {
        let row = sqlx::query(sql::UNPARK_ROW)
            .bind(run.as_bytes().as_slice())
            .fetch_optional(&mut *tx)
            .await
            .map_err(map)?
            .ok_or(Error::UnknownRun { run })?;
        let queue = QueueName::new(get::<String>(&row, 0)?)
            .map_err(|_| Error::corrupt("an invalid queue name in the spool tables"))?;
        let key = DedupKey::from_bytes(get::<Vec<u8>>(&row, 1)?)
            .map_err(|_| Error::corrupt("an invalid dedup key in the spool tables"))?;
        let to = transition(state(&get::<String>(&row, 2)?)?, action)?;
        let attempts = u32_of(get(&row, 3)?)?;
        let reason: Option<String> = get(&row, 4)?;
        let seq = get::<i64>(&row, 5)?
            .checked_add(1)
            .ok_or_else(|| Error::corrupt("a run's event counter is exhausted"))?;
        let (event_id, payload) =
            operator_event(action, count(seq)?, by, now, reason.as_deref(), attempts)?;
        let update = if to == RunState::Queued {
            sqlx::query(sql::REQUEUE_PARKED)
                .bind(run.as_bytes().as_slice())
                .bind(to.as_str())
                .bind(micros(now))
                .bind(seq)
                .bind(next_attempt(0))
                .bind(claim_jitter(&queue, &key, 0))
        } else {
            sqlx::query(sql::DISCARD_PARKED)
                .bind(run.as_bytes().as_slice())
                .bind(to.as_str())
                .bind(micros(now))
                .bind(seq)
        };
        update.execute(&mut *tx).await.map_err(map)?;
        sqlx::query(sql::INSERT_OPERATOR_EVENT)
            .bind(run.as_bytes().as_slice())
            .bind(seq)
            .bind(event_id.as_bytes())
            .bind(micros(now))
            .bind(bytes_len(payload.len()))
            .bind(payload.as_slice())
            .execute(&mut *tx)
            .await
            .map_err(map)?;
        if to == RunState::Queued {
            sqlx::query(sql::NOTIFY)
                .bind(wake_channel(&s.inner.schema, &queue))
                .execute(&mut *tx)
                .await
                .map_err(map)?;
        }
        Ok((to, reason, seq))
    }
    .await;
    let (to, reason, seq) = match done {
        Ok(d) => d,
        Err(e) => return Err(rolled_back(tx, e).await),
    };
    tx.commit().await.map_err(map)?;
    Ok(Unparked {
        state: to,
        parked_reason: reason,
        event_seq: count(seq)?,
        at: now,
    })
}

/// Queues the ack for the next batch and waits for its answer: `Some(())` when a committed
/// batch statement applied it, `None` when the caller must take the unbatched path.
async fn ack_batched(s: &PgSpool, ack: PendingAck) -> Result<Option<()>> {
    let rx = s.inner.acks.queue(ack);
    // The drain is a task of its own, so a caller that stops waiting strands nobody.
    let spool = s.clone();
    tokio::spawn(async move { drain_acks(&spool).await });
    answer(rx).await
}

async fn drain_acks(s: &PgSpool) {
    let (_lane, batch) = s.inner.acks.next_batch(MAX_ACKS).await;
    if !batch.is_empty() {
        ack_many(s, batch).await;
    }
}

/// Runs [`sql::ACK_MANY`] in its transaction ([`sql::BEGIN_ACK_MANY`]) and commits it.
async fn ack_many_tx(
    s: &PgSpool,
    runs: Vec<Vec<u8>>,
    tokens: Vec<Vec<u8>>,
    nows: Vec<i64>,
    succeeded: &str,
) -> Result<Vec<sqlx::postgres::PgRow>> {
    let mut tx = s
        .pool()
        .begin_with(sql::BEGIN_ACK_MANY)
        .await
        .map_err(map)?;
    let rows = sqlx::query(sql::ACK_MANY)
        .persistent(false)
        .bind(runs)
        .bind(tokens)
        .bind(nows)
        .bind(succeeded)
        .fetch_all(&mut *tx)
        .await
        .map_err(map)?;
    tx.commit().await.map_err(map)?;
    Ok(rows)
}

/// Applies `batch` in one statement and answers each ack it applied; every other ack (and
/// every ack, if the statement failed) goes back to its caller for the unbatched path.
async fn ack_many(s: &PgSpool, batch: Vec<(PendingAck, Reply<()>)>) {
    let lane = &s.inner.acks;
    let mut runs = Vec::with_capacity(batch.len());
    let mut tokens = Vec::with_capacity(batch.len());
    let mut nows = Vec::with_capacity(batch.len());
    for (a, _) in &batch {
        runs.push(a.run.as_bytes().to_vec());
        tokens.push(a.token.as_bytes().to_vec());
        nows.push(micros(a.now));
    }
    let rows = if lane.injected_failure() {
        Err(Error::backend("postgres", "an injected batch failure"))
    } else {
        match transition(RunState::Claimed, Action::Ack) {
            // Planned for these arrays each time (the unnamed statement), not on the generic
            // plan: there, with the arrays' sizes unknown, the join of the runs with the acks
            // became a nested loop over both lists (a batch of n acks read n² rows; sql.rs).
            // Its own transaction, to plan it without nested loops (`sql::BEGIN_ACK_MANY`).
            Ok(succeeded) => ack_many_tx(s, runs, tokens, nows, succeeded.as_str()).await,
            Err(e) => Err(e),
        }
    };
    let applied = rows.and_then(|rows| {
        let mut applied = HashSet::new();
        for row in &rows {
            let run = run_id(&get::<Vec<u8>>(row, 0)?)?;
            let token: Vec<u8> = get(row, 1)?;
            applied.insert((run, token));
        }
        Ok(applied)
    });
    match applied {
        Ok(mut applied) => {
            lane.committed();
            for (a, reply) in batch {
                // `remove`: of two acks of one run and token, only the first is answered
                // here; the other finds the run acked on the unbatched path.
                let done = applied.remove(&(a.run, a.token.as_bytes().to_vec()));
                let _ = reply.send(Ok(done.then_some(())));
            }
        }
        Err(_) => lane.fall_back(batch),
    }
}

//! Enqueue, with its supersede and its batch lane.
//!
//! An enqueue without a supersede group is queued on the spool's enqueue [`Lane`]; one drain at
//! a time takes the queue. A lone enqueue takes the unbatched path ([`sql::ENQUEUE`]: one
//! statement); several become one [`sql::ENQUEUE_MANY`] — a multi-row `INSERT … ON CONFLICT DO
//! NOTHING RETURNING` over arrays, committed on its own (autocommit), which also wakes each
//! queue's subscribers once. An enqueue with a supersede group runs [`sql::ENQUEUE`] after the
//! group's advisory lock in one transaction, so enqueues of one group supersede each other in
//! commit order.
//!
//! Invariants of the lane (tests: `crates/backend-postgres/tests/spool/batch.rs`):
//! - **Answered after commit.** A caller gets its run id only after the statement that wrote it
//!   returned, i.e. committed.
//! - **One key, one id.** Two enqueues of one `(queue, key)` in one batch get the same run id,
//!   one of them `created`; a key another transaction holds is answered with that run's id.
//! - **Failures stay with their owner.** If the batch statement fails (an id collision, a
//!   dropped connection), nothing of it was written, and every enqueue of the batch runs again
//!   alone on the unbatched path, which reports its own outcome.

use std::collections::HashMap;

use cairn_core::spool::{
    check_payload, transition, Action, DedupKey, EnqueueOptions, Enqueued, QueueName, RunId,
    RunState, Timestamp, MAX_RUN_PAYLOAD,
};
use cairn_core::{Error, Result};

use super::lane::{answer, Lane, Reply};
use super::row::{bytes_len, claim_jitter, get, micros, run_id};
use super::{group_lock_key, sql, wake_channel, PgSpool};
use crate::error::map;

/// Enqueues one batch takes at most (the statement binds 11 arrays of this length).
const MAX_BATCH: usize = 256;

/// How often an enqueue runs its statement again when the key's run was committed after the
/// statement's snapshot ([`sql::ENQUEUE`] returns no row then), before giving up with
/// [`Error::Retryable`].
const ENQUEUE_RACES: usize = 16;

/// One enqueue to batch: everything the statement binds.
pub(super) struct PendingEnqueue {
    id: RunId,
    queue: QueueName,
    key: DedupKey,
    max_attempts: i32,
    priority: i32,
    now: i64,
    due: i64,
    payload: Vec<u8>,
}

/// The queue of enqueues and the lane that drains it.
pub(super) type EnqueueLane = Lane<PendingEnqueue, Enqueued>;

/// What one enqueue writes, whatever run id it tries.
#[derive(Clone, Copy)]
struct NewRun<'a> {
    queue: &'a QueueName,
    key: &'a DedupKey,
    payload: &'a [u8],
    options: &'a EnqueueOptions,
    max_attempts: u32,
    now: Timestamp,
}

/// Enqueues `payload` under `(queue, key)`: batched when it has no supersede group, else (and
/// when its batch did not settle it) on the unbatched path.
pub(super) async fn enqueue_tx(
    s: &PgSpool,
    queue: &QueueName,
    key: &DedupKey,
    payload: Vec<u8>,
    options: EnqueueOptions,
) -> Result<Enqueued> {
    check_payload("run payload", MAX_RUN_PAYLOAD, &payload)?;
    let max_attempts = options.effective_max_attempts()?;
    let now = s.now();
    let new = NewRun {
        queue,
        key,
        payload: &payload,
        options: &options,
        max_attempts,
        now,
    };
    if options.supersede_group.is_none() {
        let max_attempts = i32::try_from(max_attempts)
            .map_err(|_| Error::invalid("max attempts", "is too large"))?;
        let queued = PendingEnqueue {
            id: RunId::generate(now),
            queue: queue.clone(),
            key: key.clone(),
            max_attempts,
            priority: options.priority,
            now: micros(now),
            due: micros(options.not_before.unwrap_or(now)),
            payload: payload.clone(),
        };
        if let Some(done) = enqueue_batched(s, queued).await? {
            return Ok(done);
        }
    }
    let (mut collisions, mut races) = (0, 0);
    loop {
        let id = new_run_id(s, now);
        match enqueue_once(s, id, &new).await {
            Ok(Some(stored)) => {
                return Ok(Enqueued {
                    run_id: stored,
                    created: stored == id,
                })
            }
            // The key's run was committed after the statement's snapshot (or removed since):
            // nothing was written; run it again on a new snapshot.
            Ok(None) => {
                races += 1;
                if races >= ENQUEUE_RACES {
                    return Err(Error::retryable(
                        "the dedup key's run kept changing while enqueue read it; try again",
                    ));
                }
            }
            // A new id collides with a stored one (not the key's run) with negligible
            // probability; the unique violation then wrote nothing, and a fresh id is tried.
            Err(e) if e.is_conflict() => {
                collisions += 1;
                if collisions >= 3 {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// The id an unbatched enqueue attempt tries: a fresh one, unless a test queued the next ones
/// (`testkit_force_next_run_ids`).
#[cfg(feature = "testkit")]
fn new_run_id(s: &PgSpool, now: Timestamp) -> RunId {
    s.inner
        .hooks
        .next_forced_id()
        .unwrap_or_else(|| RunId::generate(now))
}

/// The id an unbatched enqueue attempt tries: a fresh one.
#[cfg(not(feature = "testkit"))]
fn new_run_id(_: &PgSpool, now: Timestamp) -> RunId {
    RunId::generate(now)
}

/// One run of [`sql::ENQUEUE`]: the id of the run that holds the key (`id` when it was
/// created), or `None` when the statement must run again (see there).
async fn enqueue_once(s: &PgSpool, id: RunId, new: &NewRun<'_>) -> Result<Option<RunId>> {
    let NewRun {
        queue,
        key,
        payload,
        options,
        max_attempts,
        now,
    } = *new;
    let superseded = transition(RunState::Queued, Action::Supersede)?;
    let max_attempts =
        i32::try_from(max_attempts).map_err(|_| Error::invalid("max attempts", "is too large"))?;
    let query = sqlx::query(sql::ENQUEUE)
        .bind(id.as_bytes().as_slice())
        .bind(queue.as_str())
        .bind(key.as_bytes())
        .bind(options.supersede_group.as_ref().map(|g| g.as_bytes()))
        .bind(max_attempts)
        .bind(options.priority)
        .bind(micros(now))
        .bind(micros(options.not_before.unwrap_or(now)))
        .bind(bytes_len(payload.len()))
        .bind(payload)
        .bind(superseded.as_str())
        .bind(wake_channel(&s.inner.schema, queue))
        .bind(claim_jitter(queue, key, 0));
    let row = match &options.supersede_group {
        None => query.fetch_optional(s.pool()).await.map_err(map)?,
        Some(group) => {
            let mut tx = s.pool().begin().await.map_err(map)?;
            sqlx::query(sql::LOCK_GROUP)
                .bind(group_lock_key(&s.inner.schema, queue, group))
                .execute(&mut *tx)
                .await
                .map_err(map)?;
            let row = query.fetch_optional(&mut *tx).await.map_err(map)?;
            tx.commit().await.map_err(map)?;
            row
        }
    };
    row.map(|row| run_id(&get::<Vec<u8>>(&row, 0)?)).transpose()
}

/// Queues `e` for the next batch and waits for its answer: `Some` when the batch (or the lone
/// statement) settled it, `None` when the caller must take the unbatched path.
async fn enqueue_batched(s: &PgSpool, e: PendingEnqueue) -> Result<Option<Enqueued>> {
    let rx = s.inner.enqueues.queue(e);
    // The drain is a task of its own, so a caller that stops waiting strands nobody.
    let spool = s.clone();
    tokio::spawn(async move { drain_enqueues(&spool).await });
    answer(rx).await
}

async fn drain_enqueues(s: &PgSpool) {
    let (_lane, batch) = s.inner.enqueues.next_batch(MAX_BATCH).await;
    if !batch.is_empty() {
        enqueue_many(s, batch).await;
    }
}

/// Writes `batch` in one statement and answers each enqueue; on failure hands every one back
/// to its caller for the unbatched path.
async fn enqueue_many(s: &PgSpool, batch: Vec<(PendingEnqueue, Reply<Enqueued>)>) {
    let lane = &s.inner.enqueues;
    let mut ids = Vec::with_capacity(batch.len());
    let mut queues = Vec::with_capacity(batch.len());
    let mut keys = Vec::with_capacity(batch.len());
    let mut attempts = Vec::with_capacity(batch.len());
    let mut priorities = Vec::with_capacity(batch.len());
    let mut nows = Vec::with_capacity(batch.len());
    let mut dues = Vec::with_capacity(batch.len());
    let mut lens = Vec::with_capacity(batch.len());
    let mut payloads = Vec::with_capacity(batch.len());
    let mut channels = Vec::with_capacity(batch.len());
    let mut jitters = Vec::with_capacity(batch.len());
    for (e, _) in &batch {
        ids.push(e.id.as_bytes().to_vec());
        queues.push(e.queue.as_str().to_owned());
        keys.push(e.key.as_bytes().to_vec());
        attempts.push(e.max_attempts);
        priorities.push(e.priority);
        nows.push(e.now);
        dues.push(e.due);
        lens.push(bytes_len(e.payload.len()));
        payloads.push(e.payload.clone());
        channels.push(wake_channel(&s.inner.schema, &e.queue));
        jitters.push(claim_jitter(&e.queue, &e.key, 0));
    }
    let rows = if lane.injected_failure() {
        Err(Error::backend("postgres", "an injected batch failure"))
    } else {
        sqlx::query(sql::ENQUEUE_MANY)
            .bind(ids)
            .bind(queues)
            .bind(keys)
            .bind(attempts)
            .bind(priorities)
            .bind(nows)
            .bind(dues)
            .bind(lens)
            .bind(payloads)
            .bind(channels)
            .bind(jitters)
            .fetch_all(s.pool())
            .await
            .map_err(map)
    };
    let stored = rows.and_then(|rows| {
        let mut by_key = HashMap::new();
        for row in &rows {
            let id = run_id(&get::<Vec<u8>>(row, 0)?)?;
            let queue: String = get(row, 1)?;
            let key: Vec<u8> = get(row, 2)?;
            by_key.insert((queue, key), id);
        }
        Ok(by_key)
    });
    match stored {
        Ok(by_key) => {
            lane.committed();
            for (e, reply) in batch {
                let found = by_key
                    .get(&(e.queue.as_str().to_owned(), e.key.as_bytes().to_vec()))
                    .copied();
                // Not inserted by this batch: the key belongs to a run another transaction
                // committed; the unbatched path returns its id.
                let answer = found.map(|run_id| Enqueued {
                    run_id,
                    created: run_id == e.id,
                });
                let _ = reply.send(Ok(answer));
            }
        }
        // Nothing of the statement was written: each caller runs its enqueue alone.
        Err(_) => lane.fall_back(batch),
    }
}

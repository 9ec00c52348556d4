//! Enqueue, with its supersede and its batch lane.
//!
//! A run's partition key and trace context are written by the insert itself (the `_FLOW`
//! forms of the statements, `super::sql_enqueue`), on every path: an enqueue that carries
//! neither sends the plain statement, unchanged; one that carries either is refused on a store
//! without revision `0009_spool_flow` (`require_flow_columns`), before anything is written.
//!
//! An enqueue without a supersede group is queued on the spool's enqueue [`Lane`]; one drain at
//! a time takes the queue. A lone enqueue takes the unbatched path
//! ([`sql_enqueue::ENQUEUE`]: one statement); several become one
//! [`sql_enqueue::ENQUEUE_MANY`] — a multi-row `INSERT … ON CONFLICT DO NOTHING RETURNING`
//! over arrays, committed on its own (autocommit), which also wakes each queue's subscribers
//! once. An enqueue with a supersede group runs [`sql_enqueue::ENQUEUE`] after the
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
    transition, Action, DedupKey, EnqueueItem, EnqueueOptions, Enqueued, QueueName, RunId,
    RunState, SupersedeGroup, Timestamp,
};
use cairn_core::{Error, Result};
use sqlx::{PgConnection, PgExecutor};

use super::batched::{flow_columns_refusal, partition_text, traceparent_text, PendingEnqueue};
use super::flow;
use super::handle::PgSpool;
use super::keys::{group_lock_key, wake_channel};
use super::lane::{answer, Reply};
use super::row::{bytes_len, claim_jitter, get, micros, run_id};
use super::sql_enqueue;
use crate::error::{map, rolled_back};

/// Enqueues one batch takes at most (the statement binds 11 arrays of this length).
const MAX_BATCH: usize = 256;

/// How often an enqueue runs its statement again when the key's run was committed after the
/// statement's snapshot ([`sql_enqueue::ENQUEUE`] returns no row then), before giving up with
/// [`Error::Retryable`].
const ENQUEUE_RACES: usize = 16;

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

/// Enqueues `payload` under `(queue, key)` (checked by the caller: `max_attempts` and `now` are
/// what [`cairn_core::spool::check_enqueue`] answered): batched when it has no supersede group,
/// else (and when its batch did not settle it) on the unbatched path.
pub(super) async fn enqueue_tx(
    s: &PgSpool,
    queue: &QueueName,
    key: &DedupKey,
    payload: Vec<u8>,
    options: EnqueueOptions,
    max_attempts: u32,
    now: Timestamp,
) -> Result<Enqueued> {
    require_flow_columns(s, &[&options]).await?;
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
            partition: partition_text(&options),
            traceparent: traceparent_text(&options),
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

/// One run of [`sql_enqueue::ENQUEUE`] on the pool: the id of the run that holds the key (`id` when
/// it was created), or `None` when the statement must run again (see there).
async fn enqueue_once(s: &PgSpool, id: RunId, new: &NewRun<'_>) -> Result<Option<RunId>> {
    let options = new.options;
    match &options.supersede_group {
        None => autocommit!(s, |on| enqueue_statement(s, id, new, on).await),
        group => {
            let mut tx = s.pool().begin().await.map_err(map)?;
            // The group's lock is held: an error rolls back at once.
            match enqueue_in_group(s, &mut tx, id, new, group.as_ref()).await {
                Ok(row) => {
                    tx.commit().await.map_err(map)?;
                    Ok(row)
                }
                Err(e) => Err(rolled_back(tx, e).await),
            }
        }
    }
}

/// [`sql_enqueue::ENQUEUE`] after the supersede group's lock (if any), on `conn` (inside a
/// transaction, which holds the lock until it ends).
async fn enqueue_in_group(
    s: &PgSpool,
    conn: &mut PgConnection,
    id: RunId,
    new: &NewRun<'_>,
    group: Option<&SupersedeGroup>,
) -> Result<Option<RunId>> {
    if let Some(group) = group {
        sqlx::query(sql_enqueue::LOCK_GROUP)
            .bind(group_lock_key(&s.inner.schema, new.queue, group))
            .execute(&mut *conn)
            .await
            .map_err(map)?;
    }
    enqueue_statement(s, id, new, &mut *conn).await
}

/// [`sql_enqueue::ENQUEUE`] once, on `on` ([`sql_enqueue::ENQUEUE_FLOW`] when the run carries
/// a partition key or a trace context).
async fn enqueue_statement<'e>(
    s: &PgSpool,
    id: RunId,
    new: &NewRun<'_>,
    on: impl PgExecutor<'e>,
) -> Result<Option<RunId>> {
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
    let (partition, traceparent) = (partition_text(options), traceparent_text(options));
    let flow = partition.is_some() || traceparent.is_some();
    let statement = if flow {
        sql_enqueue::ENQUEUE_FLOW
    } else {
        sql_enqueue::ENQUEUE
    };
    let mut query = sqlx::query(statement)
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
    if flow {
        query = query.bind(partition).bind(traceparent);
    }
    let row = query.fetch_optional(on).await.map_err(map)?;
    row.map(|row| run_id(&get::<Vec<u8>>(&row, 0)?)).transpose()
}

/// Refuses, with [`cairn_core::spool::flow_revision_missing`], enqueues that carry a partition
/// key or a trace context on a store without revision `0009_spool_flow` (asked only when one
/// does: an enqueue without either costs nothing here).
async fn require_flow_columns(s: &PgSpool, options: &[&EnqueueOptions]) -> Result<()> {
    match options.iter().find_map(|o| flow_columns_refusal(o)) {
        Some(what) => flow::require(s, what).await,
        None => Ok(()),
    }
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
    let stored = if lane.injected_failure() {
        Err(Error::backend("postgres", "an injected batch failure"))
    } else {
        let pending: Vec<&PendingEnqueue> = batch.iter().map(|(e, _)| e).collect();
        autocommit!(s, |on| enqueue_many_statement(s, on, &pending, None).await)
    };
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

/// [`enqueue_tx`] inside a transaction on `conn` (the caller's, or one cairn opened): the
/// unbatched statement, whose `NOTIFY` is delivered when that transaction commits and never if
/// it rolls back. A key another open transaction inserted makes the statement wait for that
/// transaction (up to the connection's `lock_timeout`); under READ COMMITTED a key committed
/// after the statement's snapshot is read again on a new one, under REPEATABLE READ and
/// SERIALIZABLE it fails with a serialization error ([`Error::Retryable`]: retry the whole
/// transaction). An id collision (a unique violation, which aborts the transaction) is
/// returned, not retried. The caller checked the input (`max_attempts` and `now` are what
/// [`cairn_core::spool::check_enqueue`] answered).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn enqueue_on(
    s: &PgSpool,
    conn: &mut PgConnection,
    queue: &QueueName,
    key: &DedupKey,
    payload: Vec<u8>,
    options: EnqueueOptions,
    max_attempts: u32,
    now: Timestamp,
) -> Result<Enqueued> {
    let new = NewRun {
        queue,
        key,
        payload: &payload,
        options: &options,
        max_attempts,
        now,
    };
    require_flow_columns(s, &[&options]).await?;
    for _ in 0..ENQUEUE_RACES {
        let id = new_run_id(s, now);
        let group = options.supersede_group.as_ref();
        let stored = enqueue_in_group(s, conn, id, &new, group).await?;
        if let Some(stored) = stored {
            return Ok(Enqueued {
                run_id: stored,
                created: stored == id,
            });
        }
    }
    Err(Error::retryable(
        "the dedup key's run kept changing while enqueue read it; try again",
    ))
}

/// Items one [`sql_enqueue::ENQUEUE_MANY`] statement of a bulk enqueue binds at most.
const BULK_CHUNK: usize = 1000;

/// A bulk enqueue ([`cairn_core::Spool::enqueue_many`]) inside a transaction on `conn`: each
/// key's first item is written in input order — runs of consecutive items without a supersede
/// group by one [`sql_enqueue::ENQUEUE_MANY`] each (at most [`BULK_CHUNK`]), an item with one alone,
/// after every group's lock (taken up front in key order, so concurrent batches cannot
/// deadlock on them) — then the keys that were already stored are read in one statement. Later items of a key answer its first
/// item's run. Wake-ups are `NOTIFY`s, delivered on commit. The caller checked the batch:
/// `attempts` are what [`cairn_core::spool::check_enqueue_batch`] answered for `items`.
pub(crate) async fn enqueue_many_on(
    s: &PgSpool,
    conn: &mut PgConnection,
    queue: &QueueName,
    items: &[EnqueueItem],
    attempts: &[u32],
    now: Timestamp,
) -> Result<Vec<Enqueued>> {
    let options: Vec<&EnqueueOptions> = items.iter().map(|i| &i.options).collect();
    require_flow_columns(s, &options).await?;
    // The first item of each key, by index; the others answer from it.
    let mut first: HashMap<&[u8], usize> = HashMap::with_capacity(items.len());
    let mut source = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        source.push(*first.entry(item.key.as_bytes()).or_insert(i));
    }
    let mut results: Vec<Option<Enqueued>> = vec![None; items.len()];
    let mut locks: Vec<i64> = items
        .iter()
        .enumerate()
        .filter(|(i, _)| source[*i] == *i)
        .filter_map(|(_, item)| item.options.supersede_group.as_ref())
        .map(|g| group_lock_key(&s.inner.schema, queue, g))
        .collect();
    locks.sort_unstable();
    locks.dedup();
    for key in locks {
        sqlx::query(sql_enqueue::LOCK_GROUP)
            .bind(key)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
    }
    let firsts: Vec<usize> = (0..items.len()).filter(|&i| source[i] == i).collect();
    if firsts
        .iter()
        .all(|&i| items[i].options.supersede_group.is_none())
    {
        // No supersede group: the rows go in dedup-key order (concurrent batches of
        // overlapping keys then take their key locks in one order and cannot deadlock), each
        // with the `run_no` of its place in the input (the claim order's last tie-break).
        let count = i64::try_from(firsts.len())
            .map_err(|_| Error::invalid("enqueue batch", "is too large"))?;
        let numbers: Vec<i64> = sqlx::query_scalar(sql_enqueue::RUN_NOS)
            .bind(count)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        let mut numbered: Vec<(usize, i64)> = firsts.iter().copied().zip(numbers).collect();
        numbered.sort_by(|a, b| items[a.0].key.as_bytes().cmp(items[b.0].key.as_bytes()));
        for chunk in numbered.chunks(BULK_CHUNK) {
            let plain: Vec<usize> = chunk.iter().map(|&(i, _)| i).collect();
            let run_nos: Vec<i64> = chunk.iter().map(|&(_, n)| n).collect();
            let rows = Plain {
                items,
                attempts,
                indices: &plain,
                run_nos: Some(&run_nos),
            };
            write_plain(s, conn, queue, &rows, now, &mut results).await?;
        }
    } else {
        // Runs are written in input order (their `run_no`s are the claim order's last
        // tie-break): consecutive plain items share one statement, a supersede-group item runs
        // alone.
        let mut plain: Vec<usize> = Vec::with_capacity(BULK_CHUNK.min(items.len()));
        for &i in &firsts {
            let item = &items[i];
            if item.options.supersede_group.is_none() {
                plain.push(i);
                if plain.len() < BULK_CHUNK {
                    continue;
                }
            }
            let rows = Plain {
                items,
                attempts,
                indices: &plain,
                run_nos: None,
            };
            write_plain(s, conn, queue, &rows, now, &mut results).await?;
            plain.clear();
            if item.options.supersede_group.is_none() {
                continue;
            }
            let new = NewRun {
                queue,
                key: &item.key,
                payload: &item.payload,
                options: &item.options,
                max_attempts: attempts[i],
                now,
            };
            let id = new_run_id(s, now);
            // The group's lock is held already (taken up front).
            if let Some(stored) = enqueue_statement(s, id, &new, &mut *conn).await? {
                results[i] = Some(Enqueued {
                    run_id: stored,
                    created: stored == id,
                });
            }
        }
        let rows = Plain {
            items,
            attempts,
            indices: &plain,
            run_nos: None,
        };
        write_plain(s, conn, queue, &rows, now, &mut results).await?;
    }
    // The first items whose key was stored already (committed before, or by a transaction
    // the insert waited for): one read, on a snapshot taken after the inserts.
    let missing: Vec<Vec<u8>> = (0..items.len())
        .filter(|&i| source[i] == i && results[i].is_none())
        .map(|i| items[i].key.as_bytes().to_vec())
        .collect();
    if !missing.is_empty() {
        let rows = sqlx::query(sql_enqueue::RUN_IDS_BY_KEYS)
            .bind(queue.as_str())
            .bind(&missing)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        let mut stored = HashMap::with_capacity(rows.len());
        for row in &rows {
            stored.insert(get::<Vec<u8>>(row, 1)?, run_id(&get::<Vec<u8>>(row, 0)?)?);
        }
        for i in 0..items.len() {
            if source[i] == i && results[i].is_none() {
                let run_id = *stored.get(items[i].key.as_bytes()).ok_or_else(|| {
                    Error::retryable(
                        "a dedup key's run was removed while the bulk enqueue read it; try again",
                    )
                })?;
                results[i] = Some(Enqueued {
                    run_id,
                    created: false,
                });
            }
        }
    }
    (0..items.len())
        .map(|i| {
            let first = results[source[i]].ok_or_else(|| {
                Error::backend("postgres", "a bulk enqueue item was left without an answer")
            })?;
            Ok(Enqueued {
                run_id: first.run_id,
                created: first.created && source[i] == i,
            })
        })
        .collect()
}

/// Items of a bulk enqueue without a supersede group, for one [`sql_enqueue::ENQUEUE_MANY`]: their
/// indices into `items` in write order, and (for the key-ordered path) each one's `run_no`.
struct Plain<'a> {
    items: &'a [EnqueueItem],
    attempts: &'a [u32],
    indices: &'a [usize],
    run_nos: Option<&'a [i64]>,
}

/// Writes `rows` in one [`sql_enqueue::ENQUEUE_MANY`] (or
/// [`sql_enqueue::ENQUEUE_MANY_NUMBERED`]) and records
/// each created run in `results`.
async fn write_plain(
    s: &PgSpool,
    conn: &mut PgConnection,
    queue: &QueueName,
    rows: &Plain<'_>,
    now: Timestamp,
    results: &mut [Option<Enqueued>],
) -> Result<()> {
    if rows.indices.is_empty() {
        return Ok(());
    }
    let batch: Vec<PendingEnqueue> = rows
        .indices
        .iter()
        .map(|&i| {
            let item = &rows.items[i];
            Ok(PendingEnqueue {
                id: new_run_id(s, now),
                queue: queue.clone(),
                key: item.key.clone(),
                max_attempts: i32::try_from(rows.attempts[i])
                    .map_err(|_| Error::invalid("max attempts", "is too large"))?,
                priority: item.options.priority,
                now: micros(now),
                due: micros(item.options.not_before.unwrap_or(now)),
                payload: item.payload.clone(),
                partition: partition_text(&item.options),
                traceparent: traceparent_text(&item.options),
            })
        })
        .collect::<Result<_>>()?;
    let refs: Vec<&PendingEnqueue> = batch.iter().collect();
    let created = enqueue_many_statement(s, &mut *conn, &refs, rows.run_nos).await?;
    for (&i, e) in rows.indices.iter().zip(&batch) {
        let found = created.get(&(queue.as_str().to_owned(), e.key.as_bytes().to_vec()));
        if let Some(&run_id) = found {
            results[i] = Some(Enqueued {
                run_id,
                created: run_id == e.id,
            });
        }
    }
    Ok(())
}

/// The runs one [`sql_enqueue::ENQUEUE_MANY`] created, by queue and dedup key.
type CreatedRuns = HashMap<(String, Vec<u8>), RunId>;

/// One [`sql_enqueue::ENQUEUE_MANY`] of `batch` on `on` (with `run_nos`, one per row:
/// [`sql_enqueue::ENQUEUE_MANY_NUMBERED`]; their `_FLOW` forms when a row carries a partition
/// key or a trace context, which the caller checked the store holds): the runs it created.
async fn enqueue_many_statement<'e>(
    s: &PgSpool,
    on: impl PgExecutor<'e>,
    batch: &[&PendingEnqueue],
    run_nos: Option<&[i64]>,
) -> Result<CreatedRuns> {
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
    let mut partitions = Vec::with_capacity(batch.len());
    let mut traceparents = Vec::with_capacity(batch.len());
    for e in batch {
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
        partitions.push(e.partition.clone());
        traceparents.push(e.traceparent.clone());
    }
    let flow = partitions.iter().chain(&traceparents).any(Option::is_some);
    let statement = match (run_nos, flow) {
        (None, false) => sql_enqueue::ENQUEUE_MANY,
        (None, true) => sql_enqueue::ENQUEUE_MANY_FLOW,
        (Some(_), false) => sql_enqueue::ENQUEUE_MANY_NUMBERED,
        (Some(_), true) => sql_enqueue::ENQUEUE_MANY_NUMBERED_FLOW,
    };
    let mut query = sqlx::query(statement)
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
        .bind(jitters);
    if let Some(run_nos) = run_nos {
        query = query.bind(run_nos.to_vec());
    }
    if flow {
        query = query.bind(partitions).bind(traceparents);
    }
    let rows = query.fetch_all(on).await.map_err(map)?;
    let mut created = HashMap::with_capacity(rows.len());
    for row in &rows {
        let id = run_id(&get::<Vec<u8>>(row, 0)?)?;
        created.insert((get::<String>(row, 1)?, get::<Vec<u8>>(row, 2)?), id);
    }
    Ok(created)
}

/// [`cairn_core::Spool::enqueue_many`] on the pool: [`enqueue_many_on`] in one READ COMMITTED
/// transaction of its own, run again (at most [`BULK_DEADLOCK_ROUNDS`] times in all) when the
/// server chose it as a deadlock's victim — possible only for batches with supersede groups,
/// whose rows go in input order — since nothing of it was written then. The caller checked the
/// batch (`attempts`, see [`enqueue_many_on`]) and read `now`, which the first round writes.
///
/// **The clock is read here again** for every later round: a round run again after a
/// deadlock is a new transaction, begun after the server's deadlock wait, and its runs carry
/// the time that round writes them (as they always have), not the time of the failed round.
pub(super) async fn enqueue_many_tx(
    s: &PgSpool,
    queue: &QueueName,
    items: Vec<EnqueueItem>,
    attempts: &[u32],
    now: Timestamp,
) -> Result<Vec<Enqueued>> {
    let mut round = 1;
    loop {
        let now = if round == 1 { now } else { s.now() };
        let mut tx = s
            .pool()
            .begin_with(crate::sql::BEGIN_READ_COMMITTED)
            .await
            .map_err(map)?;
        let done = match enqueue_many_on(s, &mut tx, queue, &items, attempts, now).await {
            Ok(done) => done,
            Err(e) if round < BULK_DEADLOCK_ROUNDS && is_deadlock(&e) => {
                drop(tx);
                round += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        tx.commit().await.map_err(map)?;
        return Ok(done);
    }
}

/// How often [`enqueue_many_tx`] runs a batch the server broke a deadlock with.
const BULK_DEADLOCK_ROUNDS: usize = 3;

/// Whether `e` is a deadlock the server broke by aborting this transaction (SQLSTATE 40P01).
fn is_deadlock(e: &Error) -> bool {
    matches!(e, Error::Retryable { detail, .. } if detail.contains("40P01"))
}

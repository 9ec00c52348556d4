//! The [`Spool`] implementation: each operation decides with the core's pure functions and
//! writes with the statements of [`super::sql`].

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::spool::{
    check_append, check_lease, check_limit, check_payload, check_release_delay, check_token,
    clip_reason, exhausted_park_reason, jitter_seed, nack_action, release_action, transition,
    Action, CancelOutcome, Claimed, Clock, CloseOutcome, ConsumerId, DedupKey, EnqueueOptions,
    Enqueued, EventAppended, EventStream, FactName, FactOutcome, Heartbeat, ImportSource,
    ImportedRun, LeaseToken, NackKind, Nacked, QueueName, RetentionBudget, RetentionPass,
    RetentionPolicy, RetentionReport, RetentionStep, RunEvent, RunEventId, RunFilter, RunId,
    RunImportOutcome, RunInfo, RunState, Spool, SpoolStats, Timestamp, Wakeup, MAX_ACK_IDS,
    MAX_FACT_VALUE, MAX_RUN_EVENT_PAYLOAD, MAX_RUN_PAYLOAD,
};
use cairn_core::{Error, Result};
use sqlx::postgres::PgRow;

use super::ack_batch::PendingAck;
use super::row::{count, get, opt_ts, run_id, run_info, state, ts, RunRow};
use super::{group_lock_key, sql, wake_channel, PgSpool};
use crate::error::map_sqlx;

/// How often a read-decide-write transition is retried when the run changed between its read
/// and its compare-and-set write, before giving up with [`Error::Retryable`].
const CAS_ROUNDS: usize = 32;

/// How often an enqueue runs its statement again when the key's run was committed after the
/// statement's snapshot ([`sql::ENQUEUE`] returns no row then), before giving up with
/// [`Error::Retryable`].
const ENQUEUE_RACES: usize = 16;

pub(super) fn micros(t: Timestamp) -> i64 {
    t.as_unix_micros()
}

/// The attempt a run left with `attempts` starts next, as stored in `claim_attempt` (`None`
/// past `i32::MAX`, where no claim can take the one-statement path).
pub(super) fn next_attempt(attempts: u32) -> Option<i32> {
    attempts.checked_add(1).and_then(|a| i32::try_from(a).ok())
}

/// The claim jitter a run left with `attempts` carries (`claim_jitter`, read by
/// [`sql::CLAIM_QUEUED`]): the top 32 bits of the jitter seed of its next attempt — the only
/// bits [`cairn_core::spool::backoff`] uses. `None` where [`next_attempt`] is `None`.
pub(super) fn claim_jitter(queue: &QueueName, key: &DedupKey, attempts: u32) -> Option<i64> {
    let next = next_attempt(attempts)?;
    let seed = jitter_seed(queue, key, u32::try_from(next).ok()?);
    Some(i64::try_from(seed >> 32).unwrap_or(i64::MAX))
}

fn bytes_len(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn changed_too_often(run: RunId) -> Error {
    Error::retryable(format!(
        "run {run} changed under {CAS_ROUNDS} attempts to update it; try again"
    ))
}

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

impl PgSpool {
    pub(super) fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// The id an unbatched enqueue attempt tries: a fresh one, unless a test queued the next
    /// ones (`testkit_force_next_run_ids`).
    fn new_run_id(&self, now: Timestamp) -> RunId {
        let forced = self
            .inner
            .forced_ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front();
        forced.unwrap_or_else(|| RunId::generate(now))
    }

    /// The backoff after `attempt` of the run `(queue, key)`, as every backend computes it.
    pub(super) fn retry_delay(&self, queue: &QueueName, key: &DedupKey, attempt: u32) -> Duration {
        self.inner
            .config
            .backoff
            .delay(attempt, jitter_seed(queue, key, attempt))
    }

    async fn read_run(&self, run: RunId) -> Result<Option<RunRow>> {
        let row = sqlx::query(sql::READ_RUN)
            .bind(run.as_bytes().as_slice())
            .fetch_optional(self.pool())
            .await
            .map_err(map_sqlx)?;
        row.as_ref().map(RunRow::from_row).transpose()
    }

    async fn read_existing(&self, run: RunId) -> Result<RunRow> {
        self.read_run(run).await?.ok_or(Error::UnknownRun { run })
    }

    /// Writes `after` if the run still has `before`'s state, token and cancel flag; `None`
    /// when it changed meanwhile (read again and decide again). Returns the stored cancel flag.
    async fn write_run(&self, before: &RunRow, after: &RunRow, wake: bool) -> Result<Option<bool>> {
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
            .bind(wake_channel(&self.inner.schema, &after.queue))
            .bind(queued.then(|| next_attempt(after.attempts)).flatten())
            .bind(
                queued
                    .then(|| claim_jitter(&after.queue, &after.dedup_key, after.attempts))
                    .flatten(),
            )
            .fetch_optional(self.pool())
            .await
            .map_err(map_sqlx)?;
        row.map(|r| get::<bool>(&r, 0)).transpose()
    }

    /// One run of [`sql::ENQUEUE`]: the id of the run that holds the key (`id` when it was
    /// created), or `None` when the statement must run again (see there).
    async fn enqueue_once(&self, id: RunId, new: &NewRun<'_>) -> Result<Option<RunId>> {
        let NewRun {
            queue,
            key,
            payload,
            options,
            max_attempts,
            now,
        } = *new;
        let superseded = transition(RunState::Queued, Action::Supersede)?;
        let max_attempts = i32::try_from(max_attempts)
            .map_err(|_| Error::invalid("max attempts", "is too large"))?;
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
            .bind(wake_channel(&self.inner.schema, queue))
            .bind(claim_jitter(queue, key, 0));
        let row = match &options.supersede_group {
            None => query.fetch_optional(self.pool()).await.map_err(map_sqlx)?,
            Some(group) => {
                let mut tx = self.pool().begin().await.map_err(map_sqlx)?;
                sqlx::query(sql::LOCK_GROUP)
                    .bind(group_lock_key(&self.inner.schema, queue, group))
                    .execute(&mut *tx)
                    .await
                    .map_err(map_sqlx)?;
                let row = query.fetch_optional(&mut *tx).await.map_err(map_sqlx)?;
                tx.commit().await.map_err(map_sqlx)?;
                row
            }
        };
        row.map(|row| run_id(&get::<Vec<u8>>(&row, 0)?)).transpose()
    }
}

fn event_from(row: &PgRow) -> Result<Option<RunEvent>> {
    let Some(seq) = get::<Option<i64>>(row, 0)? else {
        return Ok(None);
    };
    let id: Vec<u8> = get(row, 1)?;
    Ok(Some(RunEvent {
        seq: count(seq)?,
        event_id: RunEventId::new(id)
            .map_err(|_| Error::corrupt("an invalid run event id in the spool tables"))?,
        payload: get(row, 2)?,
        created_at: ts(get(row, 3)?),
    }))
}

#[async_trait]
impl Spool for PgSpool {
    fn clock(&self) -> &dyn Clock {
        self.inner.clock.as_ref()
    }

    async fn enqueue(
        &self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        check_payload("run payload", MAX_RUN_PAYLOAD, &payload)?;
        let max_attempts = options.effective_max_attempts()?;
        let now = self.now();
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
            let queued = super::batch::PendingEnqueue {
                id: RunId::generate(now),
                queue: queue.clone(),
                key: key.clone(),
                max_attempts,
                priority: options.priority,
                now: micros(now),
                due: micros(options.not_before.unwrap_or(now)),
                payload: payload.clone(),
            };
            if let Some(done) = self.enqueue_batched(queued).await? {
                return Ok(done);
            }
        }
        let (mut collisions, mut races) = (0, 0);
        loop {
            let id = self.new_run_id(now);
            match self.enqueue_once(id, &new).await {
                Ok(Some(stored)) => {
                    return Ok(Enqueued {
                        run_id: stored,
                        created: stored == id,
                    })
                }
                // The key's run was committed after the statement's snapshot (or removed
                // since): nothing was written; run it again on a new snapshot.
                Ok(None) => {
                    races += 1;
                    if races >= ENQUEUE_RACES {
                        return Err(Error::retryable(
                            "the dedup key's run kept changing while enqueue read it; try again",
                        ));
                    }
                }
                // A new id collides with a stored one (not the key's run) with negligible
                // probability; the unique violation then wrote nothing, and a fresh id is
                // tried.
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

    async fn claim(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>> {
        check_limit(limit)?;
        check_lease(lease)?;
        let now = self.now();
        self.claim_runs(queue, consumer, lease, limit, now).await
    }

    async fn heartbeat(&self, run: RunId, token: LeaseToken, lease: Duration) -> Result<Heartbeat> {
        check_lease(lease)?;
        let now = self.now();
        for _ in 0..CAS_ROUNDS {
            let before = self.read_existing(run).await?;
            check_token(run, before.token, token)?;
            let to = transition(before.state, Action::Heartbeat)?;
            let expires_at = now.saturating_add(lease);
            let delay = self.retry_delay(&before.queue, &before.dedup_key, before.attempts);
            let mut after = before.clone();
            after.state = to;
            after.lease_expires_at = Some(expires_at);
            after.due_at = Some(expires_at.saturating_add(delay));
            if let Some(cancel_requested) = self.write_run(&before, &after, false).await? {
                return Ok(Heartbeat {
                    expires_at,
                    cancel_requested,
                });
            }
        }
        Err(changed_too_often(run))
    }

    async fn ack(&self, run: RunId, token: LeaseToken) -> Result<()> {
        let now = self.now();
        let succeeded = transition(RunState::Claimed, Action::Ack)?;
        // Concurrent acks share one statement ([`super::ack_batch`]); a lone ack, and one the
        // batch did not apply, runs the single statement below.
        if self
            .ack_batched(PendingAck { run, token, now })
            .await?
            .is_some()
        {
            return Ok(());
        }
        for _ in 0..CAS_ROUNDS {
            let done = sqlx::query(sql::ACK)
                .bind(run.as_bytes().as_slice())
                .bind(token.as_bytes().as_slice())
                .bind(succeeded.as_str())
                .bind(micros(now))
                .execute(self.pool())
                .await
                .map_err(map_sqlx)?
                .rows_affected();
            if done == 1 {
                return Ok(());
            }
            let before = self.read_existing(run).await?;
            check_token(run, before.token, token)?;
            let to = transition(before.state, Action::Ack)?;
            if before.state == to {
                // A repeated ack of the run this token acked.
                return Ok(());
            }
        }
        Err(changed_too_often(run))
    }

    async fn nack(
        &self,
        run: RunId,
        token: LeaseToken,
        kind: NackKind,
        reason: &str,
    ) -> Result<Nacked> {
        let now = self.now();
        for _ in 0..CAS_ROUNDS {
            let before = self.read_existing(run).await?;
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
                let at = now.saturating_add(self.retry_delay(
                    &before.queue,
                    &before.dedup_key,
                    before.attempts,
                ));
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
            if self.write_run(&before, &after, wake).await?.is_some() {
                return Ok(Nacked {
                    state: to,
                    retry_at,
                });
            }
        }
        Err(changed_too_often(run))
    }

    async fn cancel(&self, run: RunId) -> Result<CancelOutcome> {
        let now = self.now();
        for _ in 0..CAS_ROUNDS {
            let before = self.read_existing(run).await?;
            let to = transition(before.state, Action::Cancel)?;
            let mut after = before.clone();
            let outcome = if to == RunState::Claimed {
                after.cancel_requested = true;
                CancelOutcome::Requested
            } else {
                enter(&mut after, to, now);
                CancelOutcome::Canceled
            };
            if self.write_run(&before, &after, false).await?.is_some() {
                return Ok(outcome);
            }
        }
        Err(changed_too_often(run))
    }

    async fn close_run(&self, run: RunId) -> Result<CloseOutcome> {
        let row = sqlx::query(sql::CLOSE_RUN)
            .bind(run.as_bytes().as_slice())
            .fetch_one(self.pool())
            .await
            .map_err(map_sqlx)?;
        if !get::<bool>(&row, 0)? {
            return Err(Error::UnknownRun { run });
        }
        Ok(if get::<bool>(&row, 1)? {
            CloseOutcome::Closed
        } else {
            CloseOutcome::AlreadyClosed
        })
    }

    async fn release(&self, run: RunId, token: LeaseToken, delay: Duration) -> Result<Nacked> {
        check_release_delay(delay)?;
        let now = self.now();
        for _ in 0..CAS_ROUNDS {
            let before = self.read_existing(run).await?;
            check_token(run, before.token, token)?;
            let to = transition(before.state, release_action(before.cancel_requested))?;
            if to != RunState::Queued {
                let mut after = before.clone();
                enter(&mut after, to, now);
                if self.write_run(&before, &after, false).await?.is_some() {
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
            let applied = sqlx::query(sql::RELEASE)
                .bind(run.as_bytes().as_slice())
                .bind(token.as_bytes().as_slice())
                .bind(attempts)
                .bind(to.as_str())
                .bind(micros(now))
                .bind(micros(at))
                .bind(next_attempt(left))
                .bind(claim_jitter(&before.queue, &before.dedup_key, left))
                .fetch_optional(self.pool())
                .await
                .map_err(map_sqlx)?;
            if applied.is_some() {
                return Ok(Nacked {
                    state: to,
                    retry_at: Some(at),
                });
            }
        }
        Err(changed_too_often(run))
    }

    async fn run(&self, run: RunId) -> Result<Option<RunInfo>> {
        let row = sqlx::query(sql::RUN_INFO)
            .bind(run.as_bytes().as_slice())
            .fetch_optional(self.pool())
            .await
            .map_err(map_sqlx)?;
        row.as_ref().map(run_info).transpose()
    }

    async fn runs(&self, filter: &RunFilter, limit: usize) -> Result<Vec<RunInfo>> {
        check_limit(limit)?;
        let rows = sqlx::query(sql::RUN_LIST)
            .bind(filter.after.map(|a| a.as_bytes().to_vec()))
            .bind(filter.queue.as_ref().map(|q| q.as_str().to_owned()))
            .bind(filter.state.map(|s| s.as_str()))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await
            .map_err(map_sqlx)?;
        rows.iter().map(run_info).collect()
    }

    async fn stats(&self) -> Result<SpoolStats> {
        let rows = sqlx::query(sql::STATS)
            .fetch_all(self.pool())
            .await
            .map_err(map_sqlx)?;
        let mut stats = SpoolStats::default();
        for row in &rows {
            if let Some(name) = get::<Option<String>>(row, 0)? {
                let n: Option<i64> = get(row, 1)?;
                stats.runs.insert(state(&name)?, count(n.unwrap_or(0))?);
            }
            stats.events = count(get(row, 2)?)?;
            stats.event_bytes = count(get(row, 3)?)?;
            stats.oldest_event = opt_ts(get(row, 4)?);
            stats.oldest_queued = opt_ts(get(row, 5)?);
        }
        Ok(stats)
    }

    async fn append_event(
        &self,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended> {
        check_payload("run event payload", MAX_RUN_EVENT_PAYLOAD, &payload)?;
        let now = self.now();
        for _ in 0..CAS_ROUNDS {
            let row = sqlx::query(sql::APPEND_EVENT)
                .bind(run.as_bytes().as_slice())
                .bind(event_id.as_bytes())
                .bind(micros(now))
                .bind(bytes_len(payload.len()))
                .bind(payload.as_slice())
                .fetch_one(self.pool())
                .await
                .map_err(map_sqlx);
            let row = match row {
                Ok(row) => row,
                // Another append of the same new id won the race; its seq is read next round.
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            };
            if !get::<bool>(&row, 0)? {
                return Err(Error::UnknownRun { run });
            }
            if let Some(seq) = get::<Option<i64>>(&row, 1)? {
                return Ok(EventAppended {
                    seq: count(seq)?,
                    created: false,
                });
            }
            if let Some(seq) = get::<Option<i64>>(&row, 2)? {
                return Ok(EventAppended {
                    seq: count(seq)?,
                    created: true,
                });
            }
            // Nothing written: refused if the run is finished or closed; else it changed
            // after this statement's snapshot (a close or finish the bump saw, or a competing
            // append) and the next round decides on a new snapshot.
            if let Some(name) = get::<Option<String>>(&row, 3)? {
                let stream = EventStream::from_stored(get(&row, 4)?);
                check_append(run, state(&name)?, stream)?;
            }
        }
        Err(changed_too_often(run))
    }

    async fn events(&self, run: RunId, after: u64, limit: usize) -> Result<Vec<RunEvent>> {
        check_limit(limit)?;
        let rows = sqlx::query(sql::EVENTS)
            .bind(run.as_bytes().as_slice())
            .bind(i64::try_from(after).unwrap_or(i64::MAX))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await
            .map_err(map_sqlx)?;
        if rows.is_empty() {
            return Err(Error::UnknownRun { run });
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            if let Some(e) = event_from(row)? {
                out.push(e);
            }
        }
        Ok(out)
    }

    async fn acknowledge_events(&self, run: RunId, event_ids: &[RunEventId]) -> Result<u64> {
        if event_ids.len() > MAX_ACK_IDS {
            return Err(Error::invalid(
                "event ids",
                format!("{} ids; the limit is {MAX_ACK_IDS}", event_ids.len()),
            ));
        }
        let ids: Vec<Vec<u8>> = event_ids.iter().map(|e| e.as_bytes().to_vec()).collect();
        let row = sqlx::query(sql::ACK_EVENTS)
            .bind(run.as_bytes().as_slice())
            .bind(ids)
            .fetch_one(self.pool())
            .await
            .map_err(map_sqlx)?;
        if !get::<bool>(&row, 0)? {
            return Err(Error::UnknownRun { run });
        }
        count(get(&row, 1)?)
    }

    async fn set_fact(&self, run: RunId, name: &FactName, value: Vec<u8>) -> Result<FactOutcome> {
        check_payload("fact value", MAX_FACT_VALUE, &value)?;
        let now = self.now();
        for _ in 0..CAS_ROUNDS {
            let row = sqlx::query(sql::SET_FACT)
                .bind(run.as_bytes().as_slice())
                .bind(name.as_str())
                .bind(micros(now))
                .bind(value.as_slice())
                .fetch_one(self.pool())
                .await
                .map_err(map_sqlx)?;
            if !get::<bool>(&row, 0)? {
                return Err(Error::UnknownRun { run });
            }
            if get::<bool>(&row, 1)? {
                return Ok(FactOutcome::Set);
            }
            // Set before (possibly by a writer that committed after this statement's snapshot):
            // a new statement sees it.
            let stored: Option<Vec<u8>> = sqlx::query_scalar(sql::FACT_VALUE)
                .bind(run.as_bytes().as_slice())
                .bind(name.as_str())
                .fetch_optional(self.pool())
                .await
                .map_err(map_sqlx)?;
            match stored {
                Some(existing) if existing == value => return Ok(FactOutcome::AlreadySet),
                Some(existing) => {
                    return Err(Error::FactConflict {
                        name: name.clone(),
                        existing,
                    })
                }
                // Removed with its run by retention meanwhile: the next round says so.
                None => continue,
            }
        }
        Err(changed_too_often(run))
    }

    async fn facts(&self, run: RunId) -> Result<BTreeMap<FactName, Vec<u8>>> {
        let rows = sqlx::query(sql::FACTS)
            .bind(run.as_bytes().as_slice())
            .fetch_all(self.pool())
            .await
            .map_err(map_sqlx)?;
        if rows.is_empty() {
            return Err(Error::UnknownRun { run });
        }
        let mut out = BTreeMap::new();
        for row in &rows {
            if let Some(name) = get::<Option<String>>(row, 0)? {
                let name = FactName::new(name)
                    .map_err(|_| Error::corrupt("an invalid fact name in the spool tables"))?;
                out.insert(name, get::<Vec<u8>>(row, 1)?);
            }
        }
        Ok(out)
    }

    async fn retention_pass(
        &self,
        policy: &RetentionPolicy,
        budget: &RetentionBudget,
    ) -> Result<RetentionReport> {
        let mut pass = RetentionPass::new(*policy, *budget, self.now())?;
        while let Some(step) = pass.next_step(self.now()) {
            match step {
                RetentionStep::Events => self.retention_events(&mut pass).await?,
                RetentionStep::Runs => self.retention_runs(&mut pass).await?,
            }
        }
        Ok(pass.finish())
    }

    async fn import_runs(
        &self,
        source: &ImportSource,
        runs: Vec<ImportedRun>,
    ) -> Result<RunImportOutcome> {
        self.import_in_tx(source, runs).await
    }

    async fn next_due(&self, queue: &QueueName) -> Result<Option<Timestamp>> {
        let due: Option<i64> = sqlx::query_scalar(sql::NEXT_DUE)
            .bind(queue.as_str())
            .fetch_one(self.pool())
            .await
            .map_err(map_sqlx)?;
        Ok(opt_ts(due))
    }

    async fn subscribe(&self, queue: &QueueName) -> Result<Box<dyn Wakeup>> {
        let channel = wake_channel(&self.inner.schema, queue);
        Ok(Box::new(
            self.inner.wake.subscribe(channel, self.wake_poll()).await?,
        ))
    }
}

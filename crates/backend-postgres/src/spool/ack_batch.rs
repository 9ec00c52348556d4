//! Batched acks: concurrent acks of one spool instance share one statement, one transaction
//! and one WAL flush.
//!
//! Every ack is queued on its own [`Lane`] (the pattern of batched enqueues, [`super::batch`]);
//! one drain at a time takes the queue. A lone ack takes the unbatched path ([`sql::ACK`],
//! unchanged: one statement); several become one [`sql::ACK_MANY`] — an `UPDATE … FROM
//! unnest(…)` over the acks' runs, tokens and times, committed on its own (autocommit). It
//! writes each run exactly what [`sql::ACK`] writes (the succeeded state, `updated_at` and
//! `finished_at` at that ack's own time, lease, due time and cancel flag cleared); like the
//! single ack, it notifies nobody and counts nothing.
//!
//! Invariants (tests: `crates/backend-postgres/tests/spool/ack_batch.rs`):
//! - **Answered after commit.** An ack is answered `Ok` only after the statement that wrote it
//!   returned, i.e. committed.
//! - **Only the applied acks are answered by the batch.** An ack the statement did not apply
//!   (a stale token, a run already acked or otherwise ended, a lease lost, an unknown run, the
//!   second of two acks of one run) runs alone on the unbatched path afterwards and gets
//!   exactly the result it gets without batching (a repeated ack with its own token is `Ok`, a
//!   stale token is [`cairn_core::Error::LeaseLost`], …).
//! - **Failures stay with their owner.** If the batch statement fails (a lock timeout, a
//!   deadlock with another instance's batch, a dropped connection), nothing of it was written,
//!   and every ack of the batch runs again alone on the unbatched path.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use cairn_core::spool::{transition, Action, LeaseToken, RunId, RunState, Timestamp};
use cairn_core::{Error, Result};

use super::batch::{answer, Lane, Reply};
use super::ops::micros;
use super::row::{get, run_id};
use super::{sql, PgSpool};
use crate::error::map_sqlx;

/// Acks one batch takes at most.
const MAX_ACKS: usize = 256;

/// One ack to batch.
pub(super) struct PendingAck {
    pub(super) run: RunId,
    pub(super) token: LeaseToken,
    pub(super) now: Timestamp,
}

/// The queue of acks and the lane that drains it.
pub(super) type AckLane = Lane<PendingAck, ()>;

impl PgSpool {
    /// Queues the ack for the next batch and waits for its answer: `Some(())` when a committed
    /// batch statement applied it, `None` when the caller must take the unbatched path.
    pub(super) async fn ack_batched(&self, ack: PendingAck) -> Result<Option<()>> {
        let rx = self.inner.acks.queue(ack);
        // The drain is a task of its own, so a caller that stops waiting strands nobody.
        let spool = self.clone();
        tokio::spawn(async move { spool.drain_acks().await });
        answer(rx).await
    }

    async fn drain_acks(&self) {
        let (_lane, batch) = self.inner.acks.next_batch(MAX_ACKS).await;
        if !batch.is_empty() {
            self.ack_many(batch).await;
        }
    }

    /// Applies `batch` in one statement and answers each ack it applied; every other ack (and
    /// every ack, if the statement failed) goes back to its caller for the unbatched path.
    async fn ack_many(&self, batch: Vec<(PendingAck, Reply<()>)>) {
        let lane = &self.inner.acks;
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
                Ok(succeeded) => sqlx::query(sql::ACK_MANY)
                    .bind(runs)
                    .bind(tokens)
                    .bind(nows)
                    .bind(succeeded.as_str())
                    .fetch_all(self.pool())
                    .await
                    .map_err(map_sqlx),
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
                lane.batches.fetch_add(1, Ordering::Relaxed);
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
}

//! Group commit: concurrent write operations of one store instance share one transaction and
//! one fsync.
//!
//! With `synchronous=FULL` every commit waits for the WAL's fsync, so one writer connection
//! that commits each operation on its own is bounded by the disk's fsync rate however many
//! tasks write. Instead, a write operation is queued ([`Pending`]) and the writer's next holder
//! drains every queued operation into one `BEGIN IMMEDIATE` transaction, each in a savepoint of
//! its own (`Db::grouped`), then commits once.
//!
//! Invariants (tests: `group_commit_*` in `tests/group_commit.rs`):
//! - **Answered after commit.** A caller gets its result only after the transaction holding its
//!   writes committed; results computed inside a transaction that then fails to commit are
//!   thrown away.
//! - **Neighbours are independent.** An operation that fails (or decides to write nothing) rolls
//!   back to its savepoint; the others' writes stay and commit. If the group's transaction
//!   cannot commit, or SQLite rolled all of it back on an error (a full disk), every operation is
//!   run again on its own, in its own transaction, exactly as without grouping — so each caller
//!   gets the result of a transaction that either committed or left nothing behind.
//! - **A group of one is the ungrouped path**: the same statements, no savepoint (the append's
//!   statement budget holds).
//! - Operations of one group see each other's writes in queue order, as if they had run one
//!   after the other, which they did: one connection, one thread.

use std::sync::atomic::{AtomicU64, Ordering};

use cairn_core::{Error, Result};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::db::Db;

/// Operations one group takes at most; the rest wait for the next group.
pub(crate) const MAX_GROUP: usize = 128;

/// A queued write operation, type-erased.
pub(crate) trait Pending: Send {
    /// Runs the operation on `db` and keeps its result until [`Pending::answer`].
    fn run(&mut self, db: &Db<'_>);
    /// Sends the kept result to the caller.
    fn answer(self: Box<Self>);
    /// Answers with `err` without running (the writer could not be had).
    fn fail(self: Box<Self>, err: Error);
}

/// One caller's operation and where its answer goes.
pub(crate) struct Op<T, F> {
    f: F,
    result: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Op<T, F>
where
    T: Send + 'static,
    F: Fn(&Db<'_>) -> Result<T> + Send + 'static,
{
    /// An operation and the receiver its caller waits on.
    pub(crate) fn queued(f: F) -> (Box<dyn Pending>, oneshot::Receiver<Result<T>>) {
        let (reply, rx) = oneshot::channel();
        let op = Self {
            f,
            result: None,
            reply,
        };
        (Box::new(op), rx)
    }
}

impl<T, F> Pending for Op<T, F>
where
    T: Send + 'static,
    F: Fn(&Db<'_>) -> Result<T> + Send + 'static,
{
    fn run(&mut self, db: &Db<'_>) {
        self.result = Some((self.f)(db));
    }

    fn answer(self: Box<Self>) {
        let result = self.result.unwrap_or_else(|| {
            Err(Error::backend(
                "sqlite",
                "a grouped write was answered without running",
            ))
        });
        // A caller that stopped waiting no longer needs the answer; its write stands.
        let _ = self.reply.send(result);
    }

    fn fail(self: Box<Self>, err: Error) {
        let _ = self.reply.send(Err(err));
    }
}

/// What the groups did, for tests and the bench.
#[derive(Debug, Default)]
pub(crate) struct GroupStats {
    /// Transactions committed for more than one operation.
    pub(crate) groups: AtomicU64,
    /// Operations committed in those transactions.
    pub(crate) grouped_ops: AtomicU64,
    /// Groups whose transaction failed and whose operations were run one by one.
    pub(crate) fallbacks: AtomicU64,
}

/// Runs `ops` on the writer connection: one transaction for all of them when there are
/// several, then answers each caller (module docs: the invariants).
pub(crate) fn run_group(
    conn: &Connection,
    counter: &AtomicU64,
    stats: &GroupStats,
    mut ops: Vec<Box<dyn Pending>>,
) {
    if ops.len() == 1 {
        let db = Db::new(conn, counter);
        for mut op in ops {
            op.run(&db);
            op.answer();
        }
        return;
    }
    let grouped = Db::grouped(conn, counter);
    let committed = (|| {
        grouped.begin_group()?;
        for op in &mut ops {
            op.run(&grouped);
            if grouped.group_broken() {
                return Err(Error::backend(
                    "sqlite",
                    "the group's transaction ended early",
                ));
            }
        }
        grouped.commit_group()
    })();
    match committed {
        Ok(()) => {
            stats.groups.fetch_add(1, Ordering::Relaxed);
            stats
                .grouped_ops
                .fetch_add(ops.len() as u64, Ordering::Relaxed);
            for op in ops {
                op.answer();
            }
        }
        Err(_) => {
            // Nothing of the group was committed: run each operation again on its own, so
            // each caller gets its own operation's real outcome.
            grouped.abandon_group();
            stats.fallbacks.fetch_add(1, Ordering::Relaxed);
            let db = Db::new(conn, counter);
            for mut op in ops {
                op.run(&db);
                op.answer();
            }
        }
    }
}

//! The previous release of cairn-sqlite's spool — the build at commit 72b3161, whose view of
//! cairn's migration set ends at `0006_spool_run_close` — kept as a test harness: its
//! statements and the Rust that bound them, run straight through rusqlite against a store the
//! new build migrated, as another process of the previous release would.
//!
//! **Frozen copies. Never edit anything here to follow the new code.** Every statement below
//! is copied verbatim, with its doc comment, from `git show
//! 72b3161:crates/backend-sqlite/src/spool/sql.rs` (the transaction statements from
//! `…/src/sql.rs`); the Rust that binds them follows 72b3161's `spool/enqueue.rs` (the read
//! of a stored key, then `ENQUEUE` in a write transaction), `spool/claim.rs` (the expired
//! leases settled, then `CANDIDATES` and one `TAKE` per run), `spool/settle.rs`
//! (`LEASE_STATE`, then `ACK`), `db.rs` (`BEGIN IMMEDIATE`, a transaction that wrote nothing
//! rolled back) and `files.rs` (the connection's pragmas), changed only where the old code
//! reached into its store handle (the connection, the clock and the backoff are fields here).
//! If a test here fails, the new build broke the previous release, and the fix belongs in the
//! new build (or in a contract revision the fleet gates), never here.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_core::spool::{
    check_token, expired_park_reason, expiry_action, jitter_seed, transition, Action,
    BackoffPolicy, Claimed, Clock, ConsumerId, DedupKey, EnqueueOptions, Enqueued, LeaseToken,
    QueueName, RunId, RunState, Timestamp,
};
use cairn_core::{Error, Result};
use cairn_migrate::{cairn_set, MigrationSet, Runner};
use rusqlite::{params, Connection, OpenFlags, Params, Row};

/// The newest revision of cairn's set the previous release knows (its head).
pub(crate) const HEAD: &str = "0006_spool_run_close";

/// The previous release's view of cairn's migration set: this build's set up to [`HEAD`]
/// (revisions are never edited once released, so the prefix is exactly what it shipped).
pub(crate) fn migration_set() -> MigrationSet {
    cairn_set()
        .up_to(HEAD)
        .expect("the previous release's head is a revision of cairn's set")
}

/// The previous release's migration runner, as its `SqliteStore::open_with` built it.
pub(crate) fn runner() -> Runner {
    Runner::new(migration_set()).with_lock_timeout(Duration::from_secs(30))
}

// ---------------------------------------------------------------------------------------------
// Verbatim from `git show 72b3161:crates/backend-sqlite/src/sql.rs`.
// ---------------------------------------------------------------------------------------------

/// Starts a write transaction: takes SQLite's single writer lock up front, so two writers
/// (threads or processes) serialize here instead of failing on a lock upgrade later.
pub(crate) const BEGIN_IMMEDIATE: &str = "BEGIN IMMEDIATE";
/// Commits the open transaction.
pub(crate) const COMMIT: &str = "COMMIT";
/// Rolls the open transaction back.
pub(crate) const ROLLBACK: &str = "ROLLBACK";

// ---------------------------------------------------------------------------------------------
// Statements: verbatim from `git show 72b3161:crates/backend-sqlite/src/spool/sql.rs`.
// ---------------------------------------------------------------------------------------------

/// Creates a run unless `(queue, dedup_key)` exists; returns the new id, or no row when the key
/// already had a run (then nothing was written).
pub(super) const ENQUEUE: &str = "\
INSERT INTO spool_run (run_id, queue, dedup_key, supersede_group, state, attempts, max_attempts,
                       priority, enqueued_at, updated_at, due_at, payload_bytes, payload, closed)
VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, ?7, ?8, ?8, ?9, ?10, ?11, 0)
ON CONFLICT (queue, dedup_key) DO NOTHING
RETURNING run_id";

/// The id of the run holding `(queue, dedup_key)`.
pub(super) const RUN_ID_BY_KEY: &str =
    "SELECT run_id FROM spool_run WHERE queue = ?1 AND dedup_key = ?2";

/// Claimed runs of a queue whose lease plus backoff ran out (through `spool_run_expiry`).
pub(super) const EXPIRED: &str = "\
SELECT run_no, attempts, max_attempts, cancel_requested
FROM spool_run
WHERE queue = ?1 AND state = 'claimed' AND due_at <= ?2";

/// Due runs of a queue in claim order, at most `?3` (one range of `spool_run_claim`: `due_at`
/// is set exactly on live runs).
pub(super) const CANDIDATES: &str = "\
SELECT run_no, run_id, dedup_key, state, attempts, payload
FROM spool_run
WHERE queue = ?1 AND due_at <= ?2
ORDER BY priority DESC, due_at, run_no
LIMIT ?3";

/// Hands one run to a consumer under a new lease.
pub(super) const TAKE: &str = "\
UPDATE spool_run
SET state = ?2, attempts = ?3, updated_at = ?4, lease_token = ?5, lease_consumer = ?6,
    lease_expires_at = ?7, due_at = ?8
WHERE run_no = ?1";

/// Ends a run in a terminal state: clears its schedule and lease (the token stays, for a
/// repeated ack) and records the reason when one is given.
pub(super) const FINISH: &str = "\
UPDATE spool_run
SET state = ?2, reason = coalesce(?3, reason), updated_at = ?4, due_at = NULL, finished_at = ?4,
    lease_consumer = NULL, lease_expires_at = NULL, cancel_requested = 0
WHERE run_no = ?1";

/// Ends a claimed run as succeeded, as [`FINISH`] ends a run, and clears the reason an earlier
/// attempt's nack left (a succeeded run has none): `?1` run, `?2` the succeeded state, `?3` now.
pub(super) const ACK: &str = "\
UPDATE spool_run
SET state = ?2, reason = NULL, updated_at = ?3, due_at = NULL, finished_at = ?3,
    lease_consumer = NULL, lease_expires_at = NULL, cancel_requested = 0
WHERE run_no = ?1";

/// What the lease operations (heartbeat, ack, nack, cancel) decide from.
pub(super) const LEASE_STATE: &str = "\
SELECT run_no, queue, dedup_key, state, attempts, max_attempts, cancel_requested, lease_token
FROM spool_run
WHERE run_id = ?1";

/// Run counts per queue and state, with the enqueue time of each queue's oldest queued run on
/// its `queued` row (NULL on the others). The spool-wide counts are their sums.
pub(super) const QUEUE_STATE_COUNTS: &str = "\
SELECT queue, state, count(*), min(CASE WHEN state = 'queued' THEN enqueued_at END)
FROM spool_run
GROUP BY queue, state";

// ---------------------------------------------------------------------------------------------
// The Rust that ran them, from 72b3161's `spool/*.rs`, `db.rs` and `files.rs`.
// ---------------------------------------------------------------------------------------------

fn map(e: rusqlite::Error) -> Error {
    Error::backend("sqlite", format!("previous release: {e}"))
}

fn corrupt(what: &str) -> Error {
    Error::corrupt(what.to_owned())
}

fn micros(t: Timestamp) -> i64 {
    t.as_unix_micros()
}

fn len_i64(bytes: &[u8]) -> i64 {
    i64::try_from(bytes.len()).unwrap_or(i64::MAX)
}

fn count(n: i64, what: &str) -> Result<u32> {
    u32::try_from(n).map_err(|_| corrupt(&format!("a stored {what} is out of range")))
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

/// How a write transaction ends.
enum End {
    Commit,
    Rollback,
}

fn exec(conn: &Connection, sql: &str, params: impl Params) -> Result<usize> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute(params))
        .map_err(map)
}

fn rows<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    f: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql).map_err(map)?;
    let out = stmt
        .query_map(params, f)
        .map_err(map)?
        .collect::<rusqlite::Result<Vec<T>>>()
        .map_err(map);
    out
}

/// Runs `f` in a `BEGIN IMMEDIATE` transaction; an error rolls everything back, and so does a
/// transaction that wrote nothing ([`End::Rollback`]).
fn write_tx<T>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<(T, End)>) -> Result<T> {
    exec(conn, BEGIN_IMMEDIATE, [])?;
    match f(conn) {
        Ok((v, End::Commit)) => match exec(conn, COMMIT, []) {
            Ok(_) => Ok(v),
            Err(e) => {
                let _ = exec(conn, ROLLBACK, []);
                Err(e)
            }
        },
        Ok((v, End::Rollback)) => exec(conn, ROLLBACK, []).map(|_| v),
        Err(e) => {
            let _ = exec(conn, ROLLBACK, []);
            Err(e)
        }
    }
}

/// What the lease operations decide from (72b3161's `settle.rs`).
struct LeaseRow {
    run_no: i64,
    state: RunState,
    attempts: u32,
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

/// The lease state of `run`; `None` when no such run is stored.
fn lease_row(conn: &Connection, run: RunId) -> Result<Option<LeaseRow>> {
    let found: Vec<LeaseTuple> = rows(conn, LEASE_STATE, params![run.as_bytes()], |r| {
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
    let Some((run_no, _queue, _key, st, attempts, _max_attempts, _cancel, token)) =
        found.into_iter().next()
    else {
        return Ok(None);
    };
    Ok(Some(LeaseRow {
        run_no,
        state: state(&st)?,
        attempts: count(attempts, "attempt count")?,
        token: token
            .map(|t| {
                LeaseToken::from_slice(&t)
                    .map_err(|_| corrupt("a stored lease token is not 16 bytes"))
            })
            .transpose()?,
    }))
}

/// A run as the previous release reads it ([`LEASE_STATE`]).
#[derive(Clone, Debug)]
pub(crate) struct OldRun {
    /// `state`.
    pub(crate) state: RunState,
    /// `attempts`.
    pub(crate) attempts: u32,
    /// `lease_token`.
    pub(crate) token: Option<LeaseToken>,
}

type CandidateRow = (i64, Vec<u8>, Vec<u8>, String, i64, Vec<u8>);

/// One process of the previous release on a store file: its own connection (the previous
/// release's writer, with its pragmas), its clock and its backoff policy. Every call runs on
/// tokio's blocking pool, as the previous release's did.
#[derive(Clone)]
pub(crate) struct OldSpool {
    conn: Arc<Mutex<Connection>>,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
}

impl OldSpool {
    /// Opens a connection to the store file at `path` as 72b3161's `files::connect` did: no
    /// symlink followed, the busy timeout, foreign keys on, WAL, `synchronous=FULL`.
    pub(crate) fn connect(
        path: &Path,
        busy_timeout: Duration,
        clock: Arc<dyn Clock>,
        backoff: BackoffPolicy,
    ) -> Result<Self> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let conn = Connection::open_with_flags(path, flags).map_err(map)?;
        conn.busy_timeout(busy_timeout).map_err(map)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(map)?;
        conn.set_prepared_statement_cache_capacity(32);
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(map)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::backend("sqlite", format!("not in WAL mode: {mode}")));
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(map)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            clock,
            backoff,
        })
    }

    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection, Timestamp, &BackoffPolicy) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (conn, now, backoff) = (self.conn.clone(), self.clock.now(), self.backoff);
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&conn, now, &backoff)
        })
        .await
        .map_err(|e| Error::backend("sqlite", format!("previous release: {e}")))?
    }

    /// An enqueue of the previous release (72b3161's `SqliteSpool::enqueue`): a key already
    /// stored is answered from a read; otherwise [`ENQUEUE`] in a write transaction, which
    /// reads the run holding the key when another writer stored it meanwhile (and rolls back).
    pub(crate) async fn enqueue(
        &self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let max_attempts = options.effective_max_attempts()?;
        let (queue, key) = (queue.clone(), key.clone());
        self.with(move |conn, now, _| {
            let found: Vec<Vec<u8>> = rows(
                conn,
                RUN_ID_BY_KEY,
                params![queue.as_str(), key.as_bytes()],
                |r| r.get(0),
            )?;
            if let Some(id) = found.first() {
                return Ok(Enqueued {
                    run_id: run_id(id)?,
                    created: false,
                });
            }
            write_tx(conn, |conn| {
                let done = enqueue_row(conn, &queue, &key, &payload, &options, max_attempts, now)?;
                // A duplicate wrote nothing: roll back, so no commit touches the file.
                let end = if done.created {
                    End::Commit
                } else {
                    End::Rollback
                };
                Ok((done, end))
            })
        })
        .await
    }

    /// A claim of the previous release (72b3161's `claim_tx`): one write transaction that
    /// settles the queue's expired leases it does not take back, then takes up to `limit`
    /// due runs in claim order, one [`TAKE`] each; rolled back when it changed nothing.
    pub(crate) async fn claim(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>> {
        let (queue, consumer) = (queue.clone(), consumer.clone());
        self.with(move |conn, now, backoff| {
            write_tx(conn, |conn| {
                let wrote = settle_expired_tx(conn, &queue, now)?;
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                let found: Vec<CandidateRow> = rows(
                    conn,
                    CANDIDATES,
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
                let mut out = Vec::with_capacity(found.len());
                for (run_no, id, key, from, attempts, payload) in found {
                    let from = state(&from)?;
                    let action = if from == RunState::Queued {
                        Action::Claim
                    } else {
                        Action::Reclaim
                    };
                    let to = transition(from, action)?;
                    let attempt = count(attempts, "attempt count")?.saturating_add(1);
                    let key = dedup_key(key)?;
                    let due = expires_at.saturating_add(delay(backoff, &queue, &key, attempt));
                    let token = LeaseToken::generate();
                    exec(
                        conn,
                        TAKE,
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
                        // The new core's field: the previous release stores no trace context.
                        traceparent: None,
                    });
                }
                let end = if wrote || !out.is_empty() {
                    End::Commit
                } else {
                    End::Rollback
                };
                Ok((out, end))
            })
        })
        .await
    }

    /// An ack of the previous release (72b3161's `ack_tx`): the run's lease read, the token
    /// checked, [`ACK`]; a repeated ack of a succeeded run writes nothing.
    pub(crate) async fn ack(&self, run: RunId, token: LeaseToken) -> Result<()> {
        self.with(move |conn, now, _| {
            write_tx(conn, |conn| {
                let row = lease_row(conn, run)?.ok_or(Error::UnknownRun { run })?;
                check_token(run, row.token, token)?;
                let to = transition(row.state, Action::Ack)?;
                if to == row.state {
                    // A repeated ack of a succeeded run: nothing to write.
                    return Ok(((), End::Rollback));
                }
                exec(conn, ACK, params![row.run_no, to.as_str(), micros(now)])?;
                Ok(((), End::Commit))
            })
        })
        .await
    }

    /// The run as the previous release reads it ([`LEASE_STATE`]); `None` when it is not there.
    pub(crate) async fn run(&self, run: RunId) -> Result<Option<OldRun>> {
        self.with(move |conn, _, _| {
            Ok(lease_row(conn, run)?.map(|r| OldRun {
                state: r.state,
                attempts: r.attempts,
                token: r.token,
            }))
        })
        .await
    }

    /// The run counts per queue and state as the previous release's stats read them
    /// ([`QUEUE_STATE_COUNTS`]).
    pub(crate) async fn counts(&self) -> Result<BTreeMap<(String, String), i64>> {
        self.with(|conn, _, _| {
            let found: Vec<(String, String, i64)> = rows(conn, QUEUE_STATE_COUNTS, [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
            Ok(found.into_iter().map(|(q, s, n)| ((q, s), n)).collect())
        })
        .await
    }

    /// The `due_at` and `lease_expires_at` the previous release's tables hold for `run`
    /// (read with a statement of the test's own, for its checks).
    pub(crate) async fn lease_times(&self, run: RunId) -> Result<(Option<i64>, Option<i64>)> {
        self.with(move |conn, _, _| {
            conn.query_row(
                "SELECT due_at, lease_expires_at FROM spool_run WHERE run_id = ?1",
                params![run.as_bytes()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(map)
        })
        .await
    }
}

/// 72b3161's `enqueue_row` without a supersede group: the insert, or the read of the run that
/// holds the key.
fn enqueue_row(
    conn: &Connection,
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
        .map(|g| g.as_bytes().to_vec());
    if group.is_some() {
        return Err(Error::invalid(
            "supersede group",
            "the harness enqueues without one",
        ));
    }
    let inserted: Vec<Vec<u8>> = rows(
        conn,
        ENQUEUE,
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
        let existing: Vec<Vec<u8>> = rows(
            conn,
            RUN_ID_BY_KEY,
            params![queue.as_str(), key.as_bytes()],
            |r| r.get(0),
        )?;
        let existing = existing
            .first()
            .ok_or_else(|| corrupt("an enqueue conflicted with a run that is not there"))?;
        return Ok(Enqueued {
            run_id: run_id(existing)?,
            created: false,
        });
    }
    Ok(Enqueued {
        run_id: id,
        created: true,
    })
}

/// Finishes `queue`'s expired leases that are not reclaimed (a cancel was requested, or the
/// attempts are spent: parked); a reclaimable one is left for the claim to take back. Says
/// whether it wrote anything.
fn settle_expired_tx(conn: &Connection, queue: &QueueName, now: Timestamp) -> Result<bool> {
    let mut wrote = false;
    let expired: Vec<(i64, i64, i64, bool)> =
        rows(conn, EXPIRED, params![queue.as_str(), micros(now)], |r| {
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
        exec(
            conn,
            FINISH,
            params![run_no, to.as_str(), reason, micros(now)],
        )?;
        wrote = true;
    }
    Ok(wrote)
}

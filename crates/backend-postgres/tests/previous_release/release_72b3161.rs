//! The previous release of cairn-postgres's spool — the build at commit 72b3161, whose view of
//! cairn's migration set ends at `0006_spool_run_close` — kept as a test harness: its
//! statements and the Rust that bound them, run straight through sqlx against a store the
//! new build migrated.
//!
//! **Frozen copies. Never edit anything here to follow the new code.** Every statement below
//! is copied verbatim, with its doc comment, from `git show
//! 72b3161:crates/backend-postgres/src/spool/sql.rs` (and `SESSION_SETUP` from
//! `…/src/sql.rs`); the Rust that binds them follows 72b3161's `enqueue.rs` (the enqueue
//! lane's `ENQUEUE_MANY`, then the unbatched `ENQUEUE` for a key another run holds),
//! `claim.rs` (`CLAIM_QUEUED`, else `CLAIM_PICK` + `CLAIM_APPLY`), `settle.rs` (the ack
//! lane's `ACK_MANY`, then `ACK` and `READ_RUN`), `row.rs` (`claim_jitter`) and `keys.rs`
//! (`wake_channel`), changed only where the old code reached into its spool handle (the
//! pool, the schema, the clock and the backoff are fields here). The point of the harness is
//! that the store keeps working for code that knows nothing of what came after 0006: if a
//! test here fails, the new build broke the previous release, and the fix belongs in the new
//! build (or in a contract revision the fleet gates), never here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{
    check_token, expired_park_reason, expiry_action, jitter_seed, transition, Action,
    BackoffPolicy, Claimed, Clock, ConsumerId, DedupKey, EnqueueOptions, Enqueued, LeaseToken,
    QueueName, RunId, RunState, Timestamp,
};
use cairn_core::{key64, Error, Result};
use cairn_migrate::{cairn_set, MigrationSet, Runner};
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};
use sqlx::Row;

/// The newest revision of cairn's set the previous release knows (its head).
pub(crate) const HEAD: &str = "0006_spool_run_close";

/// The previous release's view of cairn's migration set: this build's set up to [`HEAD`]
/// (revisions are never edited once released, so the prefix is exactly what it shipped).
pub(crate) fn migration_set() -> MigrationSet {
    cairn_set()
        .up_to(HEAD)
        .expect("the previous release's head is a revision of cairn's set")
}

/// The previous release's migration runner, as its `PgStore::open_with` built it.
pub(crate) fn runner() -> Runner {
    Runner::new(migration_set()).with_lock_timeout(Duration::from_secs(30))
}

// ---------------------------------------------------------------------------------------------
// Statements: verbatim from `git show 72b3161:crates/backend-postgres/src/spool/sql.rs`.
// ---------------------------------------------------------------------------------------------

/// The columns [`super::row::RunRow`] reads, in its order.
macro_rules! run_columns {
    () => {
        "r.run_id, r.queue, r.dedup_key, r.supersede_group, r.state, r.attempts, \
         r.max_attempts, r.priority, r.payload_bytes, r.enqueued_at, r.updated_at, r.due_at, \
         r.finished_at, r.lease_token, r.lease_consumer, r.lease_expires_at, \
         r.cancel_requested, r.reason, r.closed"
    };
}

/// Enqueue in one statement: `$1` new run id, `$2` queue, `$3` dedup key, `$4` supersede
/// group (NULL: none), `$5` max attempts, `$6` priority, `$7` now, `$8` due at, `$9` payload
/// bytes, `$10` payload, `$11` the superseded state, `$12` the queue's wake channel, `$13` the
/// claim jitter of attempt 1 (see [`CLAIM_QUEUED`]).
///
/// Returns one row `(run id, notified)`: the new run's id when it was created, else the id of
/// the run that holds the key. A duplicate writes nothing (`DO NOTHING` takes no row lock and,
/// having written nothing, its commit waits for no WAL flush), and its answer is read in the
/// same statement. That read sees the statement's snapshot, so when the run holding the key
/// committed after the snapshot was taken (a concurrent enqueue of the same key), the
/// statement returns no row and the caller runs it again, on a new snapshot that sees the
/// run. The supersede and the `NOTIFY` happen only when the run was created; data-modifying
/// CTEs share one snapshot, so the new run never supersedes itself.
pub(super) const ENQUEUE: &str = "\
WITH ins AS ( \
    INSERT INTO spool_run (run_id, queue, dedup_key, supersede_group, state, max_attempts, \
        priority, enqueued_at, updated_at, due_at, payload_bytes, payload, claim_attempt, \
        claim_jitter, closed) \
    VALUES ($1, $2, $3, $4, 'queued', $5, $6, $7, $7, $8, $9, $10, 1, $13, FALSE) \
    ON CONFLICT (queue, dedup_key) DO NOTHING \
    RETURNING run_id \
), sup AS ( \
    UPDATE spool_run s SET state = $11, updated_at = $7, due_at = NULL, finished_at = $7, \
        lease_consumer = NULL, lease_expires_at = NULL, cancel_requested = FALSE \
    WHERE $4::bytea IS NOT NULL AND s.queue = $2 AND s.supersede_group = $4 \
        AND s.state = 'queued' AND s.run_id <> $1 \
        AND EXISTS (SELECT 1 FROM ins WHERE ins.run_id = $1) \
    RETURNING 1 \
), wake AS ( \
    SELECT pg_catalog.pg_notify($12, '') FROM ins WHERE ins.run_id = $1 \
) \
SELECT ins.run_id, (SELECT pg_catalog.count(*) FROM wake) FROM ins \
UNION ALL \
SELECT r.run_id, 0 FROM spool_run r \
WHERE r.queue = $2 AND r.dedup_key = $3 AND NOT EXISTS (SELECT 1 FROM ins)";

/// Several enqueues (none with a supersede group) in one statement, over arrays of equal
/// length: `$1` run ids, `$2` queues, `$3` dedup keys, `$4` max attempts, `$5` priorities, `$6`
/// now (enqueued and updated at), `$7` due at, `$8` payload bytes, `$9` payloads, `$10` the
/// queues' wake channels, `$11` the claim jitters of attempt 1 (see [`CLAIM_QUEUED`]).
/// Returns `(run_id, queue, dedup_key)` of each run it created; a key already taken (by a
/// committed run, or by an earlier row of the same batch) returns nothing for that row. Wakes
/// each queue that got a run, once.
pub(super) const ENQUEUE_MANY: &str = "\
WITH input AS ( \
    SELECT * FROM ROWS FROM (pg_catalog.unnest($1::bytea[]), pg_catalog.unnest($2::text[]), \
        pg_catalog.unnest($3::bytea[]), pg_catalog.unnest($4::int4[]), \
        pg_catalog.unnest($5::int4[]), pg_catalog.unnest($6::int8[]), \
        pg_catalog.unnest($7::int8[]), pg_catalog.unnest($8::int8[]), \
        pg_catalog.unnest($9::bytea[]), pg_catalog.unnest($10::text[]), \
        pg_catalog.unnest($11::int8[])) \
        WITH ORDINALITY AS t(run_id, queue, dedup_key, max_attempts, priority, now, due_at, \
            payload_bytes, payload, channel, jitter, ord) \
), ins AS ( \
    INSERT INTO spool_run (run_id, queue, dedup_key, supersede_group, state, max_attempts, \
        priority, enqueued_at, updated_at, due_at, payload_bytes, payload, claim_attempt, \
        claim_jitter, closed) \
    SELECT run_id, queue, dedup_key, NULL, 'queued', max_attempts, priority, now, now, due_at, \
        payload_bytes, payload, 1, jitter, FALSE FROM input ORDER BY ord \
    ON CONFLICT (queue, dedup_key) DO NOTHING \
    RETURNING run_id, queue, dedup_key \
), wake AS ( \
    SELECT pg_catalog.pg_notify(c.channel, '') FROM ( \
        SELECT DISTINCT i.channel FROM input i JOIN ins ON ins.run_id = i.run_id) c \
) \
SELECT ins.run_id, ins.queue, ins.dedup_key, (SELECT pg_catalog.count(*) FROM wake) FROM ins";

/// The backoff joins of [`CLAIM_QUEUED`]: from `p` (`expires_at` micros, `base_ns`, `cap_ns`
/// numeric) and `n` (`attempt`, `jitter` = the top 32 bits of
/// [`cairn_core::spool::jitter_seed`]), `d.due_at` is `expires_at` plus
/// [`cairn_core::spool::backoff`]`(attempt, base, cap, jitter)`, exactly as
/// `Timestamp::saturating_add` adds it: the same integer arithmetic (in `numeric`, so nothing
/// overflows), the delay cut to whole microseconds, the sum saturating at `i64::MAX`. A test
/// (`claim_backoff_in_sql_is_the_core_backoff`) evaluates these joins against the core function.
macro_rules! claim_backoff_joins {
    () => {
        "CROSS JOIN LATERAL (SELECT LEAST(p.base_ns * pg_catalog.power(2::numeric, \
            LEAST(GREATEST(n.attempt, 1) - 1, 128)), p.cap_ns) AS ceiling) b \
         CROSS JOIN LATERAL (SELECT pg_catalog.div(b.ceiling, 2) AS half, \
            b.ceiling - pg_catalog.div(b.ceiling, 2) AS span) h \
         CROSS JOIN LATERAL (SELECT LEAST(p.expires_at::numeric + LEAST( \
            pg_catalog.div(h.half + LEAST(pg_catalog.div(h.span, 4294967295) * n.jitter \
                + pg_catalog.div(pg_catalog.mod(h.span, 4294967295) * n.jitter, 4294967295), \
                h.span), 1000), 9223372036854775807), 9223372036854775807)::int8 AS due_at) d"
    };
}

/// A claim in one statement (autocommit), when it can be one: `$1` queue, `$2` now, `$3` limit,
/// `$4` lease tokens (at least `$3`; the i-th run taken gets the i-th), `$5` consumer, `$6`
/// lease expiry, `$7` and `$8` the backoff base and cap in nanoseconds (text, read as numeric).
///
/// It takes the next `$3` due queued runs in claim order (`FOR NO KEY UPDATE SKIP LOCKED`, as
/// [`CLAIM_PICK`]) and writes each what [`CLAIM_APPLY`] writes for a claimed run, with `due_at`
/// computed here ([`claim_backoff_joins`]) from the jitter the run carries — but only when
/// `ok`: no claimed run of the queue is due (an expired lease to settle or reclaim, which the
/// claim order may put first; [`CLAIM_PICK`] handles those) and every run taken carries the
/// jitter of the attempt it starts (`claim_attempt = attempts + 1`, written with the run by
/// this build's enqueue and nack; NULL on runs written before revision 0005 or by older
/// builds). When not `ok` it writes nothing and the caller claims with the transaction.
/// Returns one row `(ok, NULL…)` when it took nothing, else one row per run taken:
/// `(ok, i, run id, dedup key, payload, attempts)` in claim order.
pub(super) const CLAIM_QUEUED: &str = concat!(
    "WITH p AS ( \
        SELECT $6::int8 AS expires_at, $7::numeric AS base_ns, $8::numeric AS cap_ns \
    ), late AS ( \
        SELECT 1 FROM spool_run r \
        WHERE r.queue = $1 AND r.state = 'claimed' AND r.due_at <= $2 LIMIT 1 \
    ), c AS ( \
        SELECT r.run_no, r.priority, r.due_at, r.attempts, r.claim_attempt, r.claim_jitter \
        FROM spool_run r \
        WHERE r.queue = $1 AND r.due_at IS NOT NULL AND r.due_at <= $2 AND r.state = 'queued' \
        ORDER BY r.priority DESC, r.due_at, r.run_no \
        LIMIT $3 \
        FOR NO KEY UPDATE SKIP LOCKED \
    ), go AS ( \
        SELECT NOT EXISTS (SELECT 1 FROM late) AND NOT EXISTS ( \
            SELECT 1 FROM c WHERE c.claim_attempt IS NULL OR c.claim_jitter IS NULL \
                OR c.claim_attempt::int8 <> c.attempts::int8 + 1 \
                OR c.claim_jitter < 0 OR c.claim_jitter > 4294967295) AS ok \
    ), n AS ( \
        SELECT c.run_no, c.attempts::int8 + 1 AS attempt, c.claim_jitter AS jitter, \
            pg_catalog.row_number() OVER (ORDER BY c.priority DESC, c.due_at, c.run_no) AS i \
        FROM c, go WHERE go.ok \
    ), w AS ( \
        SELECT n.run_no, n.attempt, n.i, d.due_at FROM n CROSS JOIN p ",
    claim_backoff_joins!(),
    " ), u AS ( \
        UPDATE spool_run r SET state = 'claimed', attempts = w.attempt, \
            lease_token = ($4::bytea[])[w.i], lease_consumer = $5, \
            lease_expires_at = p.expires_at, due_at = w.due_at, finished_at = NULL, \
            updated_at = $2 \
        FROM w, p WHERE r.run_no = w.run_no \
            AND r.run_no = ANY (ARRAY(SELECT w2.run_no FROM w w2)) \
        RETURNING w.i, r.run_id, r.dedup_key, r.payload, r.attempts \
    ) \
    SELECT go.ok, u.i, u.run_id, u.dedup_key, u.payload, u.attempts \
    FROM go LEFT JOIN u ON TRUE ORDER BY u.i"
);

/// A claim's one read, locking what it returns (`SKIP LOCKED`: concurrent claimers take
/// disjoint runs and never wait): kind `e` rows are every claimed run of queue `$1` whose lease
/// plus backoff ran out by `$2` (the claim settles those that must not run again); kind `c`
/// rows are the next `$3` due runs in claim order, leaving out expired runs that will be
/// settled (cancel requested, or no attempt left: the SQL form of
/// [`cairn_core::spool::expiry_action`], which the caller still applies to every row).
pub(super) const CLAIM_PICK: &str = "\
WITH e AS ( \
    SELECT r.run_id, r.state, r.attempts, r.max_attempts, r.cancel_requested \
    FROM spool_run r \
    WHERE r.queue = $1 AND r.state = 'claimed' AND r.due_at <= $2 \
    FOR NO KEY UPDATE SKIP LOCKED \
), c AS ( \
    SELECT r.run_id, r.state, r.attempts, r.max_attempts, r.cancel_requested, r.dedup_key, \
        r.payload, r.priority, r.due_at, r.run_no \
    FROM spool_run r \
    WHERE r.queue = $1 AND r.due_at IS NOT NULL AND r.due_at <= $2 \
        AND NOT (r.state = 'claimed' AND (r.cancel_requested OR r.attempts >= r.max_attempts)) \
    ORDER BY r.priority DESC, r.due_at, r.run_no \
    LIMIT $3 \
    FOR NO KEY UPDATE SKIP LOCKED \
) \
SELECT * FROM ( \
    SELECT 'e' AS kind, run_id, state, attempts, max_attempts, cancel_requested, \
        NULL::bytea AS dedup_key, NULL::bytea AS payload, 0 AS priority, 0::bigint AS due_at, \
        0::bigint AS run_no \
    FROM e \
    UNION ALL \
    SELECT 'c', run_id, state, attempts, max_attempts, cancel_requested, dedup_key, payload, \
        priority, due_at, run_no \
    FROM c \
) picked \
ORDER BY kind DESC, priority DESC, due_at, run_no";

/// Writes every run a claim picked, in one statement: `$1` now, then one array per column
/// (`$2` run ids, `$3` states, `$4` attempts, `$5` lease tokens (NULL: keep), `$6` consumers,
/// `$7` lease expiries, `$8` due times, `$9` finish times, `$10` cancel flags, `$11` reasons
/// (NULL: keep)).
pub(super) const CLAIM_APPLY: &str = "\
UPDATE spool_run r SET \
    state = u.state, attempts = u.attempts, lease_token = COALESCE(u.token, r.lease_token), \
    lease_consumer = u.consumer, lease_expires_at = u.expires_at, due_at = u.due_at, \
    finished_at = u.finished_at, cancel_requested = u.cancel_requested, \
    reason = COALESCE(u.reason, r.reason), updated_at = $1 \
FROM unnest($2::bytea[], $3::text[], $4::int[], $5::bytea[], $6::text[], $7::bigint[], \
    $8::bigint[], $9::bigint[], $10::bool[], $11::text[]) \
    AS u(run_id, state, attempts, token, consumer, expires_at, due_at, finished_at, \
        cancel_requested, reason) \
WHERE r.run_id = u.run_id AND r.run_id = ANY ($2::bytea[])";

/// One run's row (no payload, facts or events), for a read-decide-write transition.
pub(super) const READ_RUN: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM spool_run r WHERE r.run_id = $1"
);

/// Ack in one statement: `$1` run, `$2` token, `$3` the succeeded state, `$4` now; the reason
/// an earlier attempt's nack left is cleared. No row: the caller reads the run to say why.
pub(super) const ACK: &str = "\
UPDATE spool_run SET state = $3, reason = NULL, updated_at = $4, finished_at = $4, due_at = NULL, \
    lease_consumer = NULL, lease_expires_at = NULL, cancel_requested = FALSE \
WHERE run_id = $1 AND lease_token = $2 AND state = 'claimed'";

/// Several acks in one statement, over arrays of equal length: `$1` runs, `$2` tokens, `$3`
/// each ack's now; `$4` the succeeded state. Writes exactly what [`ACK`] writes to each run it
/// applies to and returns `(run_id, token)` of each; an ack it did not apply returns nothing
/// (two acks of one run and token apply once, so one of them returns nothing).
///
/// Unlike the other statements here it is sent unprepared (planned for its arrays each time):
/// on the generic plan the join of the runs with the acks was a nested loop over both lists,
/// the acks' function scan run once per run — a batch of 256 acks read 65,280 rows and built a
/// whole-row copy of each for the update's recheck (16 of its 20 ms, `auto_explain` in a drain
/// of 20,000 runs); planned for the arrays it is a hash join (3–7 ms).
pub(super) const ACK_MANY: &str = "\
UPDATE spool_run SET state = $4, reason = NULL, updated_at = a.acked_at, finished_at = a.acked_at, \
    due_at = NULL, \
    lease_consumer = NULL, lease_expires_at = NULL, cancel_requested = FALSE \
FROM unnest($1::bytea[], $2::bytea[], $3::int8[]) AS a(run_id, token, acked_at) \
WHERE spool_run.run_id = a.run_id AND spool_run.run_id = ANY ($1::bytea[]) \
    AND spool_run.lease_token = a.token \
    AND spool_run.state = 'claimed' \
RETURNING spool_run.run_id, a.token";

/// Counts, in one statement (one snapshot): one row per queue and state with runs (queue and
/// state NULL when there are none), each carrying its run count, the enqueue time of the
/// queue's oldest queued run (on its `queued` row, NULL on the others), and the spool-wide
/// event count, their payload bytes and the oldest event's time. The spool-wide run counts
/// are the rows' sums.
pub(super) const STATS: &str = "\
SELECT s.queue, s.state, s.n, s.oldest, ev.n, ev.bytes, ev.oldest \
FROM (SELECT pg_catalog.count(*) AS n, coalesce(pg_catalog.sum(payload_bytes), 0)::bigint AS bytes, \
        pg_catalog.min(created_at) AS oldest FROM spool_event) ev \
LEFT JOIN (SELECT queue, state, pg_catalog.count(*) AS n, \
        pg_catalog.min(enqueued_at) FILTER (WHERE state = 'queued') AS oldest \
        FROM spool_run GROUP BY queue, state) s ON TRUE";

// ---------------------------------------------------------------------------------------------
// Verbatim from `git show 72b3161:crates/backend-postgres/src/sql.rs`.
// ---------------------------------------------------------------------------------------------

/// Session settings every connection of a store gets (its one pool serves the epoch log, the
/// spool, the migrator's looks and the fleet heartbeat): `$1` search_path, `$2` lock_timeout
/// (ms), and no bitmap scans.
///
/// Bitmap scans are off for the spool's claims: a claim reads the next due runs in the claim
/// index's own order and stops after `limit`. A queue table's statistics are usually wrong — it
/// goes from empty to thousands of runs and back faster than autoanalyze follows, and some
/// servers run without autovacuum — and with too few rows estimated, the planner picks a bitmap
/// scan of every due run of the queue plus a sort instead, which reads and sorts the whole
/// queue on every claim (measured: 3,008 rows sorted to take 5). Every spool and epoch-log
/// statement looks rows up through an index by its leading columns, so none needs a bitmap
/// scan; without them the ordered index scan is the plan whatever the estimate. The test
/// `a_claim_reads_the_claim_index_in_order_whatever_the_statistics` checks the plan.
pub(crate) const SESSION_SETUP: &str = "SELECT pg_catalog.set_config('search_path', $1, false), \
     pg_catalog.set_config('lock_timeout', $2, false), \
     pg_catalog.set_config('enable_bitmapscan', 'off', false)";

// ---------------------------------------------------------------------------------------------
// From 72b3161's `spool/keys.rs` and `spool/row.rs` (the schema is a `&str` here, not the
// crate-private `SchemaName`).
// ---------------------------------------------------------------------------------------------

/// The key-derivation context of wake-up channel names (shared by every process of a store:
/// changing it makes two builds miss each other's enqueues).
const WAKE_CONTEXT: &str = "cairn 2026-11 postgres spool wake v1";

/// The `NOTIFY` channel of `queue` in the store namespace `schema`: a plain lowercase
/// identifier of 28 bytes (Postgres allows 63), whatever the queue name.
fn wake_channel(schema: &str, queue: &QueueName) -> String {
    let key = key64(
        WAKE_CONTEXT,
        &[schema.as_bytes(), queue.as_str().as_bytes()],
    );
    format!("cairn_spool_{:016x}", key as u64)
}

/// The attempt a run left with `attempts` starts next, as stored in `claim_attempt` (`None`
/// past `i32::MAX`, where no claim can take the one-statement path).
fn next_attempt(attempts: u32) -> Option<i32> {
    attempts.checked_add(1).and_then(|a| i32::try_from(a).ok())
}

/// The claim jitter a run left with `attempts` carries (`claim_jitter`, read by
/// [`CLAIM_QUEUED`]): the top 32 bits of the jitter seed of its next attempt — the only bits
/// [`cairn_core::spool::backoff`] uses. `None` where [`next_attempt`] is `None`.
fn claim_jitter(queue: &QueueName, key: &DedupKey, attempts: u32) -> Option<i64> {
    let next = next_attempt(attempts)?;
    let seed = jitter_seed(queue, key, u32::try_from(next).ok()?);
    Some(i64::try_from(seed >> 32).unwrap_or(i64::MAX))
}

/// How often an enqueue runs its statement again when the key's run was committed after the
/// statement's snapshot ([`ENQUEUE`] returns no row then), before giving up.
const ENQUEUE_RACES: usize = 16;

/// How often a read-decide-write transition is retried when the run changed between its read
/// and its compare-and-set write.
const CAS_ROUNDS: usize = 32;

fn map(e: sqlx::Error) -> Error {
    Error::backend("postgres", format!("previous release: {e}"))
}

fn get<'r, T>(row: &'r PgRow, i: usize) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(i).map_err(map)
}

fn run_id(bytes: &[u8]) -> Result<RunId> {
    RunId::from_slice(bytes).map_err(|_| Error::corrupt("a run id that is not 16 bytes"))
}

fn u32_of(n: i32) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::corrupt("a negative attempt count"))
}

fn micros(t: Timestamp) -> i64 {
    t.as_unix_micros()
}

/// Which path a claim of the previous release took.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ClaimPath {
    /// [`CLAIM_QUEUED`]: one statement.
    OneStatement,
    /// [`CLAIM_PICK`] + [`CLAIM_APPLY`] in one transaction.
    PickApply,
}

/// One run as the previous release reads it ([`READ_RUN`]): the columns the tests look at.
#[derive(Clone, Debug)]
pub(crate) struct OldRun {
    /// `queue`.
    pub(crate) queue: String,
    /// `dedup_key`.
    pub(crate) dedup_key: Vec<u8>,
    /// `state`.
    pub(crate) state: RunState,
    /// `attempts`.
    pub(crate) attempts: u32,
    /// `due_at`.
    pub(crate) due_at: Option<i64>,
    /// `finished_at`.
    pub(crate) finished_at: Option<i64>,
    /// `lease_token`.
    pub(crate) token: Option<LeaseToken>,
    /// `lease_expires_at`.
    pub(crate) lease_expires_at: Option<i64>,
}

/// One process of the previous release on a store: its own pool on the store's schema (each
/// connection set up with [`SESSION_SETUP`], as the previous release's pool was), its clock
/// and its backoff policy.
pub(crate) struct OldSpool {
    pool: PgPool,
    schema: String,
    clock: Arc<dyn Clock>,
    backoff: BackoffPolicy,
}

impl OldSpool {
    /// Connects to the store in `schema` of the server at `url`.
    pub(crate) async fn connect(
        url: &str,
        schema: &str,
        clock: Arc<dyn Clock>,
        backoff: BackoffPolicy,
    ) -> Result<Self> {
        let search_path = schema.to_owned();
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(30))
            .after_connect(move |conn, _meta| {
                let search_path = search_path.clone();
                Box::pin(async move {
                    sqlx::query(SESSION_SETUP)
                        .bind(search_path)
                        .bind("10000")
                        .execute(conn)
                        .await
                        .map(|_| ())
                })
            })
            .connect(url)
            .await
            .map_err(map)?;
        Ok(Self {
            pool,
            schema: schema.to_owned(),
            clock,
            backoff,
        })
    }

    /// Closes the pool.
    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }

    /// The backoff after `attempt` of the run `(queue, key)` (72b3161's `PgSpool::retry_delay`).
    fn retry_delay(&self, queue: &QueueName, key: &DedupKey, attempt: u32) -> Duration {
        self.backoff
            .delay(attempt, jitter_seed(queue, key, attempt))
    }

    /// One enqueue without a supersede group, as the previous release made it: the enqueue
    /// lane's [`ENQUEUE_MANY`] (a batch of one), then, for a key another run holds, the
    /// unbatched [`ENQUEUE`], which answers that run's id.
    pub(crate) async fn enqueue(
        &self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let done = self
            .enqueue_batch(queue, vec![(key.clone(), payload, options)])
            .await?;
        Ok(done[0])
    }

    /// Several enqueues at once, as the previous release's enqueue lane wrote concurrent ones:
    /// one [`ENQUEUE_MANY`] over the batch, then each key it did not insert alone through
    /// [`ENQUEUE`]. Answers in input order.
    pub(crate) async fn enqueue_batch(
        &self,
        queue: &QueueName,
        items: Vec<(DedupKey, Vec<u8>, EnqueueOptions)>,
    ) -> Result<Vec<Enqueued>> {
        let now = self.clock.now();
        let mut ids = Vec::with_capacity(items.len());
        let mut queues = Vec::with_capacity(items.len());
        let mut keys = Vec::with_capacity(items.len());
        let mut attempts = Vec::with_capacity(items.len());
        let mut priorities = Vec::with_capacity(items.len());
        let mut nows = Vec::with_capacity(items.len());
        let mut dues = Vec::with_capacity(items.len());
        let mut lens = Vec::with_capacity(items.len());
        let mut payloads = Vec::with_capacity(items.len());
        let mut channels = Vec::with_capacity(items.len());
        let mut jitters = Vec::with_capacity(items.len());
        let mut generated = Vec::with_capacity(items.len());
        for (key, payload, options) in &items {
            let max_attempts = i32::try_from(options.effective_max_attempts()?)
                .map_err(|_| Error::invalid("max attempts", "is too large"))?;
            let id = RunId::generate(now);
            generated.push(id);
            ids.push(id.as_bytes().to_vec());
            queues.push(queue.as_str().to_owned());
            keys.push(key.as_bytes().to_vec());
            attempts.push(max_attempts);
            priorities.push(options.priority);
            nows.push(micros(now));
            dues.push(micros(options.not_before.unwrap_or(now)));
            lens.push(i64::try_from(payload.len()).unwrap_or(i64::MAX));
            payloads.push(payload.clone());
            channels.push(wake_channel(&self.schema, queue));
            jitters.push(claim_jitter(queue, key, 0));
        }
        let rows = sqlx::query(ENQUEUE_MANY)
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
            .fetch_all(&self.pool)
            .await
            .map_err(map)?;
        let mut created = HashMap::with_capacity(rows.len());
        for row in &rows {
            let id = run_id(&get::<Vec<u8>>(row, 0)?)?;
            created.insert(get::<Vec<u8>>(row, 2)?, id);
        }
        let mut out = Vec::with_capacity(items.len());
        for ((key, payload, options), id) in items.iter().zip(generated) {
            match created.get(key.as_bytes()) {
                Some(&stored) => out.push(Enqueued {
                    run_id: stored,
                    created: stored == id,
                }),
                None => out.push(self.enqueue_unbatched(queue, key, payload, options).await?),
            }
        }
        Ok(out)
    }

    /// 72b3161's unbatched enqueue (`enqueue_tx`'s loop over `enqueue_once`), no supersede
    /// group: [`ENQUEUE`] with a fresh id until it answers a run.
    async fn enqueue_unbatched(
        &self,
        queue: &QueueName,
        key: &DedupKey,
        payload: &[u8],
        options: &EnqueueOptions,
    ) -> Result<Enqueued> {
        let now = self.clock.now();
        let superseded = transition(RunState::Queued, Action::Supersede)?;
        let max_attempts = i32::try_from(options.effective_max_attempts()?)
            .map_err(|_| Error::invalid("max attempts", "is too large"))?;
        for _ in 0..ENQUEUE_RACES {
            let id = RunId::generate(now);
            let row = sqlx::query(ENQUEUE)
                .bind(id.as_bytes().as_slice())
                .bind(queue.as_str())
                .bind(key.as_bytes())
                .bind(options.supersede_group.as_ref().map(|g| g.as_bytes()))
                .bind(max_attempts)
                .bind(options.priority)
                .bind(micros(now))
                .bind(micros(options.not_before.unwrap_or(now)))
                .bind(i64::try_from(payload.len()).unwrap_or(i64::MAX))
                .bind(payload)
                .bind(superseded.as_str())
                .bind(wake_channel(&self.schema, queue))
                .bind(claim_jitter(queue, key, 0))
                .fetch_optional(&self.pool)
                .await
                .map_err(map)?;
            if let Some(row) = row {
                let stored = run_id(&get::<Vec<u8>>(&row, 0)?)?;
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

    /// A claim of the previous release (72b3161's `claim_tx`): [`CLAIM_QUEUED`] in one
    /// statement when it can decide, else the transaction of [`CLAIM_PICK`] and
    /// [`CLAIM_APPLY`]. Says which path it took.
    pub(crate) async fn claim(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
    ) -> Result<(Vec<Claimed>, ClaimPath)> {
        let now = self.clock.now();
        if let Some(claimed) = self
            .claim_queued(queue, consumer, lease, limit, now)
            .await?
        {
            return Ok((claimed, ClaimPath::OneStatement));
        }
        let claimed = self
            .claim_pick_apply_at(queue, consumer, lease, limit, now)
            .await?;
        Ok((claimed, ClaimPath::PickApply))
    }

    /// The previous release's claim transaction alone ([`CLAIM_PICK`] + [`CLAIM_APPLY`]),
    /// as it ran whenever the one statement could not decide.
    pub(crate) async fn claim_pick_apply(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>> {
        let now = self.clock.now();
        self.claim_pick_apply_at(queue, consumer, lease, limit, now)
            .await
    }

    /// 72b3161's `claim_queued`.
    async fn claim_queued(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
        now: Timestamp,
    ) -> Result<Option<Vec<Claimed>>> {
        let tokens: Vec<LeaseToken> = (0..limit).map(|_| LeaseToken::generate()).collect();
        let expires_at = now.saturating_add(lease);
        let policy = self.backoff;
        let rows = sqlx::query(CLAIM_QUEUED)
            .bind(queue.as_str())
            .bind(micros(now))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(
                tokens
                    .iter()
                    .map(|t| t.as_bytes().to_vec())
                    .collect::<Vec<_>>(),
            )
            .bind(consumer.as_str())
            .bind(micros(expires_at))
            .bind(policy.base.as_nanos().to_string())
            .bind(policy.cap.as_nanos().to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(map)?;
        let Some(first) = rows.first() else {
            return Err(Error::corrupt("the one-statement claim returned no row"));
        };
        if !get::<bool>(first, 0)? {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let Some(i) = get::<Option<i64>>(row, 1)? else {
                continue;
            };
            let token = usize::try_from(i - 1)
                .ok()
                .and_then(|i| tokens.get(i))
                .copied()
                .ok_or_else(|| Error::corrupt("the one-statement claim numbered a run wrongly"))?;
            let key = DedupKey::from_bytes(get::<Vec<u8>>(row, 3)?)
                .map_err(|_| Error::corrupt("an invalid dedup key in the spool tables"))?;
            out.push(Claimed {
                run_id: run_id(&get::<Vec<u8>>(row, 2)?)?,
                dedup_key: key,
                payload: get(row, 4)?,
                attempt: u32_of(get(row, 5)?)?,
                token,
                expires_at,
                // The new core's field: the previous release stores no trace context.
                traceparent: None,
            });
        }
        Ok(Some(out))
    }

    /// 72b3161's `claim_pick_apply`.
    async fn claim_pick_apply_at(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<Claimed>> {
        let mut tx = self.pool.begin().await.map_err(map)?;
        let rows = sqlx::query(CLAIM_PICK)
            .bind(queue.as_str())
            .bind(micros(now))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(map)?;
        let mut writes = ClaimWrites::default();
        let mut settled = HashSet::new();
        let mut out = Vec::new();
        let expires_at = now.saturating_add(lease);
        for row in &rows {
            let kind: String = get(row, 0)?;
            let id = run_id(&get::<Vec<u8>>(row, 1)?)?;
            let from = RunState::parse(&get::<String>(row, 2)?)?;
            let attempts_raw: i32 = get(row, 3)?;
            let attempts = u32_of(attempts_raw)?;
            let max_attempts = u32_of(get(row, 4)?)?;
            let cancel_requested: bool = get(row, 5)?;
            let action = match from {
                RunState::Queued => Action::Claim,
                _ => expiry_action(attempts, max_attempts, cancel_requested),
            };
            if matches!(action, Action::Claim | Action::Reclaim) {
                if kind == "e" || out.len() >= limit {
                    // A reclaimable expired lease is handed out from the ordered rows only.
                    continue;
                }
                let to = transition(from, action)?;
                debug_assert_eq!(to, RunState::Claimed);
                let key = DedupKey::from_bytes(get::<Vec<u8>>(row, 6)?)
                    .map_err(|_| Error::corrupt("an invalid dedup key in the spool tables"))?;
                let payload: Vec<u8> = get(row, 7)?;
                let attempt = attempts + 1;
                let token = LeaseToken::generate();
                let due_at = expires_at.saturating_add(self.retry_delay(queue, &key, attempt));
                writes.claim(
                    id,
                    attempts_raw.saturating_add(1),
                    token,
                    consumer,
                    expires_at,
                    due_at,
                    cancel_requested,
                );
                out.push(Claimed {
                    run_id: id,
                    dedup_key: key,
                    payload,
                    attempt,
                    token,
                    expires_at,
                    // The new core's field: the previous release stores no trace context.
                    traceparent: None,
                });
            } else if settled.insert(id) {
                let to = transition(from, action)?;
                let reason = (action == Action::Park).then(|| expired_park_reason(attempts));
                writes.settle(id, to, attempts_raw, reason, micros(now));
            }
        }
        if !writes.ids.is_empty() {
            sqlx::query(CLAIM_APPLY)
                .bind(micros(now))
                .bind(writes.ids)
                .bind(writes.states)
                .bind(writes.attempts)
                .bind(writes.tokens)
                .bind(writes.consumers)
                .bind(writes.expires)
                .bind(writes.due)
                .bind(writes.finished)
                .bind(writes.cancel)
                .bind(writes.reasons)
                .execute(&mut *tx)
                .await
                .map_err(map)?;
        }
        tx.commit().await.map_err(map)?;
        Ok(out)
    }

    /// One ack, as the previous release made it: the ack lane's [`ACK_MANY`] (a batch of
    /// one), then, when it did not apply, the unbatched [`ACK`] with its read of the run.
    pub(crate) async fn ack(&self, run: RunId, token: LeaseToken) -> Result<()> {
        self.ack_batch(&[(run, token)]).await
    }

    /// Several acks at once, as the previous release's ack lane wrote concurrent ones: one
    /// [`ACK_MANY`], then each ack it did not apply alone (72b3161's `ack_many` and `ack_tx`).
    pub(crate) async fn ack_batch(&self, acks: &[(RunId, LeaseToken)]) -> Result<()> {
        let now = self.clock.now();
        let succeeded = transition(RunState::Claimed, Action::Ack)?;
        let rows = sqlx::query(ACK_MANY)
            .persistent(false)
            .bind(
                acks.iter()
                    .map(|(r, _)| r.as_bytes().to_vec())
                    .collect::<Vec<_>>(),
            )
            .bind(
                acks.iter()
                    .map(|(_, t)| t.as_bytes().to_vec())
                    .collect::<Vec<_>>(),
            )
            .bind(vec![micros(now); acks.len()])
            .bind(succeeded.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(map)?;
        let mut applied = HashSet::new();
        for row in &rows {
            let run = run_id(&get::<Vec<u8>>(row, 0)?)?;
            let token: Vec<u8> = get(row, 1)?;
            applied.insert((run, token));
        }
        for (run, token) in acks {
            if !applied.remove(&(*run, token.as_bytes().to_vec())) {
                self.ack_unbatched(*run, *token, now).await?;
            }
        }
        Ok(())
    }

    /// 72b3161's unbatched ack: [`ACK`], and when it applied to no run, a read of the run
    /// that says why (a stale token, a run ended otherwise) or finds it acked already.
    async fn ack_unbatched(&self, run: RunId, token: LeaseToken, now: Timestamp) -> Result<()> {
        let succeeded = transition(RunState::Claimed, Action::Ack)?;
        for _ in 0..CAS_ROUNDS {
            let done = sqlx::query(ACK)
                .bind(run.as_bytes().as_slice())
                .bind(token.as_bytes().as_slice())
                .bind(succeeded.as_str())
                .bind(micros(now))
                .execute(&self.pool)
                .await
                .map_err(map)?
                .rows_affected();
            if done == 1 {
                return Ok(());
            }
            let before = self.run(run).await?.ok_or(Error::UnknownRun { run })?;
            check_token(run, before.token, token)?;
            let to = transition(before.state, Action::Ack)?;
            if before.state == to {
                // A repeated ack of the run this token acked.
                return Ok(());
            }
        }
        Err(Error::retryable(format!(
            "run {run} changed under {CAS_ROUNDS} attempts to update it; try again"
        )))
    }

    /// The run as the previous release reads it ([`READ_RUN`]); `None` when it is not there.
    pub(crate) async fn run(&self, run: RunId) -> Result<Option<OldRun>> {
        let row = sqlx::query(READ_RUN)
            .bind(run.as_bytes().as_slice())
            .fetch_optional(&self.pool)
            .await
            .map_err(map)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let token: Option<Vec<u8>> = get(&row, 13)?;
        Ok(Some(OldRun {
            queue: get(&row, 1)?,
            dedup_key: get(&row, 2)?,
            state: RunState::parse(&get::<String>(&row, 4)?)?,
            attempts: u32_of(get(&row, 5)?)?,
            due_at: get(&row, 11)?,
            finished_at: get(&row, 12)?,
            token: token
                .map(|t| LeaseToken::from_slice(&t))
                .transpose()
                .map_err(|_| Error::corrupt("a lease token that is not 16 bytes"))?,
            lease_expires_at: get(&row, 15)?,
        }))
    }

    /// The run counts per queue and state as the previous release's stats read them
    /// ([`STATS`]).
    pub(crate) async fn counts(&self) -> Result<BTreeMap<(String, String), i64>> {
        let rows = sqlx::query(STATS)
            .fetch_all(&self.pool)
            .await
            .map_err(map)?;
        let mut out = BTreeMap::new();
        for row in &rows {
            let queue: Option<String> = get(row, 0)?;
            let state: Option<String> = get(row, 1)?;
            let n: Option<i64> = get(row, 2)?;
            if let (Some(queue), Some(state), Some(n)) = (queue, state, n) {
                out.insert((queue, state), n);
            }
        }
        Ok(out)
    }
}

/// The rows a claim writes, one array per column of [`CLAIM_APPLY`] (72b3161's `claim.rs`).
#[derive(Default)]
struct ClaimWrites {
    ids: Vec<Vec<u8>>,
    states: Vec<String>,
    attempts: Vec<i32>,
    tokens: Vec<Option<Vec<u8>>>,
    consumers: Vec<Option<String>>,
    expires: Vec<Option<i64>>,
    due: Vec<Option<i64>>,
    finished: Vec<Option<i64>>,
    cancel: Vec<bool>,
    reasons: Vec<Option<String>>,
}

impl ClaimWrites {
    /// A run settled by the claim: canceled or parked, with `reason` (None: keep).
    fn settle(&mut self, id: RunId, to: RunState, attempts: i32, reason: Option<String>, now: i64) {
        self.ids.push(id.as_bytes().to_vec());
        self.states.push(to.as_str().to_owned());
        self.attempts.push(attempts);
        self.tokens.push(None);
        self.consumers.push(None);
        self.expires.push(None);
        self.due.push(None);
        self.finished.push(Some(now));
        self.cancel.push(false);
        self.reasons.push(reason);
    }

    #[allow(clippy::too_many_arguments)]
    fn claim(
        &mut self,
        id: RunId,
        attempt: i32,
        token: LeaseToken,
        consumer: &ConsumerId,
        expires_at: Timestamp,
        due_at: Timestamp,
        cancel_requested: bool,
    ) {
        self.ids.push(id.as_bytes().to_vec());
        self.states.push(RunState::Claimed.as_str().to_owned());
        self.attempts.push(attempt);
        self.tokens.push(Some(token.as_bytes().to_vec()));
        self.consumers.push(Some(consumer.as_str().to_owned()));
        self.expires.push(Some(micros(expires_at)));
        self.due.push(Some(micros(due_at)));
        self.finished.push(None);
        self.cancel.push(cancel_requested);
        self.reasons.push(None);
    }
}

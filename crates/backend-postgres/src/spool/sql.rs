//! Every statement the Postgres spool sends. Nothing here is built from input: values are bound
//! parameters, states are the names [`cairn_core::RunState::as_str`] gives (bound too, as the
//! transition functions decide them), and tables are unqualified (every pooled connection's
//! `search_path` is the store's schema) while functions are `pg_catalog.`-qualified (see
//! `crate::sql` for why).
//!
//! Two tables order the runs. `spool_run` is the run record and the authority on every run's
//! state; `spool_ready` (revision `0007_spool_ready`) holds one narrow row per live run (its
//! queue, priority, `due_at`, and whether it is claimed), and is how a claim finds runs. The
//! rule every statement here keeps (**I-ready**; checked by `ready_mismatches` in the testkit
//! after every conformance spool case): a run has a `spool_ready` row iff its `due_at` is not NULL,
//! with its queue, priority and `due_at`, and `claimed = (state = 'claimed')`. A statement that
//! changes a run's `due_at` or state writes its `spool_ready` row in the same statement
//! ([`ready_sync`] for the general case). The rule holds from the contract revision
//! `0008_spool_ready_contract` on, which rebuilds the table: before it, builds older than 0007
//! may be live and do not write it, and every build claims through `spool_run`'s own indexes
//! (`super::sql_record`; `super::layout` says which). A claim locks the `spool_run` rows (never
//! the `spool_ready` ones) and re-checks their state there, so builds old and new exclude each
//! other by the same row locks.
//!
//! The hot paths: [`super::sql_enqueue::ENQUEUE`] is one statement (upsert, supersede,
//! wake-up); a claim is one statement, [`CLAIM_QUEUED`], when no expired lease is due and
//! every run it takes carries its next attempt's jitter, and otherwise a transaction of [`CLAIM_PICK`] (locks the expired and
//! the next due runs in one statement) plus [`CLAIM_APPLY`] (writes every picked run in one
//! statement); single-run transitions are one compare-and-set [`WRITE_RUN`] after one read.
//!
//! Plans: every statement here is prepared once per connection and, after five executions, may
//! run on the server's generic plan, where the size of an array or `LIMIT` parameter is unknown.
//! A join from such a set of runs to `spool_run` can then become a sequential scan and a hash
//! join, reading the whole table for a claim of ten runs; so each such join
//! ([`CLAIM_QUEUED`], [`CLAIM_APPLY`], [`ACK_MANY`]) also states that the run is `= ANY` of the
//! set, which keeps it an index lookup whatever the estimate. Bitmap scans are off for the
//! same reason ([`crate::sql::SESSION_SETUP`]).

/// The columns [`super::row::RunRow`] reads, in its order.
macro_rules! run_columns {
    () => {
        "r.run_id, r.queue, r.dedup_key, r.supersede_group, r.state, r.attempts, \
         r.max_attempts, r.priority, r.payload_bytes, r.enqueued_at, r.updated_at, r.due_at, \
         r.finished_at, r.lease_token, r.lease_consumer, r.lease_expires_at, \
         r.cancel_requested, r.reason, r.closed"
    };
}
pub(super) use run_columns;

/// The `spool_ready` upkeep of a statement that changed runs (I-ready, see the module doc):
/// given a CTE `u` returning each changed run's new `run_no, queue, priority, due_at, state`,
/// deletes the rows of the runs that left the live set and writes (inserts or updates) those of
/// the live ones. The CTEs it adds are `ready_gone` and `ready_kept`.
macro_rules! ready_sync {
    () => {
        "ready_gone AS ( \
            DELETE FROM spool_ready q USING u WHERE q.run_no = u.run_no AND u.due_at IS NULL \
         ), ready_kept AS ( \
            INSERT INTO spool_ready (run_no, queue, priority, due_at, claimed) \
            SELECT u.run_no, u.queue, u.priority, u.due_at, u.state = 'claimed' FROM u \
            WHERE u.due_at IS NOT NULL \
            ON CONFLICT (run_no) DO UPDATE SET due_at = EXCLUDED.due_at, \
                claimed = EXCLUDED.claimed \
         )"
    };
}

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
pub(super) use claim_backoff_joins;

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
/// `(ok, i, run id, dedup key, payload, attempts)` in claim order. With a gate
/// (`super::sql_flow::CLAIM_QUEUED_FLOW`): `$f` adds CTEs after `late`, `$c` a condition of
/// `c` and `$go` a conjunct of `go.ok` (each empty, or ending in a blank and `AND `); `$t`
/// (empty, or `, col…` unqualified) adds columns of the claimed runs after `attempts`.
macro_rules! claim_queued {
    ($f:literal, $c:literal, $go:literal, $t:literal) => {
        concat!(
            "WITH p AS ( \
        SELECT $6::int8 AS expires_at, $7::numeric AS base_ns, $8::numeric AS cap_ns \
    ), late AS ( \
        SELECT 1 FROM spool_ready q \
        WHERE q.queue = $1 AND q.claimed AND q.due_at <= $2 LIMIT 1 \
    ), ",
            $f,
            "c AS ( \
        SELECT r.run_no, q.priority, q.due_at, r.attempts, r.claim_attempt, r.claim_jitter \
        FROM spool_ready q JOIN spool_run r ON r.run_no = q.run_no \
        WHERE q.queue = $1 AND q.due_at <= $2 AND NOT q.claimed \
            AND r.state = 'queued' AND r.due_at <= $2 ",
            $c,
            " \
        ORDER BY q.priority DESC, q.due_at, q.run_no \
        LIMIT $3 \
        FOR NO KEY UPDATE OF r SKIP LOCKED \
    ), go AS ( \
        SELECT ",
            $go,
            "NOT EXISTS (SELECT 1 FROM late) AND NOT EXISTS ( \
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
        RETURNING w.i, r.run_id, r.dedup_key, r.payload, r.attempts",
            $t,
            " \
    ), rq AS ( \
        UPDATE spool_ready q SET due_at = w.due_at, claimed = TRUE \
        FROM w WHERE q.run_no = w.run_no \
            AND q.run_no = ANY (ARRAY(SELECT w2.run_no FROM w w2)) \
    ) \
    SELECT go.ok, u.i, u.run_id, u.dedup_key, u.payload, u.attempts",
            $t,
            " FROM go LEFT JOIN u ON TRUE ORDER BY u.i"
        )
    };
}
pub(super) use claim_queued;
/// The one-statement claim: see [`claim_queued`].
pub(super) const CLAIM_QUEUED: &str = claim_queued!("", "", "", "");

/// A claim's one read, locking what it returns (`SKIP LOCKED`: concurrent claimers take
/// disjoint runs and never wait): kind `e` rows are every claimed run of queue `$1` whose lease
/// plus backoff ran out by `$2` (the claim settles those that must not run again); kind `c`
/// rows are the next `$3` due runs in claim order, leaving out expired runs that will be
/// settled (cancel requested, or no attempt left: the SQL form of
/// [`cairn_core::spool::expiry_action`], which the caller still applies to every row). `$t`
/// (empty, or `, col…` unqualified) adds columns of the runs after `run_no`.
macro_rules! claim_pick {
    ($t:literal) => {
        concat!(
            "\
WITH e AS ( \
    SELECT r.run_id, r.state, r.attempts, r.max_attempts, r.cancel_requested",
            $t,
            " \
    FROM spool_ready q JOIN spool_run r ON r.run_no = q.run_no \
    WHERE q.queue = $1 AND q.claimed AND q.due_at <= $2 \
        AND r.state = 'claimed' AND r.due_at <= $2 \
    FOR NO KEY UPDATE OF r SKIP LOCKED \
), c AS ( \
    SELECT r.run_id, r.state, r.attempts, r.max_attempts, r.cancel_requested, r.dedup_key, \
        r.payload, q.priority, q.due_at, q.run_no",
            $t,
            " \
    FROM spool_ready q JOIN spool_run r ON r.run_no = q.run_no \
    WHERE q.queue = $1 AND q.due_at <= $2 AND r.due_at <= $2 \
        AND NOT (r.state = 'claimed' AND (r.cancel_requested OR r.attempts >= r.max_attempts)) \
    ORDER BY q.priority DESC, q.due_at, q.run_no \
    LIMIT $3 \
    FOR NO KEY UPDATE OF r SKIP LOCKED \
) \
SELECT * FROM ( \
    SELECT 'e' AS kind, run_id, state, attempts, max_attempts, cancel_requested, \
        NULL::bytea AS dedup_key, NULL::bytea AS payload, 0 AS priority, 0::bigint AS due_at, \
        0::bigint AS run_no",
            $t,
            " \
    FROM e \
    UNION ALL \
    SELECT 'c', run_id, state, attempts, max_attempts, cancel_requested, dedup_key, payload, \
        priority, due_at, run_no",
            $t,
            " \
    FROM c \
) picked \
ORDER BY kind DESC, priority DESC, due_at, run_no"
        )
    };
}
pub(super) use claim_pick;
/// The pick: see [`claim_pick`].
pub(super) const CLAIM_PICK: &str = claim_pick!("");

/// Writes every run a claim picked, in one statement: `$1` now, then one array per column
/// (`$2` run ids, `$3` states, `$4` attempts, `$5` lease tokens (NULL: keep), `$6` consumers,
/// `$7` lease expiries, `$8` due times, `$9` finish times, `$10` cancel flags, `$11` reasons
/// (NULL: keep)).
pub(super) const CLAIM_APPLY: &str = concat!(
    "WITH u AS ( \
    UPDATE spool_run r SET \
        state = a.state, attempts = a.attempts, lease_token = COALESCE(a.token, r.lease_token), \
        lease_consumer = a.consumer, lease_expires_at = a.expires_at, due_at = a.due_at, \
        finished_at = a.finished_at, cancel_requested = a.cancel_requested, \
        reason = COALESCE(a.reason, r.reason), updated_at = $1 \
    FROM unnest($2::bytea[], $3::text[], $4::int[], $5::bytea[], $6::text[], $7::bigint[], \
        $8::bigint[], $9::bigint[], $10::bool[], $11::text[]) \
        AS a(run_id, state, attempts, token, consumer, expires_at, due_at, finished_at, \
            cancel_requested, reason) \
    WHERE r.run_id = a.run_id AND r.run_id = ANY ($2::bytea[]) \
    RETURNING r.run_no, r.queue, r.priority, r.due_at, r.state \
), ",
    ready_sync!(),
    " SELECT pg_catalog.count(*) FROM u"
);

/// One run's row (no payload, facts or events), for a read-decide-write transition.
pub(super) const READ_RUN: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM spool_run r WHERE r.run_id = $1"
);

/// One run's payload: `$1` run id.
pub(super) const RUN_PAYLOAD: &str = "SELECT payload FROM spool_run WHERE run_id = $1";

/// One run with its event count and facts (names and values, in name order).
pub(super) const RUN_INFO: &str = concat!(
    "SELECT ",
    run_columns!(),
    ", (SELECT pg_catalog.count(*) FROM spool_event e WHERE e.run_id = r.run_id) AS events, \
     ARRAY(SELECT f.name FROM spool_fact f WHERE f.run_id = r.run_id ORDER BY f.name) AS fact_names, \
     ARRAY(SELECT f.value FROM spool_fact f WHERE f.run_id = r.run_id ORDER BY f.name) AS fact_values \
     FROM spool_run r WHERE r.run_id = $1"
);

/// A page of runs in run id (byte) order: `$1` after (NULL: from the start), `$2` queue
/// (NULL: any), `$3` state (NULL: any), `$4` limit.
pub(super) const RUN_LIST: &str = concat!(
    "SELECT ",
    run_columns!(),
    ", (SELECT pg_catalog.count(*) FROM spool_event e WHERE e.run_id = r.run_id) AS events, \
     ARRAY(SELECT f.name FROM spool_fact f WHERE f.run_id = r.run_id ORDER BY f.name) AS fact_names, \
     ARRAY(SELECT f.value FROM spool_fact f WHERE f.run_id = r.run_id ORDER BY f.name) AS fact_values \
     FROM spool_run r \
     WHERE ($1::bytea IS NULL OR r.run_id > $1) AND ($2::text IS NULL OR r.queue = $2) \
        AND ($3::text IS NULL OR r.state = $3) \
     ORDER BY r.run_id LIMIT $4"
);

/// Ack in one statement: `$1` run, `$2` token, `$3` the succeeded state, `$4` now; the reason
/// an earlier attempt's nack left is cleared, and the run's `spool_ready` row deleted. Returns
/// the number of runs it acked (0: the caller reads the run to say why).
pub(super) const ACK: &str = "\
WITH u AS ( \
    UPDATE spool_run SET state = $3, reason = NULL, updated_at = $4, finished_at = $4, \
        due_at = NULL, lease_consumer = NULL, lease_expires_at = NULL, cancel_requested = FALSE \
    WHERE run_id = $1 AND lease_token = $2 AND state = 'claimed' \
    RETURNING run_no \
), gone AS ( \
    DELETE FROM spool_ready q WHERE q.run_no IN (SELECT u.run_no FROM u) \
) \
SELECT pg_catalog.count(*) FROM u";

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
/// The transaction [`ACK_MANY`] runs in, opened in one simple query of two statements: READ
/// COMMITTED and no nested-loop join for this transaction. Planned for the arrays, the join of
/// the acks with the runs still became a nested loop that scanned the acks' array once per run
/// (256 × 256 rows, 24 ms for a batch of 256, against 5 ms as a hash join) whenever the
/// estimate of the runs' side was small — which, without an index of claimed runs (revision
/// 0008 drops it), it always is.
pub(super) const BEGIN_ACK_MANY: &str =
    "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL enable_nestloop = off";

pub(super) const ACK_MANY: &str = "\
WITH u AS ( \
    UPDATE spool_run SET state = $4, reason = NULL, updated_at = a.acked_at, \
        finished_at = a.acked_at, due_at = NULL, \
        lease_consumer = NULL, lease_expires_at = NULL, cancel_requested = FALSE \
    FROM unnest($1::bytea[], $2::bytea[], $3::int8[]) AS a(run_id, token, acked_at) \
    WHERE spool_run.run_id = a.run_id AND spool_run.run_id = ANY ($1::bytea[]) \
        AND spool_run.lease_token = a.token \
        AND spool_run.state = 'claimed' \
    RETURNING spool_run.run_id, a.token, spool_run.run_no \
), gone AS ( \
    DELETE FROM spool_ready q WHERE q.run_no = ANY (ARRAY(SELECT u.run_no FROM u)) \
) \
SELECT u.run_id, u.token FROM u";

/// The compare-and-set write of one run's transition, decided from a read of the run: applies
/// only if the run still has the state `$2`, token `$3` and cancel flag `$4` that were read
/// (else no row, and the caller reads again). Writes `$5` state, `$6` now (updated at), `$7`
/// due at, `$8` finished at, `$9` consumer, `$10` lease expiry, `$11` cancel flag, `$12` reason,
/// `$15` and `$16` the claim jitter of the run's next attempt when it is left queued (see
/// [`CLAIM_QUEUED`]; NULL otherwise); wakes
/// channel `$14` when `$13`. Returns the run's cancel flag.
pub(super) const WRITE_RUN: &str = concat!(
    "WITH u AS ( \
    UPDATE spool_run SET state = $5, updated_at = $6, due_at = $7, finished_at = $8, \
        lease_consumer = $9, lease_expires_at = $10, cancel_requested = $11, reason = $12, \
        claim_attempt = $15, claim_jitter = $16 \
    WHERE run_id = $1 AND state = $2 AND lease_token IS NOT DISTINCT FROM $3 \
        AND cancel_requested = $4 \
    RETURNING cancel_requested, run_no, queue, priority, due_at, state \
), ",
    ready_sync!(),
    ", wake AS ( \
    SELECT pg_catalog.pg_notify($14, '') FROM u WHERE $13 \
) \
SELECT u.cancel_requested, (SELECT pg_catalog.count(*) FROM wake) FROM u"
);

/// Appends an event in one statement: `$1` run, `$2` event id, `$3` now, `$4` payload bytes,
/// `$5` payload. Returns whether the run exists, the seq of an event the run already holds
/// under that id, the new event's seq, and the run's state and `closed` flag as the
/// statement's snapshot saw them. The run row's lock serializes appends to one run and to
/// [`CLOSE_RUN`] and every transition: the counter bump applies only to a live run that is not
/// closed, re-checked on the newest row version after waiting for the lock, so an append either
/// commits before a close or finish, or writes nothing. Two appends of one new id race to the
/// `(run_id, event_id)` unique constraint, and the loser (a unique violation, nothing written)
/// reads the winner's seq on retry.
pub(super) const APPEND_EVENT: &str = "\
WITH old AS ( \
    SELECT seq FROM spool_event WHERE run_id = $1 AND event_id = $2 \
), bump AS ( \
    UPDATE spool_run SET last_event_seq = last_event_seq + 1 \
    WHERE run_id = $1 AND NOT EXISTS (SELECT 1 FROM old) \
        AND state IN ('queued', 'claimed') AND closed IS NOT TRUE \
    RETURNING last_event_seq \
), ins AS ( \
    INSERT INTO spool_event (run_id, seq, event_id, created_at, payload_bytes, payload) \
    SELECT $1, last_event_seq, $2, $3, $4, $5 FROM bump \
    RETURNING seq \
) \
SELECT EXISTS (SELECT 1 FROM spool_run WHERE run_id = $1), (SELECT seq FROM old), \
    (SELECT seq FROM ins), (SELECT state FROM spool_run WHERE run_id = $1), \
    (SELECT closed FROM spool_run WHERE run_id = $1)";

/// Closes a run's event stream (`$1` run): returns whether the run exists and whether this
/// statement closed it (false: it was closed already). Takes the run row's lock, so it is
/// ordered with every [`APPEND_EVENT`] of the run.
pub(super) const CLOSE_RUN: &str = "\
WITH u AS ( \
    UPDATE spool_run SET closed = TRUE WHERE run_id = $1 AND closed IS NOT TRUE RETURNING 1 \
) \
SELECT EXISTS (SELECT 1 FROM spool_run WHERE run_id = $1), EXISTS (SELECT 1 FROM u)";

/// The compare-and-set write of a release (`Spool::release`): applies only if the run is still
/// claimed under token `$2` with `$3` attempts and no cancel request. Writes `$4` (the queued
/// state), attempts `$3 - 1`, `$5` now (updated at), `$6` due at, no lease, and `$7`/`$8` the
/// claim jitter of the next attempt (see [`CLAIM_QUEUED`]). Returns a row when it applied.
pub(super) const RELEASE: &str = concat!(
    "WITH u AS ( \
    UPDATE spool_run SET state = $4, attempts = $3 - 1, updated_at = $5, due_at = $6, \
        lease_consumer = NULL, lease_expires_at = NULL, claim_attempt = $7, claim_jitter = $8 \
    WHERE run_id = $1 AND state = 'claimed' AND lease_token = $2 AND attempts = $3 \
        AND cancel_requested = FALSE \
    RETURNING run_no, queue, priority, due_at, state \
), ",
    ready_sync!(),
    " SELECT 1 FROM u"
);

/// What an operator's retry or discard of a parked run decides from (`$1` run), with the run
/// row locked until the transaction ends, so no other transition interleaves.
pub(super) const UNPARK_ROW: &str = "\
SELECT queue, dedup_key, state, attempts, reason, last_event_seq FROM spool_run \
WHERE run_id = $1 FOR UPDATE";

/// An operator's retry of a parked run (`$1`): `$2` the queued state, a fresh attempt budget,
/// due at `$3` (now), no lease, no finish time, the event counter moved to `$4`, and `$5`/`$6`
/// the claim jitter of attempt 1 (see [`CLAIM_QUEUED`]); the reason stays.
pub(super) const REQUEUE_PARKED: &str = concat!(
    "WITH u AS ( \
    UPDATE spool_run SET state = $2, attempts = 0, updated_at = $3, due_at = $3, \
        finished_at = NULL, lease_consumer = NULL, lease_expires_at = NULL, \
        cancel_requested = FALSE, last_event_seq = $4, claim_attempt = $5, claim_jitter = $6 \
    WHERE run_id = $1 \
    RETURNING run_no, queue, priority, due_at, state \
), ",
    ready_sync!(),
    " SELECT pg_catalog.count(*) FROM u"
);

/// An operator's discard of a parked run (`$1`): `$2` the canceled state, finished at `$3`
/// (now), the event counter moved to `$4`; the reason stays.
pub(super) const DISCARD_PARKED: &str = concat!(
    "WITH u AS ( \
    UPDATE spool_run SET state = $2, updated_at = $3, due_at = NULL, finished_at = $3, \
        lease_consumer = NULL, lease_expires_at = NULL, cancel_requested = FALSE, \
        last_event_seq = $4, claim_attempt = NULL, claim_jitter = NULL \
    WHERE run_id = $1 \
    RETURNING run_no, queue, priority, due_at, state \
), ",
    ready_sync!(),
    " SELECT pg_catalog.count(*) FROM u"
);

/// The event recording an operator's action: `$1` run, `$2` seq, `$3` event id, `$4` now,
/// `$5` payload bytes, `$6` payload.
pub(super) const INSERT_OPERATOR_EVENT: &str = "\
INSERT INTO spool_event (run_id, seq, event_id, created_at, payload_bytes, payload) \
VALUES ($1, $2, $3, $4, $5, $6)";

/// Wakes channel `$1` when the transaction commits.
pub(super) const NOTIFY: &str = "SELECT pg_catalog.pg_notify($1, '')";

/// A run's events after seq `$2`, at most `$3`, and after the first only while their payloads
/// total at most `$4` bytes (sized by `octet_length`, which reads no TOASTed payload; only the
/// payloads returned are fetched); one row with NULL columns when the run exists but has none,
/// no row when it does not exist.
pub(super) const EVENTS: &str = "\
SELECT e.seq, e.event_id, e.payload, e.created_at \
FROM spool_run r LEFT JOIN LATERAL ( \
    SELECT v.seq, v.event_id, v.payload, v.created_at FROM ( \
        SELECT seq, pg_catalog.sum(pg_catalog.octet_length(payload)) OVER (ORDER BY seq) AS upto, \
            pg_catalog.row_number() OVER (ORDER BY seq) AS rn \
        FROM (SELECT seq, payload FROM spool_event \
            WHERE run_id = r.run_id AND seq > $2 ORDER BY seq LIMIT $3) l \
    ) w JOIN spool_event v ON v.run_id = r.run_id AND v.seq = w.seq \
    WHERE w.upto <= $4 OR w.rn = 1 \
) e ON TRUE \
WHERE r.run_id = $1 \
ORDER BY e.seq";

/// Removes the run's (`$1`) events with ids in `$2`; returns whether the run exists and how
/// many were removed.
pub(super) const ACK_EVENTS: &str = "\
WITH d AS ( \
    DELETE FROM spool_event WHERE run_id = $1 AND event_id = ANY($2) RETURNING 1 \
) \
SELECT EXISTS (SELECT 1 FROM spool_run WHERE run_id = $1), (SELECT pg_catalog.count(*) FROM d)";

/// Sets a fact unless it is set: `$1` run, `$2` name, `$3` now, `$4` value. Returns whether the
/// run exists and whether this statement stored the fact.
pub(super) const SET_FACT: &str = "\
WITH ins AS ( \
    INSERT INTO spool_fact (run_id, name, created_at, value) \
    SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM spool_run WHERE run_id = $1) \
    ON CONFLICT (run_id, name) DO NOTHING \
    RETURNING 1 \
) \
SELECT EXISTS (SELECT 1 FROM spool_run WHERE run_id = $1), EXISTS (SELECT 1 FROM ins)";

/// The stored value of fact `$2` of run `$1`.
pub(super) const FACT_VALUE: &str = "SELECT value FROM spool_fact WHERE run_id = $1 AND name = $2";

/// A run's facts; one row with NULL columns when it exists but has none, no row when it does
/// not exist.
pub(super) const FACTS: &str = "\
SELECT f.name, f.value FROM spool_run r LEFT JOIN spool_fact f ON f.run_id = r.run_id \
WHERE r.run_id = $1";

/// Counts, in one statement (one snapshot): one row per queue and state with runs (queue and
/// state NULL when there are none), each carrying its run count, the enqueue time of the
/// queue's oldest queued run (on its `queued` row, NULL on the others), and the spool-wide
/// event count, their payload bytes and the oldest event's time. The spool-wide run counts
/// are the rows' sums.
pub(super) const STATS: &str = "\
SELECT s.queue, s.state, s.n, s.oldest, ev.n, ev.bytes, ev.oldest, s.scheduled \
FROM (SELECT pg_catalog.count(*) AS n, coalesce(pg_catalog.sum(payload_bytes), 0)::bigint AS bytes, \
        pg_catalog.min(created_at) AS oldest FROM spool_event) ev \
LEFT JOIN (SELECT queue, state, pg_catalog.count(*) AS n, \
        pg_catalog.min(enqueued_at) FILTER (WHERE state = 'queued') AS oldest, \
        pg_catalog.count(*) FILTER (WHERE state = 'queued' AND due_at > $1) AS scheduled \
        FROM spool_run GROUP BY queue, state) s ON TRUE";

/// Retention's event window: the total event payload bytes on every row, plus the oldest `$1`
/// events in age order (run, seq, created at, bytes; NULL when there are none).
pub(super) const RETENTION_EVENT_WINDOW: &str = "\
SELECT (SELECT coalesce(pg_catalog.sum(payload_bytes), 0)::bigint FROM spool_event) AS total, \
    e.run_id, e.seq, e.created_at, e.payload_bytes \
FROM (VALUES (1)) AS one(x) LEFT JOIN LATERAL ( \
    SELECT run_id, seq, created_at, payload_bytes, event_no FROM spool_event \
    ORDER BY created_at, event_no LIMIT $1 \
) e ON TRUE \
ORDER BY e.created_at, e.event_no";

/// Deletes the events `(run_id, seq)` = `($1[i], $2[i])`.
pub(super) const RETENTION_DELETE_EVENTS: &str = "\
DELETE FROM spool_event e USING unnest($1::bytea[], $2::bigint[]) AS u(run_id, seq) \
WHERE e.run_id = u.run_id AND e.seq = u.seq";

/// Retention's run window: terminal runs without events finished before `$1`, at most `$2`, in
/// enqueue order. It walks the primary key, not an index of `finished_at`: such an index would
/// take a new entry at every run's end and make the ack a non-HOT update (revision
/// `0008_spool_ready_contract` drops it). A pass deletes every run it finds until a batch comes
/// back short, so the order decides only which runs a pass cut short by its budget leaves.
pub(super) const RETENTION_RUN_WINDOW: &str = "\
SELECT r.run_id, r.finished_at FROM spool_run r \
WHERE r.finished_at IS NOT NULL AND r.finished_at < $1 \
    AND NOT EXISTS (SELECT 1 FROM spool_event e WHERE e.run_id = r.run_id) \
ORDER BY r.run_no LIMIT $2";

/// Deletes the runs `$1` (their facts go with them) unless an event arrived meanwhile.
pub(super) const RETENTION_DELETE_RUNS: &str = "\
DELETE FROM spool_run r WHERE r.run_id = ANY($1) AND r.finished_at IS NOT NULL \
    AND NOT EXISTS (SELECT 1 FROM spool_event e WHERE e.run_id = r.run_id)";

/// The earliest `due_at` of queue `$1`'s live runs (NULL when it has none): one range of
/// `spool_ready`'s claim index.
pub(super) const NEXT_DUE: &str = "SELECT pg_catalog.min(due_at) FROM spool_ready WHERE queue = $1";

/// Serializes imports of one source (`$1`, a key derived from schema and fingerprint), so two
/// concurrent imports of it create its runs once.
pub(super) const LOCK_IMPORT: &str = "SELECT pg_catalog.pg_advisory_xact_lock($1)";

/// The completion marker of source `$1` (its fingerprint).
pub(super) const IMPORT_MARKER: &str =
    "SELECT imported_at, runs_created, runs_existing FROM spool_import WHERE fingerprint = $1";

/// Records source `$1`'s completion: `$2` description, `$3` imported at, `$4` runs created,
/// `$5` runs found present.
pub(super) const INSERT_IMPORT_MARKER: &str = "\
INSERT INTO spool_import (fingerprint, description, imported_at, runs_created, runs_existing) \
VALUES ($1, $2, $3, $4, $5)";

/// Creates imported runs in the order given (which becomes their enqueue order), skipping any
/// whose `(queue, dedup_key)` is present; returns the ids created. `$1` now (updated at), then
/// one array per column.
pub(super) const IMPORT_RUNS: &str = "\
WITH ins AS ( \
    INSERT INTO spool_run (run_id, queue, dedup_key, supersede_group, state, attempts, \
        max_attempts, priority, enqueued_at, updated_at, due_at, finished_at, reason, \
        last_event_seq, payload_bytes, payload) \
    SELECT u.run_id, u.queue, u.dedup_key, u.supersede_group, u.state, u.attempts, \
        u.max_attempts, u.priority, u.enqueued_at, $1, u.due_at, u.finished_at, u.reason, \
        u.last_event_seq, u.payload_bytes, u.payload \
    FROM unnest($2::bytea[], $3::text[], $4::bytea[], $5::bytea[], $6::text[], $7::int[], \
        $8::int[], $9::int[], $10::bigint[], $11::bigint[], $12::bigint[], $13::text[], \
        $14::bigint[], $15::bigint[], $16::bytea[]) WITH ORDINALITY \
        AS u(run_id, queue, dedup_key, supersede_group, state, attempts, max_attempts, \
            priority, enqueued_at, due_at, finished_at, reason, last_event_seq, payload_bytes, \
            payload, ord) \
    ORDER BY u.ord \
    ON CONFLICT (queue, dedup_key) DO NOTHING \
    RETURNING run_id, run_no, queue, priority, due_at, state \
), rdy AS ( \
    INSERT INTO spool_ready (run_no, queue, priority, due_at, claimed) \
    SELECT ins.run_no, ins.queue, ins.priority, ins.due_at, ins.state = 'claimed' FROM ins \
    WHERE ins.due_at IS NOT NULL \
) \
SELECT ins.run_id FROM ins";

/// The stored run ids of the keys `($1[i], $2[i])`, with the keys.
pub(super) const RUN_IDS_BY_KEY: &str = "\
SELECT r.queue, r.dedup_key, r.run_id FROM spool_run r \
JOIN unnest($1::text[], $2::bytea[]) AS k(queue, dedup_key) \
    ON r.queue = k.queue AND r.dedup_key = k.dedup_key";

/// Creates imported events in the order given: `$1` runs, `$2` seqs, `$3` event ids, `$4`
/// created at, `$5` payload bytes, `$6` payloads.
pub(super) const IMPORT_EVENTS: &str = "\
INSERT INTO spool_event (run_id, seq, event_id, created_at, payload_bytes, payload) \
SELECT u.run_id, u.seq, u.event_id, u.created_at, u.payload_bytes, u.payload \
FROM unnest($1::bytea[], $2::bigint[], $3::bytea[], $4::bigint[], $5::bigint[], $6::bytea[]) \
    WITH ORDINALITY AS u(run_id, seq, event_id, created_at, payload_bytes, payload, ord) \
ORDER BY u.ord";

/// Creates imported facts: `$1` now, `$2` runs, `$3` names, `$4` values.
pub(super) const IMPORT_FACTS: &str = "\
INSERT INTO spool_fact (run_id, name, created_at, value) \
SELECT u.run_id, u.name, $1, u.value \
FROM unnest($2::bytea[], $3::text[], $4::bytea[]) AS u(run_id, name, value)";

/// Wakes the channels `$1`.
pub(super) const WAKE_CHANNELS: &str =
    "SELECT pg_catalog.pg_notify(c.ch, '') FROM pg_catalog.unnest($1::text[]) AS c(ch)";

//! The enqueue statements (the conventions are `super::sql`'s). Each comes in two forms: the
//! plain one, which every store has the columns of, and the `_FLOW` one, which also writes the
//! run's partition key and trace context (`spool_run.partition_key`, `spool_run.traceparent`,
//! revision `0009_spool_flow`). An enqueue sends the `_FLOW` form only when it carries one of
//! the two, and only after the spool saw the revision applied (`super::flow::require`), so a
//! store whose upgrade stopped before 0009 is never sent a statement naming its columns, and
//! an enqueue without either sends exactly the plain statement. A leaf: it uses no sibling.

/// [`ENQUEUE`] with `$cols` (`, col…`) inserted after `closed` and `$vals` (`, $n…`) after
/// its value.
macro_rules! enqueue {
    ($cols:literal, $vals:literal) => {
        concat!(
            "\
WITH ins AS ( \
    INSERT INTO spool_run (run_id, queue, dedup_key, supersede_group, state, max_attempts, \
        priority, enqueued_at, updated_at, due_at, payload_bytes, payload, claim_attempt, \
        claim_jitter, closed",
            $cols,
            ") \
    VALUES ($1, $2, $3, $4, 'queued', $5, $6, $7, $7, $8, $9, $10, 1, $13, FALSE",
            $vals,
            ") \
    ON CONFLICT (queue, dedup_key) DO NOTHING \
    RETURNING run_id, run_no \
), rdy AS ( \
    INSERT INTO spool_ready (run_no, queue, priority, due_at, claimed) \
    SELECT ins.run_no, $2, $6, $8, FALSE FROM ins \
), sup AS ( \
    UPDATE spool_run s SET state = $11, updated_at = $7, due_at = NULL, finished_at = $7, \
        lease_consumer = NULL, lease_expires_at = NULL, cancel_requested = FALSE \
    WHERE $4::bytea IS NOT NULL AND s.queue = $2 AND s.supersede_group = $4 \
        AND s.state = 'queued' AND s.run_id <> $1 \
        AND EXISTS (SELECT 1 FROM ins WHERE ins.run_id = $1) \
    RETURNING s.run_no \
), unready AS ( \
    DELETE FROM spool_ready q WHERE q.run_no IN (SELECT sup.run_no FROM sup) \
), wake AS ( \
    SELECT pg_catalog.pg_notify($12, '') FROM ins WHERE ins.run_id = $1 \
) \
SELECT ins.run_id, (SELECT pg_catalog.count(*) FROM wake) FROM ins \
UNION ALL \
SELECT r.run_id, 0 FROM spool_run r \
WHERE r.queue = $2 AND r.dedup_key = $3 AND NOT EXISTS (SELECT 1 FROM ins)"
        )
    };
}

/// Enqueue in one statement: `$1` new run id, `$2` queue, `$3` dedup key, `$4` supersede
/// group (NULL: none), `$5` max attempts, `$6` priority, `$7` now, `$8` due at, `$9` payload
/// bytes, `$10` payload, `$11` the superseded state, `$12` the queue's wake channel, `$13` the
/// claim jitter of attempt 1 (see `super::sql::CLAIM_QUEUED`).
///
/// Returns one row `(run id, notified)`: the new run's id when it was created, else the id of
/// the run that holds the key. A duplicate writes nothing (`DO NOTHING` takes no row lock and,
/// having written nothing, its commit waits for no WAL flush), and its answer is read in the
/// same statement. That read sees the statement's snapshot, so when the run holding the key
/// committed after the snapshot was taken (a concurrent enqueue of the same key), the
/// statement returns no row and the caller runs it again, on a new snapshot that sees the
/// run. The supersede and the `NOTIFY` happen only when the run was created; data-modifying
/// CTEs share one snapshot, so the new run never supersedes itself.
pub(super) const ENQUEUE: &str = enqueue!("", "");

/// [`ENQUEUE`] that also writes `$14` the partition key and `$15` the trace context (either
/// NULL). A duplicate writes nothing, so the stored run keeps its own.
pub(super) const ENQUEUE_FLOW: &str = enqueue!(", partition_key, traceparent", ", $14, $15");

/// [`ENQUEUE_MANY`] with `$arrays` (`, pg_catalog.unnest($n…)…`) after the input arrays and
/// `$cols` (`, col…`, the same names in the input, the run and the insert's select list)
/// after `jitter`.
macro_rules! enqueue_many {
    ($arrays:literal, $cols:literal) => {
        concat!(
            "\
WITH input AS ( \
    SELECT * FROM ROWS FROM (pg_catalog.unnest($1::bytea[]), pg_catalog.unnest($2::text[]), \
        pg_catalog.unnest($3::bytea[]), pg_catalog.unnest($4::int4[]), \
        pg_catalog.unnest($5::int4[]), pg_catalog.unnest($6::int8[]), \
        pg_catalog.unnest($7::int8[]), pg_catalog.unnest($8::int8[]), \
        pg_catalog.unnest($9::bytea[]), pg_catalog.unnest($10::text[]), \
        pg_catalog.unnest($11::int8[])",
            $arrays,
            ") \
        WITH ORDINALITY AS t(run_id, queue, dedup_key, max_attempts, priority, now, due_at, \
            payload_bytes, payload, channel, jitter",
            $cols,
            ", ord) \
), ins AS ( \
    INSERT INTO spool_run (run_id, queue, dedup_key, supersede_group, state, max_attempts, \
        priority, enqueued_at, updated_at, due_at, payload_bytes, payload, claim_attempt, \
        claim_jitter, closed",
            $cols,
            ") \
    SELECT run_id, queue, dedup_key, NULL, 'queued', max_attempts, priority, now, now, due_at, \
        payload_bytes, payload, 1, jitter, FALSE",
            $cols,
            " FROM input ORDER BY ord \
    ON CONFLICT (queue, dedup_key) DO NOTHING \
    RETURNING run_id, queue, dedup_key, run_no, priority, due_at \
), rdy AS ( \
    INSERT INTO spool_ready (run_no, queue, priority, due_at, claimed) \
    SELECT ins.run_no, ins.queue, ins.priority, ins.due_at, FALSE FROM ins \
), wake AS ( \
    SELECT pg_catalog.pg_notify(c.channel, '') FROM ( \
        SELECT DISTINCT i.channel FROM input i JOIN ins ON ins.run_id = i.run_id) c \
) \
SELECT ins.run_id, ins.queue, ins.dedup_key, (SELECT pg_catalog.count(*) FROM wake) FROM ins"
        )
    };
}

/// Several enqueues (none with a supersede group) in one statement, over arrays of equal
/// length: `$1` run ids, `$2` queues, `$3` dedup keys, `$4` max attempts, `$5` priorities, `$6`
/// now (enqueued and updated at), `$7` due at, `$8` payload bytes, `$9` payloads, `$10` the
/// queues' wake channels, `$11` the claim jitters of attempt 1 (see
/// `super::sql::CLAIM_QUEUED`). Returns `(run_id, queue, dedup_key)` of each run it created; a
/// key already taken (by a committed run, or by an earlier row of the same batch) returns
/// nothing for that row. Wakes each queue that got a run, once.
pub(super) const ENQUEUE_MANY: &str = enqueue_many!("", "");

/// [`ENQUEUE_MANY`] that also writes `$12` the partition keys and `$13` the trace contexts
/// (text arrays, NULL elements for none).
pub(super) const ENQUEUE_MANY_FLOW: &str = enqueue_many!(
    ", pg_catalog.unnest($12::text[]), pg_catalog.unnest($13::text[])",
    ", partition_key, traceparent"
);

/// [`ENQUEUE_MANY_NUMBERED`] with `$arrays` and `$cols` as in `enqueue_many!`.
macro_rules! enqueue_many_numbered {
    ($arrays:literal, $cols:literal) => {
        concat!(
            "\
WITH input AS ( \
    SELECT * FROM ROWS FROM (pg_catalog.unnest($1::bytea[]), pg_catalog.unnest($2::text[]), \
        pg_catalog.unnest($3::bytea[]), pg_catalog.unnest($4::int4[]), \
        pg_catalog.unnest($5::int4[]), pg_catalog.unnest($6::int8[]), \
        pg_catalog.unnest($7::int8[]), pg_catalog.unnest($8::int8[]), \
        pg_catalog.unnest($9::bytea[]), pg_catalog.unnest($10::text[]), \
        pg_catalog.unnest($11::int8[]), pg_catalog.unnest($12::int8[])",
            $arrays,
            ") \
        WITH ORDINALITY AS t(run_id, queue, dedup_key, max_attempts, priority, now, due_at, \
            payload_bytes, payload, channel, jitter, run_no",
            $cols,
            ", ord) \
), ins AS ( \
    INSERT INTO spool_run (run_no, run_id, queue, dedup_key, supersede_group, state, \
        max_attempts, priority, enqueued_at, updated_at, due_at, payload_bytes, payload, \
        claim_attempt, claim_jitter, closed",
            $cols,
            ") \
    OVERRIDING SYSTEM VALUE \
    SELECT run_no, run_id, queue, dedup_key, NULL, 'queued', max_attempts, priority, now, now, \
        due_at, payload_bytes, payload, 1, jitter, FALSE",
            $cols,
            " FROM input ORDER BY ord \
    ON CONFLICT (queue, dedup_key) DO NOTHING \
    RETURNING run_id, queue, dedup_key, run_no, priority, due_at \
), rdy AS ( \
    INSERT INTO spool_ready (run_no, queue, priority, due_at, claimed) \
    SELECT ins.run_no, ins.queue, ins.priority, ins.due_at, FALSE FROM ins \
), wake AS ( \
    SELECT pg_catalog.pg_notify(c.channel, '') FROM ( \
        SELECT DISTINCT i.channel FROM input i JOIN ins ON ins.run_id = i.run_id) c \
) \
SELECT ins.run_id, ins.queue, ins.dedup_key, (SELECT pg_catalog.count(*) FROM wake) FROM ins"
        )
    };
}

/// [`ENQUEUE_MANY`] with each row's `run_no` given (`$12`, taken from the column's identity
/// sequence by [`RUN_NOS`] in the batch's input order): a bulk enqueue inserts its rows in
/// dedup-key order, so that two batches of overlapping keys take their key locks in one
/// order and cannot deadlock, while the claim order's last tie-break (`run_no`) stays the
/// input order.
pub(super) const ENQUEUE_MANY_NUMBERED: &str = enqueue_many_numbered!("", "");

/// [`ENQUEUE_MANY_NUMBERED`] that also writes `$13` the partition keys and `$14` the trace
/// contexts (as [`ENQUEUE_MANY_FLOW`]).
pub(super) const ENQUEUE_MANY_NUMBERED_FLOW: &str = enqueue_many_numbered!(
    ", pg_catalog.unnest($13::text[]), pg_catalog.unnest($14::text[])",
    ", partition_key, traceparent"
);

/// `$1` new values of `spool_run.run_no`'s identity sequence, in increasing order.
pub(super) const RUN_NOS: &str = "\
SELECT pg_catalog.nextval(pg_catalog.pg_get_serial_sequence('spool_run', 'run_no')) \
FROM pg_catalog.generate_series(1, $1) ORDER BY 1";

/// The runs of queue `$1` holding the dedup keys `$2`: `(run_id, dedup_key)` (a bulk
/// enqueue's keys that were stored already).
pub(super) const RUN_IDS_BY_KEYS: &str = "\
SELECT r.run_id, r.dedup_key FROM spool_run r \
WHERE r.queue = $1 AND r.dedup_key = ANY($2::bytea[])";

/// Serializes the enqueues of one supersede group (`$1`, a key derived from schema, queue and
/// group), so each sees the runs the previous one created.
pub(super) const LOCK_GROUP: &str = "SELECT pg_catalog.pg_advisory_xact_lock($1)";

#[cfg(test)]
mod tests {
    use super::*;

    /// Each `_FLOW` form is its plain statement plus the two columns, nothing else: with the
    /// added text taken out, they are the same statement.
    #[test]
    fn flow_forms_only_add_the_two_columns() {
        let cols = ", partition_key, traceparent";
        assert_eq!(
            ENQUEUE_FLOW.replace(cols, "").replace(", $14, $15", ""),
            ENQUEUE
        );
        let arrays = |a: u8, b: u8| {
            format!(", pg_catalog.unnest(${a}::text[]), pg_catalog.unnest(${b}::text[])")
        };
        assert_eq!(
            ENQUEUE_MANY_FLOW
                .replace(&arrays(12, 13), "")
                .replace(cols, ""),
            ENQUEUE_MANY
        );
        assert_eq!(
            ENQUEUE_MANY_NUMBERED_FLOW
                .replace(&arrays(13, 14), "")
                .replace(cols, ""),
            ENQUEUE_MANY_NUMBERED
        );
        for s in [ENQUEUE, ENQUEUE_MANY, ENQUEUE_MANY_NUMBERED] {
            assert!(!s.contains("traceparent") && !s.contains("partition_key"));
        }
    }
}

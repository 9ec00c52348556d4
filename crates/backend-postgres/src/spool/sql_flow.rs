//! The flow-control statements (revision `0009_spool_flow`: `spool_queue`, `spool_claim_tick`,
//! `spool_run.partition_key`, `spool_run.traceparent`), used only once the spool read that the
//! revision is applied ([`FLOW_LAYOUT`]; `super::flow`). The conventions are `super::sql`'s.
//! The claims here also return each claimed run's trace context (`traceparent`, the last
//! column of the runs), which the statements of a store before the revision cannot name.

use super::sql::{claim_backoff_joins, claim_pick, claim_queued, run_columns};

/// Whether the store holds revision `0009_spool_flow`.
pub(super) const FLOW_LAYOUT: &str = "\
SELECT EXISTS (SELECT 1 FROM cairn_migration_lineage \
    WHERE set_name = 'cairn' AND revision = '0009_spool_flow')";

/// [`super::sql::CLAIM_QUEUED`] that declines (`ok` false, nothing locked or written) when
/// queue `$1` is paused or has a limit: one primary-key read of `spool_queue`, evaluated once
/// per statement; such a claim is then the flow transaction (`super::flow`). Each claimed
/// run's row ends with its `traceparent`.
pub(super) const CLAIM_QUEUED_FLOW: &str = claim_queued!(
    "f AS ( \
        SELECT 1 FROM spool_queue fq WHERE fq.queue = $1 AND (fq.paused \
            OR fq.max_claimed IS NOT NULL OR fq.per_partition IS NOT NULL \
            OR fq.rate_claims IS NOT NULL) \
    ), ",
    "AND NOT EXISTS (SELECT 1 FROM f)",
    "NOT EXISTS (SELECT 1 FROM f) AND ",
    ", traceparent"
);

/// [`super::sql::CLAIM_PICK`] whose rows end with the run's `traceparent` (column 11).
pub(super) const CLAIM_PICK_FLOW: &str = claim_pick!(", traceparent");

/// Queue `$1`'s stored flow: `(paused, max_claimed, per_partition, rate_claims, rate_per_us,
/// updated_at)`.
pub(super) const QUEUE_FLOW: &str = "\
SELECT paused, max_claimed, per_partition, rate_claims, rate_per_us, updated_at \
FROM spool_queue WHERE queue = $1";

/// Every stored flow, by queue name in byte order: the queue, then [`QUEUE_FLOW`]'s columns.
pub(super) const QUEUE_FLOWS: &str = "\
SELECT queue, paused, max_claimed, per_partition, rate_claims, rate_per_us, updated_at \
FROM spool_queue ORDER BY queue COLLATE \"C\"";

/// Stores queue `$1`'s pause state `$2` at `$3` (limits untouched) and, when resuming,
/// notifies its wake channel `$4`; returns [`QUEUE_FLOW`]'s columns.
pub(super) const SET_PAUSED: &str = "\
WITH up AS ( \
    INSERT INTO spool_queue (queue, paused, updated_at) VALUES ($1, $2, $3) \
    ON CONFLICT (queue) DO UPDATE SET paused = EXCLUDED.paused, \
        updated_at = EXCLUDED.updated_at \
    RETURNING paused, max_claimed, per_partition, rate_claims, rate_per_us, updated_at \
), wake AS ( \
    SELECT pg_catalog.pg_notify($4, '') WHERE NOT $2 \
) \
SELECT up.*, (SELECT pg_catalog.count(*) FROM wake) FROM up";

/// Stores queue `$1`'s limits `$2`..`$5` (NULL: none) at `$6` (pause untouched) and notifies
/// its wake channel `$7`; returns [`QUEUE_FLOW`]'s columns.
pub(super) const SET_LIMITS: &str = "\
WITH up AS ( \
    INSERT INTO spool_queue (queue, paused, max_claimed, per_partition, rate_claims, \
        rate_per_us, updated_at) \
    VALUES ($1, FALSE, $2, $3, $4, $5, $6) \
    ON CONFLICT (queue) DO UPDATE SET max_claimed = EXCLUDED.max_claimed, \
        per_partition = EXCLUDED.per_partition, rate_claims = EXCLUDED.rate_claims, \
        rate_per_us = EXCLUDED.rate_per_us, updated_at = EXCLUDED.updated_at \
    RETURNING paused, max_claimed, per_partition, rate_claims, rate_per_us, updated_at \
), wake AS ( \
    SELECT pg_catalog.pg_notify($7, '') \
) \
SELECT up.*, (SELECT pg_catalog.count(*) FROM wake) FROM up";

/// Serializes the limited claims of one queue and the changes of its flow (`$1`:
/// `super::keys::flow_lock_key`).
pub(super) const LOCK_FLOW: &str = "SELECT pg_catalog.pg_advisory_xact_lock($1)";

/// Runs of queue `$1` claimed at once at `$2` (`claimed`, `due_at` ahead; through
/// `spool_ready_expiry`), counted per partition key (NULL: none).
pub(super) const HELD_BY_PARTITION: &str = "\
SELECT r.partition_key, pg_catalog.count(*) \
FROM spool_ready q JOIN spool_run r ON r.run_no = q.run_no \
WHERE q.queue = $1 AND q.claimed AND q.due_at > $2 AND r.state = 'claimed' \
GROUP BY r.partition_key";

/// Drops queue `$1`'s claim times at or before `$2` (out of the rate window).
pub(super) const DROP_OLD_TICKS: &str =
    "DELETE FROM spool_claim_tick WHERE queue = $1 AND at <= $2";

/// Runs handed out by queue `$1`'s claims after `$2` (in the rate window).
pub(super) const WINDOW_RUNS: &str = "\
SELECT COALESCE(pg_catalog.sum(runs), 0)::int8 FROM spool_claim_tick \
WHERE queue = $1 AND at > $2";

/// Records a claim of queue `$1` at `$2` that handed out `$3` runs — if the queue still has a
/// rate limit: the claim read its flow before its flow lock, and a change that removed the
/// limit meanwhile (under the same lock) dropped the queue's window, which this must not
/// bring back.
pub(super) const INSERT_TICK: &str = "\
INSERT INTO spool_claim_tick (queue, at, runs) \
SELECT $1::text, $2::int8, $3::int4 \
WHERE EXISTS (SELECT 1 FROM spool_queue fq WHERE fq.queue = $1 AND fq.rate_claims IS NOT NULL)";

/// Drops queue `$1`'s rate window (it has no rate limit any more).
pub(super) const DROP_TICKS: &str = "DELETE FROM spool_claim_tick WHERE queue = $1";

/// Drops queue `$1`'s flow row (its flow is back to the defaults: running, unlimited).
pub(super) const DELETE_FLOW: &str = "DELETE FROM spool_queue WHERE queue = $1";

/// One page of a limited claim's candidates: queue `$1`'s due runs at `$2` in claim order
/// after the position `($4, $5, $6)` = `(-priority, due_at, run_no)` of the previous page's
/// last row, leaving out runs of the partitions `$7` (full), at most `$3`, locked as
/// [`super::sql::CLAIM_PICK`] locks its `c` rows. The columns are [`CLAIM_PICK_FLOW`]'s (kind
/// `c`, the trace context last), then the partition key.
pub(super) const FLOW_CANDIDATES: &str = "\
SELECT 'c' AS kind, r.run_id, r.state, r.attempts, r.max_attempts, r.cancel_requested, \
    r.dedup_key, r.payload, q.priority, q.due_at, q.run_no, r.traceparent, r.partition_key \
FROM spool_ready q JOIN spool_run r ON r.run_no = q.run_no \
WHERE q.queue = $1 AND q.due_at <= $2 AND r.due_at <= $2 \
    AND NOT (r.state = 'claimed' AND (r.cancel_requested OR r.attempts >= r.max_attempts)) \
    AND (-(q.priority::int8), q.due_at, q.run_no) > ($4::int8, $5::int8, $6::int8) \
    AND (r.partition_key IS NULL OR NOT (r.partition_key = ANY ($7::text[]))) \
ORDER BY q.priority DESC, q.due_at, q.run_no \
LIMIT $3 \
FOR NO KEY UPDATE OF r SKIP LOCKED";

/// [`super::sql::RUN_INFO`] with the partition key and the trace context after the fact
/// values.
pub(super) const RUN_INFO_FLOW: &str = concat!(
    "SELECT ",
    run_columns!(),
    ", (SELECT pg_catalog.count(*) FROM spool_event e WHERE e.run_id = r.run_id) AS events, \
     ARRAY(SELECT f.name FROM spool_fact f WHERE f.run_id = r.run_id ORDER BY f.name) AS fact_names, \
     ARRAY(SELECT f.value FROM spool_fact f WHERE f.run_id = r.run_id ORDER BY f.name) AS fact_values, \
     r.partition_key, r.traceparent \
     FROM spool_run r WHERE r.run_id = $1"
);

/// [`super::sql::RUN_LIST`] with the partition key and the trace context after the fact
/// values.
pub(super) const RUN_LIST_FLOW: &str = concat!(
    "SELECT ",
    run_columns!(),
    ", (SELECT pg_catalog.count(*) FROM spool_event e WHERE e.run_id = r.run_id) AS events, \
     ARRAY(SELECT f.name FROM spool_fact f WHERE f.run_id = r.run_id ORDER BY f.name) AS fact_names, \
     ARRAY(SELECT f.value FROM spool_fact f WHERE f.run_id = r.run_id ORDER BY f.name) AS fact_values, \
     r.partition_key, r.traceparent \
     FROM spool_run r \
     WHERE ($1::bytea IS NULL OR r.run_id > $1) AND ($2::text IS NULL OR r.queue = $2) \
        AND ($3::text IS NULL OR r.state = $3) \
     ORDER BY r.run_id LIMIT $4"
);

//! Every SQL statement the SQLite spool sends, as constants over the tables of revisions
//! `0002_spool`, `0003_spool_import` and `0006_spool_run_close`
//! (`crates/migrate/sql/000{2,3,6}_*.sqlite.sql`).
//!
//! Parameters are always bound; nothing here is assembled from input. States are bound as
//! [`cairn_core::RunState::as_str`] of what the pure transition functions decided, never
//! written as literals the Rust side did not choose — except in `WHERE` clauses that name the
//! live states a partial index is defined over.

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

/// Supersedes the other queued runs of a group (through `spool_run_group`).
pub(super) const SUPERSEDE: &str = "\
UPDATE spool_run
SET state = ?4, updated_at = ?5, due_at = NULL, finished_at = ?5, lease_consumer = NULL,
    lease_expires_at = NULL, cancel_requested = 0
WHERE queue = ?1 AND supersede_group = ?2 AND state = 'queued' AND run_id <> ?3";

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

/// Extends a lease.
pub(super) const EXTEND: &str =
    "UPDATE spool_run SET lease_expires_at = ?2, due_at = ?3 WHERE run_no = ?1";

/// Returns a nacked run to its queue for a retry.
pub(super) const RETRY: &str = "\
UPDATE spool_run
SET state = ?2, reason = ?3, updated_at = ?4, due_at = ?5, lease_consumer = NULL,
    lease_expires_at = NULL
WHERE run_no = ?1";

/// Gives a claimed run back to its queue with the claim's attempt returned
/// (`Spool::release`).
pub(super) const RELEASE: &str = "\
UPDATE spool_run
SET state = ?2, attempts = ?3, updated_at = ?4, due_at = ?5, lease_consumer = NULL,
    lease_expires_at = NULL
WHERE run_no = ?1";

/// A run's event stream (`closed`: NULL unmarked, 0 open, 1 closed; revision
/// `0006_spool_run_close`).
pub(super) const RUN_STREAM: &str = "SELECT run_no, closed FROM spool_run WHERE run_id = ?1";

/// Closes a run's event stream.
pub(super) const CLOSE_RUN: &str = "UPDATE spool_run SET closed = 1 WHERE run_no = ?1";

/// Marks a claimed run's cancel as requested.
pub(super) const REQUEST_CANCEL: &str =
    "UPDATE spool_run SET cancel_requested = 1 WHERE run_no = ?1";

/// Columns of [`crate::spool`]'s `RunInfo` (without facts), in the order `run_info` reads them.
macro_rules! run_info_columns {
    () => {
        "r.run_id, r.queue, r.dedup_key, r.supersede_group, r.state, r.attempts, r.max_attempts,
       r.priority, r.payload_bytes, r.enqueued_at, r.updated_at, r.due_at, r.finished_at,
       r.lease_consumer, r.lease_expires_at, r.cancel_requested, r.reason,
       (SELECT count(*) FROM spool_event AS e WHERE e.run_id = r.run_id), r.closed"
    };
}

/// One run's info.
pub(super) const RUN_INFO: &str = concat!(
    "SELECT ",
    run_info_columns!(),
    "\nFROM spool_run AS r WHERE r.run_id = ?1"
);

/// A page of runs in id byte order after `?1`, optionally of one queue (`?2`) and one state
/// (`?3`).
pub(super) const RUNS_PAGE: &str = concat!(
    "SELECT ",
    run_info_columns!(),
    "\nFROM spool_run AS r
WHERE r.run_id > ?1 AND (?2 IS NULL OR r.queue = ?2) AND (?3 IS NULL OR r.state = ?3)
ORDER BY r.run_id
LIMIT ?4"
);

/// Whether a run exists.
pub(super) const RUN_EXISTS: &str = "SELECT run_no FROM spool_run WHERE run_id = ?1";

/// One run's payload: `?1` run id.
pub(super) const RUN_PAYLOAD: &str = "SELECT payload FROM spool_run WHERE run_id = ?1";

/// Run counts per queue and state, with the enqueue time of each queue's oldest queued run on
/// its `queued` row (NULL on the others). The spool-wide counts are their sums.
pub(super) const QUEUE_STATE_COUNTS: &str = "\
SELECT queue, state, count(*), min(CASE WHEN state = 'queued' THEN enqueued_at END),
    sum(CASE WHEN state = 'queued' AND due_at > ?1 THEN 1 ELSE 0 END)
FROM spool_run
GROUP BY queue, state";

/// Stored events: count, payload bytes, oldest append time.
pub(super) const EVENT_TOTALS: &str =
    "SELECT count(*), coalesce(sum(payload_bytes), 0), min(created_at) FROM spool_event";

/// The run's event counter, and what decides whether it takes events (state, `closed`).
pub(super) const LAST_EVENT_SEQ: &str =
    "SELECT run_no, last_event_seq, state, closed FROM spool_run WHERE run_id = ?1";

/// The seq of an event id the run holds.
pub(super) const EVENT_SEQ_BY_ID: &str =
    "SELECT seq FROM spool_event WHERE run_id = ?1 AND event_id = ?2";

/// Stores one event.
pub(super) const INSERT_EVENT: &str = "\
INSERT INTO spool_event (run_id, seq, event_id, created_at, payload_bytes, payload)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// Moves the run's event counter.
pub(super) const SET_LAST_EVENT_SEQ: &str =
    "UPDATE spool_run SET last_event_seq = ?2 WHERE run_no = ?1";

/// A run's events after a seq, in seq order.
pub(super) const EVENTS_AFTER: &str = "\
SELECT seq, event_id, payload, created_at
FROM spool_event
WHERE run_id = ?1 AND seq > ?2
ORDER BY seq
LIMIT ?3";

/// Removes one delivered event by id.
pub(super) const DELETE_EVENT_BY_ID: &str =
    "DELETE FROM spool_event WHERE run_id = ?1 AND event_id = ?2";

/// Sets a fact unless it is set.
pub(super) const INSERT_FACT: &str = "\
INSERT INTO spool_fact (run_id, name, created_at, value) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (run_id, name) DO NOTHING";

/// One fact's value.
pub(super) const FACT_VALUE: &str = "SELECT value FROM spool_fact WHERE run_id = ?1 AND name = ?2";

/// A run's facts.
pub(super) const FACTS: &str = "SELECT name, value FROM spool_fact WHERE run_id = ?1 ORDER BY name";

/// Total payload bytes of every stored event (what the retention cap bounds).
pub(super) const EVENT_BYTES: &str = "SELECT coalesce(sum(payload_bytes), 0) FROM spool_event";

/// The oldest events in retention age order (`spool_event_age`).
pub(super) const OLDEST_EVENTS: &str = "\
SELECT run_id, seq, created_at, payload_bytes
FROM spool_event
ORDER BY created_at, event_no
LIMIT ?1";

/// Removes one event by position.
pub(super) const DELETE_EVENT: &str = "DELETE FROM spool_event WHERE run_id = ?1 AND seq = ?2";

/// Terminal runs without events finished before `?1`, oldest first (`spool_run_finished`).
pub(super) const REMOVABLE_RUNS: &str = "\
SELECT r.run_id, r.finished_at
FROM spool_run AS r
WHERE r.finished_at < ?1
  AND NOT EXISTS (SELECT 1 FROM spool_event AS e WHERE e.run_id = r.run_id)
ORDER BY r.finished_at, r.run_no
LIMIT ?2";

/// Removes a run's facts (before the run itself).
pub(super) const DELETE_FACTS: &str = "DELETE FROM spool_fact WHERE run_id = ?1";

/// Removes a run.
pub(super) const DELETE_RUN: &str = "DELETE FROM spool_run WHERE run_id = ?1";

/// The earliest due time of a queue's live runs (a covering range of `spool_run_claim`).
pub(super) const NEXT_DUE: &str =
    "SELECT min(due_at) FROM spool_run WHERE queue = ?1 AND due_at IS NOT NULL";

/// An import source's completion marker.
pub(super) const IMPORT_MARKER: &str =
    "SELECT imported_at, runs_created, runs_existing FROM spool_import WHERE fingerprint = ?1";

/// Stores an imported run with the fields it brings.
pub(super) const IMPORT_RUN: &str = "\
INSERT INTO spool_run (run_id, queue, dedup_key, supersede_group, state, attempts, max_attempts,
                       priority, enqueued_at, updated_at, due_at, finished_at, reason,
                       last_event_seq, payload_bytes, payload)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)";

/// Stores an imported fact.
pub(super) const IMPORT_FACT: &str =
    "INSERT INTO spool_fact (run_id, name, created_at, value) VALUES (?1, ?2, ?3, ?4)";

/// Records a source's completion marker.
pub(super) const RECORD_IMPORT: &str = "\
INSERT INTO spool_import (fingerprint, description, imported_at, runs_created, runs_existing)
VALUES (?1, ?2, ?3, ?4, ?5)";

/// What an operator's retry or discard of a parked run decides from (`Spool::retry_parked`,
/// `Spool::discard`).
pub(super) const UNPARK_ROW: &str = "\
SELECT run_no, queue, state, attempts, reason, last_event_seq FROM spool_run WHERE run_id = ?1";

/// An operator's retry of a parked run: `?2` the queued state, a fresh attempt budget, due at
/// `?3` (now), no lease, no finish time, the event counter moved to `?4`; the reason stays.
pub(super) const REQUEUE_PARKED: &str = "\
UPDATE spool_run
SET state = ?2, attempts = 0, updated_at = ?3, due_at = ?3, finished_at = NULL,
    lease_consumer = NULL, lease_expires_at = NULL, cancel_requested = 0, last_event_seq = ?4
WHERE run_no = ?1";

// Flow control (revision `0009_spool_flow`; not in [`ALL`]: a store whose upgrade stopped
// before it has no such tables, and the spool uses them only once it saw the revision).

/// Whether the store holds revision `0009_spool_flow`.
pub(super) const FLOW_APPLIED: &str = "\
SELECT count(*) FROM cairn_migration_lineage
WHERE set_name = 'cairn' AND revision = '0009_spool_flow'";

/// A queue's stored flow: paused, max claimed, per partition, rate claims, rate interval (µs),
/// updated at.
pub(super) const QUEUE_FLOW: &str = "\
SELECT paused, max_claimed, per_partition, rate_claims, rate_per_us, updated_at
FROM spool_queue WHERE queue = ?1";

/// Every stored flow, by queue name (byte order).
pub(super) const QUEUE_FLOWS: &str = "\
SELECT queue, paused, max_claimed, per_partition, rate_claims, rate_per_us, updated_at
FROM spool_queue ORDER BY queue";

/// Stores a queue's pause state (`?2`) at `?3`, its limits untouched.
pub(super) const SET_PAUSED: &str = "\
INSERT INTO spool_queue (queue, paused, updated_at) VALUES (?1, ?2, ?3)
ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at";

/// Stores a queue's limits (`?2`..`?5`, NULL: none) at `?6`, its pause state untouched.
pub(super) const SET_LIMITS: &str = "\
INSERT INTO spool_queue (queue, paused, max_claimed, per_partition, rate_claims, rate_per_us,
                         updated_at)
VALUES (?1, 0, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (queue) DO UPDATE SET max_claimed = excluded.max_claimed,
    per_partition = excluded.per_partition, rate_claims = excluded.rate_claims,
    rate_per_us = excluded.rate_per_us, updated_at = excluded.updated_at";

/// Drops queue `?1`'s flow row (its flow is back to the defaults).
pub(super) const DELETE_FLOW: &str = "DELETE FROM spool_queue WHERE queue = ?1";

/// Drops queue `?1`'s rate window (it has no rate limit).
pub(super) const DROP_TICKS: &str = "DELETE FROM spool_claim_tick WHERE queue = ?1";

/// [`ENQUEUE`] with the run's partition key (`?12`) and trace context (`?13`), either NULL:
/// an enqueue that carries one of them.
pub(super) const ENQUEUE_FLOW: &str = "\
INSERT INTO spool_run (run_id, queue, dedup_key, supersede_group, state, attempts, max_attempts,
                       priority, enqueued_at, updated_at, due_at, payload_bytes, payload, closed,
                       partition_key, traceparent)
VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, ?7, ?8, ?8, ?9, ?10, ?11, 0, ?12, ?13)
ON CONFLICT (queue, dedup_key) DO NOTHING
RETURNING run_id";

/// A run's partition key and trace context.
pub(super) const RUN_FLOW_COLUMNS: &str =
    "SELECT partition_key, traceparent FROM spool_run WHERE run_id = ?1";

/// Runs of queue `?1` claimed at once at `?2` (state `claimed`, `due_at` ahead), by partition
/// key (NULL: none), through `spool_run_expiry`.
pub(super) const HELD_BY_PARTITION: &str = "\
SELECT partition_key, count(*) FROM spool_run
WHERE queue = ?1 AND state = 'claimed' AND due_at > ?2
GROUP BY partition_key";

/// Drops queue `?1`'s claim times at or before `?2` (out of the rate window).
pub(super) const DROP_OLD_TICKS: &str =
    "DELETE FROM spool_claim_tick WHERE queue = ?1 AND at <= ?2";

/// Runs handed out by queue `?1`'s claims after `?2` (in the rate window).
pub(super) const WINDOW_RUNS: &str =
    "SELECT coalesce(sum(runs), 0) FROM spool_claim_tick WHERE queue = ?1 AND at > ?2";

/// Records a claim of queue `?1` at `?2` that handed out `?3` runs.
pub(super) const INSERT_TICK: &str =
    "INSERT INTO spool_claim_tick (queue, at, runs) VALUES (?1, ?2, ?3)";

/// A limited claim's candidates: queue `?1`'s due runs in claim order with their partition
/// keys (read lazily, as far as the pick needs).
pub(super) const FLOW_CANDIDATES: &str = "\
SELECT run_no, partition_key FROM spool_run
WHERE queue = ?1 AND due_at <= ?2
ORDER BY priority DESC, due_at, run_no";

/// One picked candidate, as [`CANDIDATES_FLOW`] returns it.
pub(super) const CANDIDATE: &str = "\
SELECT run_no, run_id, dedup_key, state, attempts, payload, traceparent FROM spool_run
WHERE run_no = ?1";

/// [`CANDIDATES`] with each run's trace context.
pub(super) const CANDIDATES_FLOW: &str = "\
SELECT run_no, run_id, dedup_key, state, attempts, payload, traceparent
FROM spool_run
WHERE queue = ?1 AND due_at <= ?2
ORDER BY priority DESC, due_at, run_no
LIMIT ?3";

/// Changes whenever another connection commits to the file.
pub(super) const DATA_VERSION: &str = "PRAGMA data_version";

/// Every statement above that reads or writes the spool's tables, compiled when a spool is
/// opened so a store whose tables do not match is refused at once.
pub(super) const ALL: &[&str] = &[
    ENQUEUE,
    RUN_ID_BY_KEY,
    SUPERSEDE,
    EXPIRED,
    CANDIDATES,
    TAKE,
    FINISH,
    ACK,
    LEASE_STATE,
    EXTEND,
    RETRY,
    RELEASE,
    RUN_STREAM,
    CLOSE_RUN,
    REQUEST_CANCEL,
    RUN_INFO,
    RUNS_PAGE,
    RUN_EXISTS,
    RUN_PAYLOAD,
    QUEUE_STATE_COUNTS,
    EVENT_TOTALS,
    LAST_EVENT_SEQ,
    EVENT_SEQ_BY_ID,
    INSERT_EVENT,
    SET_LAST_EVENT_SEQ,
    EVENTS_AFTER,
    DELETE_EVENT_BY_ID,
    INSERT_FACT,
    FACT_VALUE,
    FACTS,
    EVENT_BYTES,
    OLDEST_EVENTS,
    DELETE_EVENT,
    REMOVABLE_RUNS,
    DELETE_FACTS,
    DELETE_RUN,
    NEXT_DUE,
    IMPORT_MARKER,
    IMPORT_RUN,
    IMPORT_FACT,
    RECORD_IMPORT,
    UNPARK_ROW,
    REQUEUE_PARKED,
];

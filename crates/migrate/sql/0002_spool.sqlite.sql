-- spool: runs (dedup, leases, supersede, cancel), run events and run facts
--
-- Revision 0002 of cairn's own migration set, SQLite dialect. The Postgres file
-- (0002_spool.postgres.sql) creates the same tables, columns and indexes with the same meaning.
-- Times are microseconds since the Unix epoch, read from the spool's clock, never the engine's.
-- This text is hashed into the revision's checksum: never edit it once released.

-- One row per run. `run_no` is the store-wide enqueue order (the last tie-break of the claim
-- order). `due_at` is set exactly while the run is live: the not-before time of a queued run,
-- the lease expiry plus backoff of a claimed one; it is NULL once the run is terminal, so the
-- claim index holds live runs only. `lease_token` outlives the run's end so that a repeated
-- ack is recognised. `payload` is the last column so that reading the others never touches its
-- overflow pages.
CREATE TABLE spool_run (
    run_no INTEGER PRIMARY KEY,
    run_id BLOB NOT NULL UNIQUE CHECK (length(run_id) = 16),
    queue TEXT NOT NULL,
    dedup_key BLOB NOT NULL,
    supersede_group BLOB,
    state TEXT NOT NULL CHECK (state IN ('queued', 'claimed', 'succeeded', 'failed', 'canceled', 'superseded', 'parked')),
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    enqueued_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    due_at BIGINT,
    finished_at BIGINT,
    lease_token BLOB,
    lease_consumer TEXT,
    lease_expires_at BIGINT,
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    reason TEXT,
    last_event_seq BIGINT NOT NULL DEFAULT 0,
    payload_bytes BIGINT NOT NULL,
    payload BLOB NOT NULL,
    UNIQUE (queue, dedup_key)
);

-- Claim: one range of one queue in claim order; the scan stops after `limit` due runs.
CREATE INDEX spool_run_claim ON spool_run (queue, priority DESC, due_at, run_no)
    WHERE due_at IS NOT NULL;

-- Claim, first step: claimed runs of a queue whose lease (plus backoff) has run out.
CREATE INDEX spool_run_expiry ON spool_run (queue, due_at) WHERE state = 'claimed';

-- Supersede: the queued runs of one group.
CREATE INDEX spool_run_group ON spool_run (queue, supersede_group)
    WHERE supersede_group IS NOT NULL;

-- Retention: finished runs, oldest first.
CREATE INDEX spool_run_finished ON spool_run (finished_at, run_no)
    WHERE finished_at IS NOT NULL;

-- One row per stored run event. `event_no` is the store-wide append order (the tie-break of
-- the retention age order); `seq` the run's own sequence, from 1, never reused (the run's
-- `last_event_seq` remembers the highest).
CREATE TABLE spool_event (
    event_no INTEGER PRIMARY KEY,
    run_id BLOB NOT NULL REFERENCES spool_run (run_id) ON DELETE CASCADE,
    seq BIGINT NOT NULL CHECK (seq >= 1),
    event_id BLOB NOT NULL,
    created_at BIGINT NOT NULL,
    payload_bytes BIGINT NOT NULL,
    payload BLOB NOT NULL,
    UNIQUE (run_id, seq),
    UNIQUE (run_id, event_id)
);

-- Retention: events in age order.
CREATE INDEX spool_event_age ON spool_event (created_at, event_no);

-- Write-once named facts of a run: the first writer wins.
CREATE TABLE spool_fact (
    run_id BLOB NOT NULL REFERENCES spool_run (run_id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (run_id, name)
);

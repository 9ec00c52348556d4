-- spool flow control and schedules
--
-- Revision 0009 of cairn's own migration set, SQLite dialect; 0009_spool_flow.postgres.sql
-- creates the same objects with the same meaning. Only new tables and two nullable columns:
-- builds at 0008 and older keep working on a store at 0009 (they neither read nor honour what
-- it adds).
--
-- spool_queue: a queue's stored flow (cairn_core::spool::QueueFlow), one row per queue whose
-- flow was ever set: paused, the cap on runs claimed at once (max_claimed), the cap per
-- partition key (per_partition), and the rate limit (rate_claims runs per rate_per_us
-- microseconds). NULL is no limit.
-- spool_claim_tick: the claims of rate-limited queues, one row per claim that handed out runs
-- (at: the claim's time on the spool's clock, runs: how many); rows older than the queue's
-- window are deleted by the next claim of the queue.
-- spool_run.partition_key: the run's partition (cairn_core::spool::PartitionKey), NULL for none
-- and for runs of older builds.
-- spool_run.traceparent: the W3C trace context of the run's enqueuer (cairn_core::spool::
-- TraceParent), so the consumer that handles the run continues its trace; NULL for none, for
-- runs of older builds, imports and schedules.
-- spool_schedule: stored cron schedules (cairn_core::spool::Schedule). high_water is the latest
-- tick enqueued (or the creation time): no tick at or before it is enqueued again; revision is
-- bumped by every edit, so a scheduler that read an older version fires nothing.
-- This text is hashed into the revision's checksum: never edit it once committed.
CREATE TABLE spool_queue (
    queue TEXT NOT NULL PRIMARY KEY,
    paused INTEGER NOT NULL DEFAULT 0,
    max_claimed INTEGER,
    per_partition INTEGER,
    rate_claims INTEGER,
    rate_per_us INTEGER,
    updated_at INTEGER NOT NULL
);

CREATE TABLE spool_claim_tick (
    queue TEXT NOT NULL,
    at INTEGER NOT NULL,
    runs INTEGER NOT NULL
);

CREATE INDEX spool_claim_tick_window ON spool_claim_tick (queue, at);

ALTER TABLE spool_run ADD COLUMN partition_key TEXT;

ALTER TABLE spool_run ADD COLUMN traceparent TEXT;

CREATE TABLE spool_schedule (
    name TEXT NOT NULL PRIMARY KEY,
    cron TEXT NOT NULL,
    time_zone TEXT NOT NULL,
    queue TEXT NOT NULL,
    payload BLOB NOT NULL,
    priority INTEGER NOT NULL,
    max_attempts INTEGER,
    supersede_group BLOB,
    partition_key TEXT,
    catch_up TEXT NOT NULL,
    catch_up_cap INTEGER,
    high_water INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

-- spool ready: the live runs' queue entries, in a narrow table apart from the run record
--
-- Revision 0007 of cairn's own migration set, Postgres dialect; SQLite's spool keeps its one
-- table (0007_spool_ready.sqlite.sql changes nothing). spool_ready holds one row per live run
-- of spool_run (due_at IS NOT NULL): its queue, priority and due_at, and whether it is claimed.
-- Every build from this revision on writes it in the statement that changes the run. Builds
-- older than this revision do not know it, so while they may be live it is not complete: those
-- builds, and these ones, claim through spool_run's own indexes. The contract revision
-- 0008_spool_ready_contract, applied once no older build is live, rebuilds it from spool_run;
-- from then on claims find runs here, lock and re-check them on spool_run (the authority), and
-- an ack deletes the row. The rule (I-ready): a run has a row iff its due_at is not NULL, with
-- the run's queue, priority and due_at, and claimed = (state = 'claimed').
-- This text is hashed into the revision's checksum: never edit it once committed.
CREATE TABLE spool_ready (
    run_no BIGINT NOT NULL PRIMARY KEY,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    due_at BIGINT NOT NULL,
    claimed BOOLEAN NOT NULL
);

-- Claim: one range of one queue in claim order (what spool_run_claim is before 0008).
CREATE INDEX spool_ready_claim ON spool_ready (queue, priority DESC, due_at, run_no);

-- Claim, first step: claimed runs of a queue whose lease (plus backoff) has run out.
CREATE INDEX spool_ready_expiry ON spool_ready (queue, due_at) WHERE claimed;

-- cairn:contract
-- spool ready, contract: the run record stops being the queue index
--
-- Revision 0008 of cairn's own migration set, Postgres dialect, a contract revision: builds
-- older than 0007_spool_ready claim through the indexes it drops and do not write spool_ready,
-- so it applies only once no live build in the fleet registry lacks it (cairn_fleet), or when
-- an operator forces it. Dropping the first index locks spool_run (ACCESS EXCLUSIVE) until this
-- revision commits, so no write interleaves with the rebuild of spool_ready that follows: every
-- live run gets its row (I-ready, see 0007) and no other row stays. From here on claims find
-- runs through spool_ready alone. A claim, a heartbeat and an ack then change no indexed
-- column of spool_run, and with free room on its pages (fillfactor 50, for pages written from
-- here on) Postgres rewrites the run in place (a HOT update) without touching its indexes.
-- This text is hashed into the revision's checksum: never edit it once committed.
DROP INDEX spool_run_claim;
DROP INDEX spool_run_expiry;
DROP INDEX spool_run_finished;
DELETE FROM spool_ready;
INSERT INTO spool_ready (run_no, queue, priority, due_at, claimed)
SELECT run_no, queue, priority, due_at, state = 'claimed' FROM spool_run WHERE due_at IS NOT NULL;
ALTER TABLE spool_run SET (fillfactor = 50);

-- spool room: free space on the spool tables' pages, so a claim rewrites its runs in place
--
-- Revision 0011 of cairn's own migration set, Postgres dialect. A claim takes a batch of runs
-- in claim order, which for runs enqueued together means every row of their pages, and writes
-- each twice in one statement: its spool_run row (a HOT update: no indexed column changes) and
-- its spool_ready row (not HOT: due_at and claimed are indexed). Neither old version can be
-- pruned before the claim commits, so a page must hold every row's new version beside the old:
--   - spool_run at fillfactor 50 (0008) held 89 % of them; the other 11 % left their page and
--     were written into all four of its indexes. At 40 every claim's update stays HOT.
--   - spool_ready at fillfactor 100 (0007) held none: every update moved its row to another
--     page, which Postgres logs as a row lock plus an update carrying the whole new row. At 50
--     the new version stays on its page.
-- Measured on the bench's drain of 20,000 runs (docs/BENCHMARKS.md): WAL per job 946 -> 810
-- bytes, the whole machine's CPU per 1,000 jobs 0.080-0.093 -> 0.066-0.068 s. Rows inserted
-- from here on leave the room; pages written before keep their rows as they are. ALTER TABLE …
-- SET takes a SHARE UPDATE EXCLUSIVE lock: enqueues, claims and acks go on while it applies,
-- and builds older than this revision run unchanged on the store.
-- This text is hashed into the revision's checksum: never edit it once committed.
ALTER TABLE spool_ready SET (fillfactor = 50);
ALTER TABLE spool_run SET (fillfactor = 40);

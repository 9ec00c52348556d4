-- spool ready: changes nothing on SQLite
--
-- Revision 0007 of cairn's own migration set, SQLite dialect. On Postgres this revision moves
-- the live runs' queue entries into a narrow table of their own (0007_spool_ready.postgres.sql),
-- so that a claim and an ack rewrite no index of the run record. SQLite's writer is one
-- connection that updates a run in place under one B-tree, and its spool keeps the one table
-- of revision 0002; the revision exists on both engines because cairn's set is one chain. Its
-- one statement reads the spool table, so that a store without it fails here rather than later.
-- This text is hashed into the revision's checksum: never edit it once committed.
SELECT count(*) FROM spool_run WHERE 0;

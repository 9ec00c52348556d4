-- spool room: changes nothing on SQLite
--
-- Revision 0011 of cairn's own migration set, SQLite dialect. On Postgres it leaves free space
-- on the spool tables' pages (0011_spool_room.postgres.sql); SQLite has no fill factor, and its
-- spool keeps the one table of revision 0002. The revision exists on both engines because
-- cairn's set is one chain. Its one statement reads the spool table, so that a store without it
-- fails here rather than later.
-- This text is hashed into the revision's checksum: never edit it once committed.
SELECT count(*) FROM spool_run WHERE 0;

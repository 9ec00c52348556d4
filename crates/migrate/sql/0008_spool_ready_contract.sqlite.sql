-- cairn:contract
-- spool ready, contract: changes nothing on SQLite
--
-- Revision 0008 of cairn's own migration set, SQLite dialect. On Postgres it drops what builds
-- older than 0007_spool_ready claim through (0008_spool_ready_contract.postgres.sql); SQLite's
-- spool is unchanged, but the mark is the revision's, on both engines: a store at this
-- revision refuses builds older than 0007, as a Postgres store does.
-- This text is hashed into the revision's checksum: never edit it once committed.
SELECT count(*) FROM spool_run WHERE 0;

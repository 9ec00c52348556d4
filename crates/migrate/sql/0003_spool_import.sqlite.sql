-- spool import: the completion marker of every source imported into the spool
--
-- Revision 0003 of cairn's own migration set, SQLite dialect; 0003_spool_import.postgres.sql
-- creates the same table with the same meaning. One row per source imported with
-- Spool::import_runs (the legacy importer), written in the import's own transaction, so that a
-- source is imported once. Times are microseconds since the Unix epoch from the spool's clock.
-- This text is hashed into the revision's checksum: never edit it once committed.
CREATE TABLE spool_import (
    fingerprint BLOB NOT NULL PRIMARY KEY CHECK (length(fingerprint) = 32),
    description TEXT NOT NULL,
    imported_at BIGINT NOT NULL,
    runs_created BIGINT NOT NULL,
    runs_existing BIGINT NOT NULL
);

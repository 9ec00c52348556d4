-- spool claim jitter: the backoff jitter of a run's next attempt, stored with the run
--
-- Revision 0005 of cairn's own migration set, SQLite dialect; 0005_spool_claim_jitter.postgres.sql
-- adds the same columns with the same meaning. A claim sets a claimed run's due_at to its lease
-- expiry plus the backoff of the attempt it starts, and that backoff's jitter is a hash of the
-- run's queue, dedup key and attempt (cairn_core::spool::jitter_seed). A writer that leaves a
-- run queued with `attempts = n` may store here the jitter of attempt n + 1 (`claim_attempt`,
-- and the seed's top 32 bits in `claim_jitter`), so that a claim can compute the backoff in the
-- claiming statement itself. Both are hints: a claim uses them only when `claim_attempt` is
-- `attempts + 1` and computes the jitter itself otherwise (rows written by older builds, or
-- before this revision, have NULL here). Postgres claims read them; SQLite's writer computes
-- the backoff in process and leaves them NULL.
-- This text is hashed into the revision's checksum: never edit it once committed.
ALTER TABLE spool_run ADD COLUMN claim_attempt INTEGER;
ALTER TABLE spool_run ADD COLUMN claim_jitter BIGINT;

//! Every SQL statement the backend sends. Nothing here is built from input: values are bound
//! parameters, and the only identifier ever spliced in is a [`SchemaName`] that was validated
//! to be a plain lowercase identifier.
//!
//! Tables are unqualified: every pooled connection's `search_path` is the store's schema.
//! Functions are not: every call is `pg_catalog.`-qualified, because an overload planted in the
//! store's schema (`public`, say, which every role may write before PostgreSQL 15) wins over a
//! built-in whenever its argument types match better — `unnest(bytea[])` over
//! `pg_catalog.unnest(anyarray)` — wherever `pg_catalog` sits in the `search_path`. For the same
//! reason every operator's operands have one type (an operator is found by exact types in
//! `pg_catalog` first). Multi-argument `unnest(a, b, …)` in FROM stays unqualified: the parser
//! expands it into `pg_catalog.unnest` calls itself (and `pg_catalog.unnest(a, b)` does not
//! exist). `tests/search_path.rs` plants such overloads and shows none of them runs.

use crate::config::SchemaName;

/// Opens an append/repair/import transaction. READ COMMITTED is enough: every writer of a space
/// holds the space's advisory lock, so each statement sees every earlier writer's commit.
pub(crate) const BEGIN_READ_COMMITTED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// Session settings every connection of a store gets (its one pool serves the epoch log, the
/// spool, the migrator's looks and the fleet heartbeat): `$1` search_path, `$2` lock_timeout
/// (ms), and no bitmap scans.
///
/// Bitmap scans are off for the spool's claims: a claim reads the next due runs in the claim
/// index's own order and stops after `limit`. A queue table's statistics are usually wrong — it
/// goes from empty to thousands of runs and back faster than autoanalyze follows, and some
/// servers run without autovacuum — and with too few rows estimated, the planner picks a bitmap
/// scan of every due run of the queue plus a sort instead, which reads and sorts the whole
/// queue on every claim (measured: 3,008 rows sorted to take 5). Every spool and epoch-log
/// statement looks rows up through an index by its leading columns, so none needs a bitmap
/// scan; without them the ordered index scan is the plan whatever the estimate. The test
/// `a_claim_reads_the_claim_index_in_order_whatever_the_statistics` checks the plan.
pub(crate) const SESSION_SETUP: &str = "SELECT pg_catalog.set_config('search_path', $1, false), \
     pg_catalog.set_config('lock_timeout', $2, false), \
     pg_catalog.set_config('enable_bitmapscan', 'off', false)";

/// Re-reads `search_path` inside the DDL transaction (`$1`), after the schema may have been
/// created.
pub(crate) const SET_LOCAL_SEARCH_PATH: &str =
    "SELECT pg_catalog.set_config('search_path', $1, true)";

/// Sets the transaction's `search_path` to `$1` until it ends, returning the one it had (the
/// subquery is evaluated first: `OFFSET 0` keeps it from being flattened into the outer
/// select list).
pub(crate) const ENTER_SCHEMA: &str =
    "SELECT o.path, pg_catalog.set_config('search_path', $1, true) \
     FROM (SELECT pg_catalog.current_setting('search_path') AS path OFFSET 0) o";

/// A statement that fails in an aborted transaction and does nothing otherwise.
pub(crate) const TRANSACTION_ALIVE: &str = "SELECT 1";

/// Whether schema `$1` exists.
pub(crate) const SCHEMA_EXISTS: &str =
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)";

/// `CREATE SCHEMA` for a validated name (identifiers cannot be bound parameters). Issued only
/// after [`SCHEMA_EXISTS`] found none; `IF NOT EXISTS` covers a creator outside cairn's lock.
pub(crate) fn create_schema(schema: &SchemaName) -> String {
    format!("CREATE SCHEMA IF NOT EXISTS \"{}\"", schema.as_str())
}

/// `DROP SCHEMA … CASCADE` for a validated name (test support).
#[cfg(feature = "testkit")]
pub(crate) fn drop_schema(schema: &SchemaName) -> String {
    format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", schema.as_str())
}

/// The append's first round trip, one simple query of two statements: [`BEGIN_READ_COMMITTED`]
/// and the transaction-scoped advisory lock `key` (a space's write lock), the key as a literal
/// (a number cairn derives, never input; the string form keeps `i64::MIN` an `int8`).
pub(crate) fn begin_and_lock(key: i64) -> String {
    format!(
        "{BEGIN_READ_COMMITTED}; SELECT pg_catalog.pg_advisory_xact_lock('{key}'::pg_catalog.int8)"
    )
}

/// Takes the transaction-scoped advisory lock `$1` (a space's write lock, or the DDL lock).
pub(crate) const LOCK: &str = "SELECT pg_catalog.pg_advisory_xact_lock($1)";

/// The append's read, in one statement: the space's largest seq and the id of the epoch there
/// (`max_seq`/`max_id`, one backward step down the unique `(space, seq)` index; NULL for an
/// empty space) on every row, plus one row per cached head (`id`/`seq` NULL when the cache has
/// none).
pub(crate) const PROBE: &str = "\
SELECT m.seq AS max_seq, m.id AS max_id, h.id, h.seq \
FROM (VALUES (1)) AS one(x) \
LEFT JOIN (SELECT seq, id FROM epoch WHERE space = $1 ORDER BY seq DESC LIMIT 1) m ON true \
LEFT JOIN epoch_head h ON h.space = $1";

/// The space's largest seq (NULL when empty).
pub(crate) const MAX_SEQ: &str = "SELECT pg_catalog.max(seq) FROM epoch WHERE space = $1";

/// The head cache's rows for the space.
pub(crate) const CACHED_HEADS: &str = "SELECT id, seq FROM epoch_head WHERE space = $1 ORDER BY id";

/// The anti-join: epochs of the space no epoch names as a parent. O(history).
pub(crate) const ANTI_JOIN_HEADS: &str = "\
SELECT e.id, e.seq FROM epoch e \
WHERE e.space = $1 \
AND NOT EXISTS (SELECT 1 FROM epoch_parent p WHERE p.space = $1 AND p.parent = e.id) \
ORDER BY e.id";

/// Heads at one committed state, in one statement: the cache rows when the cache is current
/// ([`cairn_core::cache_is_current`]: `max(cached seq) = max(seq)` and the epoch at the largest
/// seq is a cached head), else the anti-join. The currency test is an uncorrelated sub-select,
/// so the planner evaluates it once and runs only the branch it selects. No rows means the
/// space is empty.
pub(crate) const HEADS: &str = "\
WITH st AS (\
 SELECT m.seq IS NOT NULL AND coalesce(c.max_cached, 0) = m.seq \
 AND EXISTS (SELECT 1 FROM epoch_head k WHERE k.space = $1 AND k.id = m.id) AS cur \
 FROM (SELECT 1) AS one(x) \
 LEFT JOIN (SELECT seq, id FROM epoch WHERE space = $1 ORDER BY seq DESC LIMIT 1) m ON true, \
 (SELECT pg_catalog.max(seq) AS max_cached FROM epoch_head WHERE space = $1) c) \
SELECT h.id, h.seq FROM epoch_head h WHERE h.space = $1 AND (SELECT cur FROM st) \
UNION ALL \
SELECT e.id, e.seq FROM epoch e \
WHERE e.space = $1 AND NOT (SELECT cur FROM st) \
AND NOT EXISTS (SELECT 1 FROM epoch_parent p WHERE p.space = $1 AND p.parent = e.id)";

/// Inserts one epoch, its parent edges and its events. Parameters: `$1` space, `$2` id, `$3`
/// seq, `$4` parents (bytea[]), `$5` event ids, `$6` kinds, `$7` keys (NULL elements allowed),
/// `$8` payloads. Foreign keys are checked at the end of the statement, when the epoch row the
/// edges and events name exists.
macro_rules! write_log_ctes {
    () => {
        "WITH new_epoch AS (\
 INSERT INTO epoch (space, id, seq) VALUES ($1, $2, $3)), \
new_parents AS (\
 INSERT INTO epoch_parent (space, parent, child) \
 SELECT $1, p, $2 FROM pg_catalog.unnest($4::bytea[]) AS p), \
new_events AS (\
 INSERT INTO epoch_event (space, seq, epoch_seq, epoch, event_id, kind, key, payload) \
 SELECT $1, $3, (e.n - 1)::int4, $2, e.event_id, e.kind, e.key, e.payload \
 FROM unnest($5::bytea[], $6::text[], $7::bytea[], $8::bytea[]) \
 WITH ORDINALITY AS e(event_id, kind, key, payload, n))"
    };
}

/// Append's write when the cache held exactly one row: log inserts + UPDATE of that row.
pub(crate) const APPEND_UPDATE_HEAD: &str = concat!(
    write_log_ctes!(),
    " UPDATE epoch_head SET id = $2, seq = $3 WHERE space = $1"
);

/// Append's write when the cache held no row: log inserts + INSERT of the new head.
pub(crate) const APPEND_INSERT_HEAD: &str = concat!(
    write_log_ctes!(),
    " INSERT INTO epoch_head (space, id, seq) VALUES ($1, $2, $3)"
);

/// Append's write when the cache held several rows: log inserts + DELETE + INSERT. (The new
/// epoch's id cannot be among the deleted rows, so the two may run in either order.)
pub(crate) const APPEND_REPLACE_HEADS: &str = concat!(
    write_log_ctes!(),
    ", old_heads AS (DELETE FROM epoch_head WHERE space = $1) \
INSERT INTO epoch_head (space, id, seq) VALUES ($1, $2, $3)"
);

/// Import's write: log inserts + the cache set to `$9` ids / `$10` seqs. Sub-statements of
/// one statement run in no defined order, so the rows kept are never deleted and re-inserted
/// (that could hit the primary key): rows outside the new set are deleted, the new set is
/// upserted.
pub(crate) const IMPORT_WRITE: &str = concat!(
    write_log_ctes!(),
    ", old_heads AS (DELETE FROM epoch_head WHERE space = $1 AND id <> ALL($9::bytea[])) \
INSERT INTO epoch_head (space, id, seq) \
SELECT $1, h.id, h.seq FROM unnest($9::bytea[], $10::int8[]) AS h(id, seq) \
ON CONFLICT (space, id) DO UPDATE SET seq = EXCLUDED.seq"
);

/// A cache-unaware (legacy) writer's write: log inserts only.
#[cfg(feature = "testkit")]
pub(crate) const LEGACY_WRITE: &str = concat!(write_log_ctes!(), " SELECT 1");

/// Repair's write: the cache set to `$2` ids / `$3` seqs (delete the rest, upsert the set; see
/// [`IMPORT_WRITE`] for why not DELETE-all + INSERT).
pub(crate) const REPLACE_HEADS: &str = "\
WITH old_heads AS (DELETE FROM epoch_head WHERE space = $1 AND id <> ALL($2::bytea[])) \
INSERT INTO epoch_head (space, id, seq) \
SELECT $1, h.id, h.seq FROM unnest($2::bytea[], $3::int8[]) AS h(id, seq) \
ON CONFLICT (space, id) DO UPDATE SET seq = EXCLUDED.seq";

/// Seq of epoch `$2` in space `$1`.
pub(crate) const EPOCH_SEQ: &str = "SELECT seq FROM epoch WHERE space = $1 AND id = $2";

/// The ids `$2` that are epochs of space `$1`, with their seqs.
pub(crate) const KNOWN_EPOCH_SEQS: &str =
    "SELECT id, seq FROM epoch WHERE space = $1 AND id = ANY($2::bytea[])";

/// A batch import's write, one statement: the epochs (`$2` ids, `$3` seqs), their parent edges
/// (`$4` children, `$5` parents), their events (`$6`–`$12`, one row each) and the head cache
/// set to `$13` ids / `$14` seqs (as [`IMPORT_WRITE`]). The foreign keys are checked at the
/// statement's end, so a parent inserted by the same statement counts.
pub(crate) const IMPORT_BATCH_WRITE: &str = "\
WITH new_epochs AS (\
 INSERT INTO epoch (space, id, seq) \
 SELECT $1, e.id, e.seq FROM unnest($2::bytea[], $3::int8[]) AS e(id, seq)), \
new_parents AS (\
 INSERT INTO epoch_parent (space, parent, child) \
 SELECT $1, p.parent, p.child FROM unnest($4::bytea[], $5::bytea[]) AS p(child, parent)), \
new_events AS (\
 INSERT INTO epoch_event (space, seq, epoch_seq, epoch, event_id, kind, key, payload) \
 SELECT $1, e.seq, e.epoch_seq, e.epoch, e.event_id, e.kind, e.key, e.payload \
 FROM unnest($6::int8[], $7::int4[], $8::bytea[], $9::bytea[], $10::text[], $11::bytea[], $12::bytea[]) \
 AS e(seq, epoch_seq, epoch, event_id, kind, key, payload)), \
old_heads AS (DELETE FROM epoch_head WHERE space = $1 AND id <> ALL($13::bytea[])) \
INSERT INTO epoch_head (space, id, seq) \
SELECT $1, h.id, h.seq FROM unnest($13::bytea[], $14::int8[]) AS h(id, seq) \
ON CONFLICT (space, id) DO UPDATE SET seq = EXCLUDED.seq";

/// Which of the ids `$2` are epochs of space `$1`.
pub(crate) const KNOWN_EPOCHS: &str =
    "SELECT id FROM epoch WHERE space = $1 AND id = ANY($2::bytea[])";

// Sync state (revision `0010_epoch_sync`; a store whose upgrade stopped before it has no such
// tables, and the store uses them only once it saw the revision: `store::sync`).

/// Whether the store holds revision `0010_epoch_sync`.
pub(crate) const SYNC_APPLIED: &str = "\
SELECT EXISTS (SELECT 1 FROM cairn_migration_lineage \
    WHERE set_name = 'cairn' AND revision = '0010_epoch_sync')";

/// The store's sync id, or no row before the first `store_id` call.
pub(crate) const STORE_ID: &str = "SELECT store_id FROM epoch_sync_self WHERE one = 1";

/// Stores the fresh sync id `$1` unless one is there already (a concurrent first call's,
/// waited for when it is not committed yet). Its own statement, so the read after it sees
/// whichever id won.
pub(crate) const INSERT_STORE_ID: &str = "\
INSERT INTO epoch_sync_self (one, store_id) VALUES (1, $1) ON CONFLICT (one) DO NOTHING";

/// Replaces the cursor kept for peer `$2` in space `$1`, its counters grown by `$5` epochs and
/// `$6` bytes.
pub(crate) const UPSERT_PEER: &str = "\
INSERT INTO epoch_sync_peer (space, peer, seq, id, epochs, bytes, updated_at_us) \
VALUES ($1, $2, $3, $4, $5, $6, $7) \
ON CONFLICT (space, peer) DO UPDATE SET \
    seq = EXCLUDED.seq, \
    id = EXCLUDED.id, \
    epochs = epoch_sync_peer.epochs + EXCLUDED.epochs, \
    bytes = epoch_sync_peer.bytes + EXCLUDED.bytes, \
    updated_at_us = EXCLUDED.updated_at_us";

/// The cursors kept for space `$1`, by peer id (byte order, whatever the database's collation).
pub(crate) const SYNC_PEERS: &str = "\
SELECT peer, seq, id, epochs, bytes, updated_at_us FROM epoch_sync_peer \
WHERE space = $1 ORDER BY peer COLLATE \"C\"";

/// One epoch with its sorted parents and its events in order.
pub(crate) const EPOCH: &str = "\
SELECT e.seq, \
 ARRAY(SELECT p.parent FROM epoch_parent p WHERE p.space = $1 AND p.child = $2 ORDER BY p.parent) \
  AS parents, \
 ARRAY(SELECT v.kind FROM epoch_event v WHERE v.space = $1 AND v.seq = e.seq ORDER BY v.epoch_seq) \
  AS kinds, \
 ARRAY(SELECT v.key FROM epoch_event v WHERE v.space = $1 AND v.seq = e.seq ORDER BY v.epoch_seq) \
  AS keys, \
 ARRAY(SELECT v.payload FROM epoch_event v WHERE v.space = $1 AND v.seq = e.seq ORDER BY v.epoch_seq) \
  AS payloads \
FROM epoch e WHERE e.space = $1 AND e.id = $2";

/// A page of the space's epochs, newest first, in one statement (one snapshot): `max_seq`
/// (the space's largest seq, NULL for an empty space) on every row; then, for each of at most
/// `$3` epochs with `seq < $2` (a backward range of the unique `(space, seq)` index), its id,
/// seq, event count (a range of `epoch_event`'s primary key) and parents in id byte order (the
/// `(space, child, parent)` primary key). With no epoch in the page, one row whose other
/// columns are NULL.
pub(crate) const RECENT_EPOCHS: &str = "\
SELECT m.max_seq, e.id, e.seq, e.events, e.parents \
FROM (SELECT pg_catalog.max(seq) AS max_seq FROM epoch WHERE space = $1) AS m \
LEFT JOIN LATERAL (\
 SELECT x.id, x.seq, \
 (SELECT pg_catalog.count(*) FROM epoch_event v WHERE v.space = $1 AND v.seq = x.seq) AS events, \
 ARRAY(SELECT p.parent FROM epoch_parent p WHERE p.space = $1 AND p.child = x.id ORDER BY p.parent) \
  AS parents \
 FROM epoch x WHERE x.space = $1 AND x.seq < $2 ORDER BY x.seq DESC LIMIT $3) AS e ON true \
ORDER BY e.seq DESC";

/// One feed page: events of whole epochs with seq > `$2`, in `(seq, epoch_seq)` order, stopping
/// before the epoch that would take the page past `$3` events or `$4` stored bytes (kind, key
/// and payload, sized by `octet_length`, which reads no TOASTed payload), but always at least
/// one epoch.
/// (Each seq is one epoch, so `(seq, epoch_seq)` is the `(seq, epoch, epoch_seq)` order.)
pub(crate) const FEED_PAGE: &str = "\
WITH page AS (\
 SELECT seq, pg_catalog.count(*) AS n, \
 pg_catalog.sum(pg_catalog.octet_length(kind) + COALESCE(pg_catalog.octet_length(key), 0) \
 + pg_catalog.octet_length(payload)) AS b \
 FROM epoch_event WHERE space = $1 AND seq > $2 \
 GROUP BY seq ORDER BY seq LIMIT $3), \
picked AS (\
 SELECT seq, (pg_catalog.sum(n) OVER (ORDER BY seq))::int8 AS upto, \
 (pg_catalog.sum(b) OVER (ORDER BY seq))::int8 AS bytes, \
 pg_catalog.row_number() OVER (ORDER BY seq) AS rn \
 FROM page) \
SELECT v.seq, v.epoch, v.epoch_seq, v.event_id, v.kind, v.key, v.payload \
FROM picked JOIN epoch_event v ON v.space = $1 AND v.seq = picked.seq \
WHERE (picked.upto <= $3 AND picked.bytes <= $4) OR picked.rn = 1 \
ORDER BY v.seq, v.epoch_seq";

/// Whether space `$1` has an epoch.
pub(crate) const SPACE_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM epoch WHERE space = $1)";

/// Up to `$2` distinct spaces after `$1` in byte order, by a skip scan over the primary key
/// (one index probe per space, not a scan of every epoch).
pub(crate) const LIST_SPACES: &str = "\
WITH RECURSIVE s(space, n) AS (\
 (SELECT space, 1::int8 FROM epoch WHERE space > $1 ORDER BY space LIMIT 1) \
 UNION ALL \
 SELECT (SELECT e.space FROM epoch e WHERE e.space > s.space ORDER BY e.space LIMIT 1), s.n + 1 \
 FROM s WHERE s.n < $2 AND s.space IS NOT NULL) \
SELECT space FROM s WHERE space IS NOT NULL ORDER BY space";

/// Test support: bulk-appends a chain. `$1` space, `$2` ids, `$3` seqs, `$4` parent of each
/// edge, `$5` child of each edge, `$6` kind, `$7` event ids, `$8` payloads (one event per epoch),
/// `$9`/`$10` the new (only) head.
#[cfg(feature = "testkit")]
pub(crate) const BENCH_SEED_BATCH: &str = "\
WITH new_epochs AS (\
 INSERT INTO epoch (space, id, seq) SELECT $1, t.id, t.seq FROM unnest($2::bytea[], $3::int8[]) AS t(id, seq)), \
new_parents AS (\
 INSERT INTO epoch_parent (space, parent, child) \
 SELECT $1, t.parent, t.child FROM unnest($4::bytea[], $5::bytea[]) AS t(parent, child)), \
new_events AS (\
 INSERT INTO epoch_event (space, seq, epoch_seq, epoch, event_id, kind, key, payload) \
 SELECT $1, t.seq, 0, t.id, t.event_id, $6, NULL, t.payload \
 FROM unnest($2::bytea[], $3::int8[], $7::bytea[], $8::bytea[]) AS t(id, seq, event_id, payload)), \
old_heads AS (DELETE FROM epoch_head WHERE space = $1) \
INSERT INTO epoch_head (space, id, seq) VALUES ($1, $9, $10)";

/// Test support: keeps bench lookups on one core, like the published comparison.
#[cfg(feature = "testkit")]
pub(crate) const NO_PARALLEL_WORKERS: &str = "SET max_parallel_workers_per_gather = 0";

/// Test support: undoes [`NO_PARALLEL_WORKERS`] before the connection goes back to the pool.
#[cfg(feature = "testkit")]
pub(crate) const RESET_PARALLEL_WORKERS: &str = "RESET max_parallel_workers_per_gather";

/// Test support: drops the anti-join's parent index inside a transaction that is rolled back,
/// which restores the index without a rebuild.
#[cfg(feature = "testkit")]
pub(crate) const DROP_PARENT_INDEX: &str = "DROP INDEX epoch_parent_space_parent_child";

/// The server process building index `c` (a `pg_class` row aliased `c`) in this database now,
/// if any: a column for the queries that report or repair an interrupted concurrent build.
macro_rules! index_builder {
    () => {
        "(SELECT p.pid FROM pg_catalog.pg_stat_progress_create_index p \
          WHERE p.index_relid = c.oid AND p.datid = (SELECT d.oid FROM pg_catalog.pg_database d \
          WHERE d.datname = pg_catalog.current_database()) LIMIT 1)"
    };
}
pub(crate) use index_builder;

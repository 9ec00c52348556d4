//! Every SQL statement the SQLite backend sends, as constants.
//!
//! Parameters are always bound (`?1`, `?2`, …); nothing here is assembled from input. The
//! schema itself comes from [`cairn_core::schema::epoch_log_ddl`], the one shared definition.

/// Starts a write transaction: takes SQLite's single writer lock up front, so two writers
/// (threads or processes) serialize here instead of failing on a lock upgrade later.
pub(crate) const BEGIN_IMMEDIATE: &str = "BEGIN IMMEDIATE";
/// Starts a read transaction; the snapshot is fixed by its first read.
pub(crate) const BEGIN_READ: &str = "BEGIN";
/// Commits the open transaction.
pub(crate) const COMMIT: &str = "COMMIT";
/// Rolls the open transaction back.
pub(crate) const ROLLBACK: &str = "ROLLBACK";
/// Opens one operation's savepoint inside a group commit's transaction.
pub(crate) const SAVEPOINT_OP: &str = "SAVEPOINT cairn_op";
/// Keeps the operation's writes in the group's transaction.
pub(crate) const RELEASE_OP: &str = "RELEASE cairn_op";
/// Undoes the operation's writes, leaving its neighbours' in the group's transaction.
pub(crate) const ROLLBACK_TO_OP: &str = "ROLLBACK TO cairn_op";

/// The append probe, in one statement: the space's largest seq and the id of the epoch there
/// (each a walk backwards down the unique `(space, seq)` index, O(log n)) next to every cached
/// head row. Always returns at least one row; with an empty cache `h.id` and `h.seq` are NULL.
/// Rows come in id byte order.
pub(crate) const PROBE: &str = "\
SELECT m.max_seq, m.max_id, h.id, h.seq
FROM (SELECT (SELECT seq FROM epoch WHERE space = ?1 ORDER BY seq DESC LIMIT 1) AS max_seq,
             (SELECT id FROM epoch WHERE space = ?1 ORDER BY seq DESC LIMIT 1) AS max_id) AS m
LEFT JOIN epoch_head AS h ON h.space = ?1
ORDER BY h.id";

/// The space's largest seq, or no row for an empty space.
pub(crate) const MAX_SEQ: &str = "SELECT seq FROM epoch WHERE space = ?1 ORDER BY seq DESC LIMIT 1";

/// The heads by anti-join: every epoch of the space that no edge names as a parent. Walks the
/// whole space (O(history)); the `(space, parent, child)` index makes each probe a seek.
pub(crate) const ANTI_JOIN_HEADS: &str = "\
SELECT e.id, e.seq
FROM epoch AS e
WHERE e.space = ?1
  AND NOT EXISTS (SELECT 1 FROM epoch_parent AS p WHERE p.space = ?1 AND p.parent = e.id)
ORDER BY e.id";

/// The cached head rows of a space, in id byte order, exactly as stored.
pub(crate) const CACHED_HEADS: &str = "SELECT id, seq FROM epoch_head WHERE space = ?1 ORDER BY id";

/// The seq of one epoch, or no row when the space does not hold it.
pub(crate) const EPOCH_SEQ: &str = "SELECT seq FROM epoch WHERE space = ?1 AND id = ?2";

/// Inserts an epoch.
pub(crate) const INSERT_EPOCH: &str = "INSERT INTO epoch (space, id, seq) VALUES (?1, ?2, ?3)";

/// Inserts one parent edge.
pub(crate) const INSERT_PARENT: &str =
    "INSERT INTO epoch_parent (space, parent, child) VALUES (?1, ?2, ?3)";

/// Inserts one event of an epoch.
pub(crate) const INSERT_EVENT: &str = "\
INSERT INTO epoch_event (space, seq, epoch_seq, epoch, event_id, kind, key, payload)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// Rewrites the space's only cached row to the new head.
pub(crate) const UPDATE_SOLE_HEAD: &str =
    "UPDATE epoch_head SET id = ?2, seq = ?3 WHERE space = ?1";

/// Inserts one cached head row.
pub(crate) const INSERT_HEAD: &str = "INSERT INTO epoch_head (space, id, seq) VALUES (?1, ?2, ?3)";

/// Drops every cached row of a space.
pub(crate) const DELETE_HEADS: &str = "DELETE FROM epoch_head WHERE space = ?1";

/// Drops one cached row.
pub(crate) const DELETE_HEAD: &str = "DELETE FROM epoch_head WHERE space = ?1 AND id = ?2";

/// The parents of one epoch, in id byte order.
pub(crate) const EPOCH_PARENTS: &str =
    "SELECT parent FROM epoch_parent WHERE space = ?1 AND child = ?2 ORDER BY parent";

/// The events of one epoch, in append order.
pub(crate) const EPOCH_EVENTS: &str = "\
SELECT kind, key, payload FROM epoch_event WHERE space = ?1 AND seq = ?2 ORDER BY epoch_seq";

/// A page of the space's epochs, newest first, in one statement: `max_seq` (the space's
/// largest seq, NULL for an empty space) on every row; then, for each of at most `?3` epochs
/// with `seq < ?2` (a walk backwards down the unique `(space, seq)` index), its id, seq and
/// event count (a range of `epoch_event`'s primary key), one row per parent in id byte order
/// (the `(space, child, parent)` primary key), or one row with a NULL parent for a root. With
/// no epoch in the page, one row whose other columns are NULL.
pub(crate) const RECENT_EPOCHS: &str = "\
SELECT m.max_seq, e.id, e.seq, e.events, p.parent
FROM (SELECT (SELECT seq FROM epoch WHERE space = ?1 ORDER BY seq DESC LIMIT 1) AS max_seq) AS m
LEFT JOIN (SELECT x.id, x.seq,
                  (SELECT count(*) FROM epoch_event AS v WHERE v.space = ?1 AND v.seq = x.seq)
                      AS events
           FROM epoch AS x
           WHERE x.space = ?1 AND x.seq < ?2
           ORDER BY x.seq DESC
           LIMIT ?3) AS e ON 1
LEFT JOIN epoch_parent AS p ON p.space = ?1 AND p.child = e.id
ORDER BY e.seq DESC, p.parent";

/// The feed: events after a seq, in `(seq, epoch_seq)` order (the primary key's order; a seq
/// names exactly one epoch). Read lazily, so a page stops reading where it ends.
pub(crate) const EVENTS_AFTER: &str = "\
SELECT seq, epoch_seq, epoch, event_id, kind, key, payload
FROM epoch_event
WHERE space = ?1 AND seq > ?2
ORDER BY seq, epoch_seq";

/// Space ids strictly after `?1` (bind an empty blob for the start), at most `?2` of them. A
/// recursive skip-scan: one index seek per space instead of walking every epoch.
pub(crate) const SPACES_AFTER: &str = "\
WITH RECURSIVE s(space, n) AS (
    SELECT (SELECT space FROM epoch WHERE space > ?1 ORDER BY space LIMIT 1), 1
    UNION ALL
    SELECT (SELECT space FROM epoch WHERE space > s.space ORDER BY space LIMIT 1), s.n + 1
    FROM s
    WHERE s.space IS NOT NULL AND s.n < ?2
)
SELECT space FROM s WHERE space IS NOT NULL";

/// Which of a list of ids the space holds, in one statement: `?2` is the ids' 32-byte forms
/// concatenated, `?3` how many there are; each is cut out (`substr` on a blob counts bytes)
/// and looked up by the `(space, id)` primary key.
pub(crate) const KNOWN_EPOCHS: &str = "\
WITH RECURSIVE ask(i) AS (
    SELECT 0 WHERE ?3 > 0
    UNION ALL
    SELECT i + 1 FROM ask WHERE i + 1 < ?3
)
SELECT e.id
FROM ask
JOIN epoch AS e ON e.space = ?1 AND e.id = substr(?2, ask.i * 32 + 1, 32)";

// Sync state (revision `0010_epoch_sync`; a store whose upgrade stopped before it has no such
// tables, and the store uses them only once it saw the revision).

/// Whether the store holds revision `0010_epoch_sync`.
pub(crate) const SYNC_APPLIED: &str = "\
SELECT count(*) FROM cairn_migration_lineage
WHERE set_name = 'cairn' AND revision = '0010_epoch_sync'";

/// The store's sync id, or no row before the first `store_id` call.
pub(crate) const STORE_ID: &str = "SELECT store_id FROM epoch_sync_self WHERE one = 1";

/// Stores a fresh sync id unless one is there already (a concurrent first call's).
pub(crate) const INSERT_STORE_ID: &str = "\
INSERT INTO epoch_sync_self (one, store_id) VALUES (1, ?1) ON CONFLICT (one) DO NOTHING";

/// Replaces the cursor kept for a peer in a space, its counters grown by `?5` epochs and `?6`
/// bytes.
pub(crate) const UPSERT_PEER: &str = "\
INSERT INTO epoch_sync_peer (space, peer, seq, id, epochs, bytes, updated_at_us)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (space, peer) DO UPDATE SET
    seq = excluded.seq,
    id = excluded.id,
    epochs = epoch_sync_peer.epochs + excluded.epochs,
    bytes = epoch_sync_peer.bytes + excluded.bytes,
    updated_at_us = excluded.updated_at_us";

/// The cursors kept for a space, by peer id.
pub(crate) const SYNC_PEERS: &str = "\
SELECT peer, seq, id, epochs, bytes, updated_at_us
FROM epoch_sync_peer
WHERE space = ?1
ORDER BY peer";

/// The database's own tables (SQLite's internal ones left out).
pub(crate) const USER_TABLES: &str =
    "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_compile_against_the_shared_schema() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        for ddl in cairn_core::schema::epoch_log_ddl(cairn_core::schema::Dialect::Sqlite) {
            conn.execute_batch(&ddl).unwrap();
        }
        for sql in [
            PROBE,
            MAX_SEQ,
            ANTI_JOIN_HEADS,
            CACHED_HEADS,
            EPOCH_SEQ,
            INSERT_EPOCH,
            INSERT_PARENT,
            INSERT_EVENT,
            UPDATE_SOLE_HEAD,
            INSERT_HEAD,
            DELETE_HEADS,
            DELETE_HEAD,
            EPOCH_PARENTS,
            EPOCH_EVENTS,
            EVENTS_AFTER,
            RECENT_EPOCHS,
            SPACES_AFTER,
        ] {
            conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }

    fn sync_schema() -> rusqlite::Connection {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        for ddl in cairn_core::schema::epoch_log_ddl(cairn_core::schema::Dialect::Sqlite) {
            conn.execute_batch(&ddl).unwrap();
        }
        let set = cairn_migrate::cairn_set();
        let sync = set
            .revisions()
            .iter()
            .find(|r| r.id == cairn_migrate::SYNC_REVISION)
            .unwrap();
        for stmt in sync.up(cairn_core::schema::Dialect::Sqlite) {
            conn.execute_batch(stmt).unwrap();
        }
        conn
    }

    #[test]
    fn sync_statements_compile_against_revision_0010() {
        let conn = sync_schema();
        for sql in [
            STORE_ID,
            INSERT_STORE_ID,
            UPSERT_PEER,
            SYNC_PEERS,
            KNOWN_EPOCHS,
        ] {
            conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }

    #[test]
    fn known_epochs_seeks_the_primary_key_per_id() {
        let conn = sync_schema();
        let known = plan(&conn, KNOWN_EPOCHS);
        assert!(!known.contains("SCAN e"), "{known}");
        assert!(known.contains("SEARCH e USING"), "{known}");
    }

    fn plan(conn: &rusqlite::Connection, sql: &str) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let n = stmt.parameter_count();
        let params: Vec<Vec<u8>> = (0..n).map(|_| b"s".to_vec()).collect();
        let rows = stmt
            .query_map(rusqlite::params_from_iter(params), |r| {
                r.get::<_, String>(3)
            })
            .unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn probe_and_anti_join_use_their_indexes() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        for ddl in cairn_core::schema::epoch_log_ddl(cairn_core::schema::Dialect::Sqlite) {
            conn.execute_batch(&ddl).unwrap();
        }
        let probe = plan(&conn, PROBE);
        assert!(probe.contains("epoch_space_seq"), "{probe}");
        assert!(!probe.contains("SCAN epoch "), "{probe}");
        let anti = plan(&conn, ANTI_JOIN_HEADS);
        assert!(anti.contains(cairn_core::schema::PARENT_INDEX), "{anti}");
    }

    #[test]
    fn recent_epochs_walks_the_seq_index_and_the_primary_keys() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        for ddl in cairn_core::schema::epoch_log_ddl(cairn_core::schema::Dialect::Sqlite) {
            conn.execute_batch(&ddl).unwrap();
        }
        let recent = plan(&conn, RECENT_EPOCHS);
        assert!(recent.contains("epoch_space_seq"), "{recent}");
        assert!(recent.contains("epoch_parent"), "{recent}");
        for scan in ["SCAN epoch ", "SCAN x", "SCAN v", "SCAN p"] {
            assert!(!recent.contains(scan), "{scan}: {recent}");
        }
    }
}

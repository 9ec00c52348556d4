//! The statements of the executed lock check. No identifier is spliced in: the probe's
//! statements are built server-side from a table's oid (`format('%s', oid::regclass)`).

/// The session's backend pid.
pub(super) const BACKEND_PID: &str = "SELECT pg_backend_pid()";

/// Bounds the revision's session (`$1`: only for the current transaction): every statement
/// within 60 s, every lock wait within 10 s, and no parallel index build (each worker would
/// count its scans on its own).
pub(super) const REVISION_SESSION: &str = "SELECT set_config('statement_timeout', '60000', $1), \
    set_config('lock_timeout', '10000', $1), set_config('max_parallel_maintenance_workers', '0', $1)";

/// The probe session: it gives up on a lock after `$1` ms, and user triggers do not fire for
/// its writes (which change nothing, and are rolled back).
pub(super) const PROBE_SESSION: &str = "SELECT set_config('lock_timeout', $1, false), \
    set_config('session_replication_role', 'replica', false)";

/// The probe's read and write of table `$1`: a one-row read, and a `DELETE` that takes a
/// writer's lock and deletes nothing.
pub(super) const PROBE_STATEMENTS: &str =
    "SELECT format('SELECT 1 FROM %s LIMIT 1', $1::int8::oid::regclass), \
    format('DELETE FROM %s WHERE false', $1::int8::oid::regclass)";

/// Per table of `$1`: its file node, its indexes each as `oid:filenode`, and the sequential
/// scans counted on it in the current transaction (not yet flushed to the statistics, so
/// exact between two statements of one transaction).
pub(super) const TABLE_STATE: &str = "SELECT c.oid::int8, c.relfilenode::int8, \
    ARRAY(SELECT i.indexrelid::text || ':' || ic.relfilenode::text FROM pg_index i \
      JOIN pg_class ic ON ic.oid = i.indexrelid WHERE i.indrelid = c.oid ORDER BY 1), \
    coalesce(pg_stat_get_xact_numscans(c.oid), 0)::int8 \
    FROM pg_class c WHERE c.oid::int8 = ANY($1)";

/// The table locks session `$1` holds or waits for on the tables `$2`, with the mode.
pub(super) const SESSION_LOCKS: &str = "SELECT l.relation::int8, l.mode::text FROM pg_locks l \
    WHERE l.pid = $1 AND l.locktype = 'relation' \
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
    AND l.relation::int8 = ANY($2)";

/// Whether session `$1` is waiting for a lock.
pub(super) const WAITING: &str =
    "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1";

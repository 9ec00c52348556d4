//! The migration lock's and the upgrade transaction's statements; the stamp and lineage
//! statements are [`cairn_migrate::bookkeeping`]'s, and the fleet registry's
//! [`cairn_migrate::fleet`]'s, shared with every backend.

pub(super) const TRY_LOCK: &str = "SELECT pg_catalog.pg_try_advisory_lock($1)";
pub(super) const UNLOCK: &str = "SELECT pg_catalog.pg_advisory_unlock($1)";

/// The lock behind a transaction-mode pooler, which keeps no session: held by the upgrade
/// transaction (the checkout's, see `crate::pooler`) until it ends.
pub(super) const TRY_XACT_LOCK: &str = "SELECT pg_catalog.pg_try_advisory_xact_lock($1)";

/// Marks the upgrade transaction with a transaction-local setting, which is gone once the
/// transaction ends by any means (a revision's COMMIT, ROLLBACK, END or ABORT included).
pub(super) const MARK_OPEN: &str =
    "SELECT pg_catalog.set_config('cairn.migration_open', 'on', true)";

/// Whether the marked transaction is still the session's transaction.
pub(super) const IS_OPEN: &str =
    "SELECT coalesce(pg_catalog.current_setting('cairn.migration_open', true), '') = 'on'";

/// Whether the role may create temporary objects (the commit guard is one).
pub(super) const CAN_USE_TEMP: &str =
    "SELECT pg_catalog.has_database_privilege(pg_catalog.current_database(), 'TEMP')";

/// The commit guard: a deferred constraint trigger on a temporary row that fails any
/// COMMIT while the row is armed, so a COMMIT issued by a revision rolls the whole upgrade
/// back instead of committing half of it. Temporary objects of this session only; the
/// table goes at commit, the function with the session (closed right after).
pub(super) const GUARD: [&str; 4] = [
    "CREATE TEMP TABLE cairn_commit_guard (armed boolean NOT NULL) ON COMMIT DROP",
    "CREATE OR REPLACE FUNCTION pg_temp.cairn_commit_guard() RETURNS trigger LANGUAGE plpgsql AS $f$ \
     BEGIN IF (SELECT armed FROM pg_temp.cairn_commit_guard) THEN \
     RAISE EXCEPTION 'a revision statement tried to commit cairn''s migration transaction' \
     USING ERRCODE = '25000'; END IF; RETURN NULL; END $f$",
    "CREATE CONSTRAINT TRIGGER cairn_commit_guard AFTER INSERT ON pg_temp.cairn_commit_guard \
     DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION pg_temp.cairn_commit_guard()",
    "INSERT INTO pg_temp.cairn_commit_guard VALUES (true)",
];

/// Lets the runner's own COMMIT through the guard.
pub(super) const DISARM: &str = "UPDATE pg_temp.cairn_commit_guard SET armed = false";

/// Lets the server notice, within a second, that the client of a long statement (a concurrent
/// index build) is gone, and stop it (Postgres 14 and later; older servers refuse it).
pub(super) const CLIENT_CHECK_INTERVAL: &str = "SET client_connection_check_interval = 1000";

/// Index `$1` in schema `$2` (NULL: the current schema): its quoted qualified name, whether it
/// is valid, and the server process building it now in this database, if any.
pub(super) const INDEX_BUILD_STATE: &str = concat!(
    "\
SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname), \
    i.indisvalid, \
    ",
    crate::sql::index_builder!(),
    " \
FROM pg_catalog.pg_class c \
JOIN pg_catalog.pg_index i ON i.indexrelid = c.oid \
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
WHERE c.relname = $1 AND n.nspname = COALESCE($2, pg_catalog.current_schema())"
);

/// The upgrade transaction's `lock_timeout`: `$1` milliseconds (text).
pub(super) const SET_LOCAL_LOCK_TIMEOUT: &str =
    "SELECT pg_catalog.set_config('lock_timeout', $1, true)";

/// The invalid `_ccnew`/`_ccold` indexes an interrupted `REINDEX … CONCURRENTLY` left: of index
/// `$1` (`$3` false) or of every index of table `$1` (`$3` true), in schema `$2` (NULL: the
/// current schema); each quoted and qualified, with the process building it now, if any.
pub(super) const REINDEX_LEFTOVERS: &str = concat!(
    "\
SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname), \
    ",
    crate::sql::index_builder!(),
    " \
FROM pg_catalog.pg_index i \
JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid \
JOIN pg_catalog.pg_class t ON t.oid = i.indrelid \
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
WHERE NOT i.indisvalid AND n.nspname = COALESCE($2, pg_catalog.current_schema()) \
    AND c.relname ~ '_cc(new|old)[0-9]*$' \
    AND CASE WHEN $3 THEN t.relname = $1 \
        ELSE pg_catalog.left(c.relname, pg_catalog.length($1) + 3) = $1 || '_cc' END"
);

/// This connection's database, whatever address reached it: the server's start time (to the
/// microsecond) and the database's oid.
pub(super) const DATABASE_IDENTITY: &str = "\
SELECT pg_catalog.pg_postmaster_start_time()::text || ' ' || d.oid::text \
FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()";

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

//! Read-only diagnostics of a store's location, for `cairn doctor` and for any tool that must
//! look at a store it may not open: a [`Diagnostics`] handle says whether the store is intact
//! ([`Diagnostics::integrity`]) and which throwaway stores of the executed additivity check
//! were left behind by checks that no longer run ([`Diagnostics::scratch_leftovers`]).
//!
//! A backend builds a handle from a location alone (a file path, connect options), like its
//! migrator, so that a damaged, missing or unopenable store can still be diagnosed; an open
//! store hands out its own. Nothing here creates, migrates or repairs anything.
//!
//! [`cairn_tables`] and [`tables_integrity`] are the backend-independent half of a catalog
//! check: the tables cairn's own migration set creates, up to the revision a store's stamp
//! names, compared with the tables a backend found.

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::Result;

use crate::cairn_set::cairn_set;

/// What an integrity check found. Each `detail` is one line in the engine's terms, without
/// URLs, hosts or stored data. Exhaustive on purpose: a new kind of finding must be given words
/// by every tool that reports it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Integrity {
    /// Nothing wrong found; `detail` says what was checked (e.g. `quick_check: ok`).
    Intact {
        /// What was checked.
        detail: String,
    },
    /// There is no store at the location (SQLite: no file; Postgres: none of cairn's tables in
    /// the schema). Not damage: the first writing open creates the store.
    Missing,
    /// The store is damaged, or is not a store of this engine: `detail` says what was found.
    Damaged {
        /// What was found.
        detail: String,
    },
    /// The store could not be read because its storage cannot be written where the engine
    /// needs to (SQLite cannot open a WAL store, even to read, where it cannot create the
    /// shared-memory file beside it). Nothing says it is damaged; `detail` says why.
    ReadOnly {
        /// Why the store is read-only, and the engine's error.
        detail: String,
    },
    /// The store's server could not be reached: nothing was checked. No detail is given, since
    /// the driver's message may name the host.
    Unreachable,
    /// The check did not run to its end, for a reason that says nothing about the store.
    Unchecked {
        /// What failed.
        detail: String,
    },
}

impl Integrity {
    /// Whether the check found the store intact.
    pub fn is_intact(&self) -> bool {
        matches!(self, Self::Intact { .. })
    }
}

/// Read-only diagnostics of one store location.
///
/// Contract, for every implementation:
/// - **Read-only.** No method creates, migrates, repairs or removes anything, nor takes a lock
///   another process could wait on; a missing store stays missing.
/// - **Works without an open store.** A handle built from a location answers for a store that
///   is damaged, missing or refused by the migration runner; it connects (if at all) only for
///   the duration of a call.
/// - **Non-blocking.** Methods run blocking work off the async executor.
/// - **Quiet about secrets.** Details never carry a URL, a host, a password or stored data.
#[async_trait]
pub trait Diagnostics: Send + Sync {
    /// The engine's name (`sqlite`, `postgres`, …).
    fn engine(&self) -> &str;

    /// Whether the store at the location is intact: an engine-level check of its storage
    /// (SQLite: `PRAGMA quick_check` on a read-only connection) or of its catalog (Postgres:
    /// every table cairn's revisions up to the store's stamp create, see
    /// [`tables_integrity`]). Failures to check are [`Integrity::Unreachable`] or
    /// [`Integrity::Unchecked`], never an error.
    async fn integrity(&self) -> Integrity;

    /// The throwaway stores of the executed additivity check (`cairn migrate check`) that no
    /// running check owns, by name, sorted: what a killed check left behind and the next check
    /// on the same machine or server removes. Where they are looked for is the engine's: the
    /// SQLite engine's scratch directories are in this machine's temporary directory, whatever
    /// the store's path; the Postgres engine's scratch schemas are in the database the location
    /// names. Which names are scratch stores, and when a check owns one, is decided by the
    /// engine that makes them, in one place.
    ///
    /// # Errors
    /// When the place cannot be listed (e.g. the server cannot be reached).
    async fn scratch_leftovers(&self) -> Result<Vec<String>>;

    /// The bytes free for the store to grow into, where the engine can read them without
    /// writing: SQLite's, the space available to this user on the file system holding the
    /// file. `None` where the engine cannot see them (the default; Postgres: the disk is the
    /// database server's).
    ///
    /// # Errors
    /// When the file system cannot be asked.
    async fn free_space(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// The invalid indexes of the store's schema, by name: what an interrupted `CREATE INDEX
    /// CONCURRENTLY` of a no-transaction revision leaves
    /// ([`crate::MigrationSet::with_no_transaction`]), each with the server process building
    /// it now, if any. None where the engine has no such indexes (the default; SQLite).
    ///
    /// # Errors
    /// When the catalog cannot be read (e.g. the server cannot be reached).
    async fn invalid_indexes(&self) -> Result<Vec<InvalidIndex>> {
        Ok(Vec::new())
    }
}

/// An invalid index ([`Diagnostics::invalid_indexes`]): Postgres keeps it up to date on
/// writes but never reads it, until it is dropped and built again.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct InvalidIndex {
    /// The index, schema-qualified and quoted as SQL needs it.
    pub name: String,
    /// Its table, schema-qualified and quoted.
    pub table: String,
    /// The server process building it now (in the store's database), if any.
    pub building: Option<i32>,
}

impl InvalidIndex {
    /// What to do about it, in one line.
    pub fn repair(&self) -> String {
        match self.building {
            Some(pid) => format!(
                "a build of it is still running (server process {pid}): wait for it to end, or \
                 stop it with SELECT pg_cancel_backend({pid}); then `cairn migrate up` drops it \
                 before it runs the statement that made it again"
            ),
            None => format!(
                "no build of it is running: the next `cairn migrate up` drops it before it runs \
                 the statement that made it again, or drop it yourself with DROP INDEX \
                 CONCURRENTLY {}",
                self.name
            ),
        }
    }
}

/// The tables `statements` create (`CREATE TABLE [IF NOT EXISTS] name`,
/// unquoted and without a schema), in order.
fn created_tables<'a>(statements: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let mut tables = Vec::new();
    for statement in statements {
        let code: String = statement
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join(" ");
        let words: Vec<&str> = code.split_whitespace().collect();
        let is = |i: usize, w: &str| words.get(i).is_some_and(|x| x.eq_ignore_ascii_case(w));
        if !(is(0, "CREATE") && is(1, "TABLE")) {
            continue;
        }
        let at = if is(2, "IF") && is(3, "NOT") && is(4, "EXISTS") {
            5
        } else {
            2
        };
        let Some(name) = words.get(at) else { continue };
        let name = name.split('(').next().unwrap_or_default();
        let name = name
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .trim_matches('"');
        if !name.is_empty() {
            tables.push(name.to_owned());
        }
    }
    tables
}

/// The tables cairn's own migration set creates in `dialect`, through revision `stamp` (the
/// store's stamp of the `cairn` set), or through this build's head when `stamp` is none or a
/// revision this build does not know (a newer build's store holds every table of this build's
/// revisions: revisions after the first are additive).
pub fn cairn_tables(dialect: Dialect, stamp: Option<&str>) -> Vec<String> {
    let set = cairn_set();
    let through = stamp
        .and_then(|s| set.position(s))
        .unwrap_or(set.revisions().len() - 1);
    created_tables(
        set.revisions()[..=through]
            .iter()
            .flat_map(|r| r.up(dialect)),
    )
}

/// The catalog check: the store whose stamp of the `cairn` set is `stamp` and whose schema
/// holds the tables `present` is intact when it holds every table of [`cairn_tables`], missing
/// when it holds none of them, and damaged otherwise (the missing ones named).
pub fn tables_integrity(dialect: Dialect, stamp: Option<&str>, present: &[String]) -> Integrity {
    let expected = cairn_tables(dialect, stamp);
    let missing: Vec<&str> = expected
        .iter()
        .filter(|t| !present.contains(t))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        Integrity::Intact {
            detail: "every cairn table is present".into(),
        }
    } else if missing.len() == expected.len() {
        Integrity::Missing
    } else {
        Integrity::Damaged {
            detail: format!("missing tables: {}", missing.join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST_THREE: [&str; 8] = [
        "epoch",
        "epoch_parent",
        "epoch_event",
        "epoch_head",
        "spool_run",
        "spool_event",
        "spool_fact",
        "spool_import",
    ];

    #[test]
    fn cairns_tables_come_from_its_revisions_in_both_dialects() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let mut all: Vec<&str> = FIRST_THREE.to_vec();
            all.extend(["cairn_fleet", "cairn_contract"]);
            if dialect == Dialect::Postgres {
                // 0007_spool_ready: Postgres's narrow queue table; SQLite's spool keeps one.
                all.push("spool_ready");
            }
            all.extend(["spool_queue", "spool_claim_tick", "spool_schedule"]);
            all.extend(["epoch_sync_self", "epoch_sync_peer"]);
            assert_eq!(cairn_tables(dialect, None), all, "{dialect:?}");
            assert_eq!(
                cairn_tables(dialect, Some("0003_spool_import")),
                FIRST_THREE,
                "{dialect:?}"
            );
            assert_eq!(cairn_tables(dialect, Some("0001_epoch_log")).len(), 4);
            assert_eq!(
                cairn_tables(dialect, Some("9999_from_a_newer_build")),
                all,
                "an unknown stamp expects every table this build knows"
            );
        }
    }

    #[test]
    fn create_table_is_read_with_and_without_quotes_and_if_not_exists() {
        let statements = [
            "-- a comment naming CREATE TABLE x\nCREATE TABLE IF NOT EXISTS \"a\" ( x int )",
            "create table b(x int)",
            "CREATE TABLE s.c (x int)",
            "CREATE INDEX d ON a (x)",
            "INSERT INTO a VALUES (1)",
        ]
        .map(String::from);
        assert_eq!(created_tables(&statements), ["a", "b", "c"]);
    }

    #[test]
    fn the_catalog_check_tells_intact_missing_and_damaged_apart() {
        let d = Dialect::Postgres;
        let stamp = Some("0003_spool_import");
        let all: Vec<String> = FIRST_THREE.iter().map(|t| (*t).to_owned()).collect();
        assert!(tables_integrity(d, stamp, &all).is_intact());
        assert_eq!(tables_integrity(d, None, &[]), Integrity::Missing);
        assert_eq!(
            tables_integrity(d, stamp, &["unrelated".to_owned()]),
            Integrity::Missing
        );
        let some: Vec<String> = all[..6].to_vec();
        assert_eq!(
            tables_integrity(d, stamp, &some),
            Integrity::Damaged {
                detail: "missing tables: spool_fact, spool_import".into()
            }
        );
        assert_eq!(
            tables_integrity(d, None, &all),
            Integrity::Damaged {
                detail: "missing tables: cairn_fleet, cairn_contract, spool_ready, spool_queue, spool_claim_tick, spool_schedule, epoch_sync_self, epoch_sync_peer".into()
            },
            "without a stamp, every table of this build is expected"
        );
    }
}

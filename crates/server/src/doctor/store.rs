//! The store's own health: room to write, readiness, integrity and the additivity check's
//! scratch leftovers.

use cairn::migrate::{Diagnostics, Integrity};
use cairn::{DatabaseUrl, Scheme};

use super::check::{one, Check};

/// Below this many bytes free on the file system of a SQLite store, doctor reports a problem.
pub(super) const LOW_SPACE: u64 = 1 << 20;

/// The store's room to write: writes a running server saw refused for a full store
/// (`refused`), and for SQLite the free space of the file system that holds the file. A problem
/// when a refusal is current or fewer than [`LOW_SPACE`] bytes are free; a warning when the
/// last refusal is past the server's hold and no write has shown since whether there is room.
/// Nothing for a Postgres store outside a server: its disk is the database server's, and a
/// read-only check cannot see it.
pub(super) async fn storage(
    target: &DatabaseUrl,
    own: Option<&dyn Diagnostics>,
    refused: Option<&crate::serve::storage::Refusals>,
) -> Option<Check> {
    const NAME: &str = "storage";
    const REPAIR: &str = "free disk space on the store's volume (or grow it); writes answer 503 \
                          storage_full until a write fits again";
    if let Some(r) = refused.filter(|r| r.current) {
        return Some(Check::problem(NAME, r.describe(), Some(REPAIR)));
    }
    let free = match own {
        Some(own) => own.free_space().await,
        None => match cairn::migrate::diagnostics(target) {
            Ok(d) => d.free_space().await,
            Err(e) => Err(e),
        },
    };
    match (free, refused) {
        (Ok(Some(n)), _) if n < LOW_SPACE => Some(Check::problem(
            NAME,
            format!(
                "the file system holding the store has {n} bytes free (below {LOW_SPACE}); \
                 writes will fail"
            ),
            Some(REPAIR),
        )),
        (_, Some(r)) => Some(Check::warning(
            NAME,
            format!(
                "{}; more than {}s ago, so not counted as full now",
                r.describe(),
                crate::serve::storage::HOLD.as_secs()
            ),
            REPAIR,
        )),
        (Ok(Some(n)), None) => Some(Check::ok(
            NAME,
            format!("{n} bytes free on the file system holding the store"),
        )),
        (Err(e), None) => Some(Check::warning(
            NAME,
            format!(
                "cannot read the free space of the store's file system: {}",
                one(&e.report().to_string())
            ),
            "check the store's directory",
        )),
        (Ok(None), None) if own.is_some() => Some(Check::ok(
            NAME,
            "no write was refused for a full store (the database server's free space is not \
             visible from here)",
        )),
        (Ok(None), None) => None,
    }
}

/// A running server's store handle is still usable (`EpochDiagnostics::check_ready`, what
/// `/readyz` asks): for SQLite, the store file and its `-wal` file at the path are still the
/// ones the server opened — a file replaced under the server is a problem only a restart
/// repairs.
pub(super) async fn ready(diagnostics: &dyn cairn::EpochDiagnostics) -> Check {
    match diagnostics.check_ready().await {
        Ok(()) => Check::ok(
            "ready",
            "the store the server opened answers and is still at its path",
        ),
        Err(e) => {
            let replaced = matches!(e, cairn::Error::StoreReplaced { .. });
            Check::problem(
                "ready",
                crate::error::one_line(&e.report().to_string()),
                replaced.then_some("restart cairn serve so that it opens the file now at the path"),
            )
        }
    }
}

/// The store's integrity, as its backend's diagnostics find it (SQLite: `PRAGMA quick_check`
/// on a read-only connection; Postgres: every table cairn's revisions up to the store's stamp
/// create, in the store's schema): a running server's store's own (`own`), or, without one,
/// asked without opening the store.
pub(super) async fn integrity(target: &DatabaseUrl, own: Option<&dyn Diagnostics>) -> Check {
    let found = match own {
        Some(own) => own.integrity().await,
        None => match cairn::migrate::diagnostics(target) {
            Ok(diagnostics) => diagnostics.integrity().await,
            Err(e) => return Check::problem("integrity", one(&e.report().to_string()), None),
        },
    };
    integrity_check(target.scheme(), found)
}

/// The check, with the binary's words, for what the backend's diagnostics found.
pub(super) fn integrity_check(backend: Scheme, found: Integrity) -> Check {
    const DAMAGED: &str = "restore the store from a backup, or point --database at the right store";
    const NAME: &str = "integrity";
    match found {
        Integrity::Intact { detail } => Check::ok(NAME, one(&detail)),
        Integrity::Missing => match backend {
            Scheme::Sqlite => Check::problem(
                NAME,
                "no store file here; the first `cairn append` creates it",
                None,
            ),
            _ => Check::problem(
                NAME,
                "no cairn table in this schema: not a cairn store yet; any writing command \
                 (e.g. `cairn migrate up`) creates it",
                Some("cairn migrate up"),
            ),
        },
        Integrity::Damaged { detail } => {
            Check::problem(NAME, format!("{}; {DAMAGED}", one(&detail)), None)
        }
        Integrity::ReadOnly { detail } => Check::problem(
            NAME,
            format!(
                "{}; nothing says it is damaged: make it writable (e.g. remount the file system \
                 read-write) or copy the store to a writable directory, and run doctor again",
                one(&detail)
            ),
            None,
        ),
        Integrity::Unreachable => Check::problem(
            NAME,
            format!(
                "cannot connect to the {} server; check that it runs and that --database names it",
                match backend {
                    Scheme::Postgres => "Postgres",
                    _ => "store's",
                }
            ),
            None,
        ),
        Integrity::Unchecked { detail } => Check::problem(NAME, one(&detail), None),
    }
}

/// The store's invalid indexes (what an interrupted `CREATE INDEX CONCURRENTLY` of a
/// no-transaction revision leaves; Postgres only): a warning while a build of one is running,
/// a problem when none is (the revision that builds it is not applied, and writes keep paying
/// for the index), each with its repair.
pub(super) async fn indexes(target: &DatabaseUrl, own: Option<&dyn Diagnostics>) -> Check {
    const NAME: &str = "indexes";
    let found = match own {
        Some(own) => own.invalid_indexes().await,
        None => match cairn::migrate::diagnostics(target) {
            Ok(d) => d.invalid_indexes().await,
            Err(e) => return Check::problem(NAME, one(&e.report().to_string()), None),
        },
    };
    let invalid = match found {
        Ok(invalid) => invalid,
        Err(e) => {
            return Check::problem(
                NAME,
                format!("cannot list the store's indexes: {}", one(&e.to_string())),
                None,
            )
        }
    };
    if invalid.is_empty() {
        return Check::ok(NAME, "no invalid index");
    }
    let detail = format!(
        "invalid index(es), left by an interrupted or running concurrent build: {}",
        invalid
            .iter()
            .map(|i| match i.building {
                Some(pid) => format!(
                    "{} on {} (being built by server process {pid})",
                    i.name, i.table
                ),
                None => format!("{} on {}", i.name, i.table),
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    let repair: Vec<String> = invalid
        .iter()
        .map(|i| format!("{}: {}", i.name, i.repair()))
        .collect();
    if invalid.iter().all(|i| i.building.is_some()) {
        Check::warning(NAME, one(&detail), &one(&repair.join("; ")))
    } else {
        Check::problem(NAME, one(&detail), Some(&one(&repair.join("; "))))
    }
}

/// Environment variable naming the scratch Postgres server of `cairn migrate check`.
pub(super) const SCRATCH_POSTGRES_ENV: &str = "CAIRN_CHECK_POSTGRES_URL";

/// Leftovers of `cairn migrate check` that no running check owns, as the backends' diagnostics
/// list them (each engine decides which names are its scratch stores and when a check owns
/// one): the SQLite engine's scratch directories in this machine's temporary directory, and
/// the Postgres engine's scratch schemas on the scratch server (`CAIRN_CHECK_POSTGRES_URL`),
/// or, without one, in a Postgres store's own database (asked of a running server's store's
/// own diagnostics, `own`, when there are). Read-only: nothing is removed; the next `cairn
/// migrate check` on the same machine or server removes them.
pub(super) async fn scratch(target: &DatabaseUrl, own: Option<&dyn Diagnostics>) -> Check {
    let mut found = Vec::new();
    let mut repairs = Vec::new();
    // A SQLite handle lists the SQLite engine's leftovers of this machine, whatever its path.
    let local = DatabaseUrl::Sqlite(std::env::temp_dir());
    let dirs = match cairn::migrate::diagnostics(&local) {
        Ok(d) => d.scratch_leftovers().await.unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    if !dirs.is_empty() {
        found.push(format!(
            "{} director(ies) in the temporary directory: {}",
            dirs.len(),
            dirs.join(", ")
        ));
        repairs.push("cairn migrate check --backend sqlite");
    }
    let (server, repair) = match (std::env::var(SCRATCH_POSTGRES_ENV).ok(), target) {
        (Some(url), _) => (
            Some(DatabaseUrl::parse(&url).map(|u| (u, None))),
            "cairn migrate check --backend postgres",
        ),
        (None, DatabaseUrl::Postgres { .. }) => (
            Some(Ok((target.clone(), own))),
            // The check refuses its own store's database as its scratch server, so it is run
            // for another store (the default one, without --database).
            "cairn migrate check --backend postgres --postgres-url URL (URL: this database; \
             without --database)",
        ),
        (None, DatabaseUrl::Sqlite(_)) => (None, ""),
    };
    if let Some(server) = server {
        let listed = match server {
            Ok((_, Some(own))) => own.scratch_leftovers().await.ok(),
            Ok((url, None)) if url.scheme() == Scheme::Postgres => {
                match cairn::migrate::diagnostics(&url) {
                    Ok(d) => d.scratch_leftovers().await.ok(),
                    Err(_) => None,
                }
            }
            _ => None,
        };
        match listed {
            Some(schemas) if !schemas.is_empty() => {
                found.push(format!(
                    "{} schema(s) on the Postgres scratch server: {}",
                    schemas.len(),
                    schemas.join(", ")
                ));
                repairs.push(repair);
            }
            Some(_) => {}
            None => {
                return Check::problem(
                    "scratch",
                    "cannot list the Postgres server's schemas to look for leftover check schemas",
                    None,
                )
            }
        }
    }
    if found.is_empty() {
        Check::ok("scratch", "no leftover additivity-check scratch store")
    } else {
        Check::problem(
            "scratch",
            format!(
                "leftovers of the additivity check that no running check owns: {}",
                found.join("; ")
            ),
            Some(&repairs.join("; ")),
        )
    }
}

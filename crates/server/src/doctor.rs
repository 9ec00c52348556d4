//! `cairn doctor [--json]`: a read-only health report of a store, with the command that repairs
//! each problem found.
//!
//! Read-only: the migration state is read without the lock, and the store is opened (for the
//! spool counts and the head-cache sample) only when cairn's set is at this build's head or
//! ahead, where opening writes nothing. A store that is behind is reported as such, not
//! upgraded.

use std::io::Write;

use cairn::backfill::probe;
use cairn::migrate::{Classification, MigrationSet, Migrations};
use cairn::migrate::{Diagnostics, Integrity};
use cairn::{DatabaseUrl, RunState, Scheme};
use serde::Serialize;

use crate::error::CliError;
use crate::open::{open, IfMissing};

/// The commands that show parked runs and why each was parked, and that retry or discard them.
const PARKED_REPAIR: &str =
    "cairn runs --state parked; cairn run show ID; then cairn run retry ID \
     (or every parked run of a queue: cairn runs retry --queue Q --state parked \
     [--reason-like TEXT]) or cairn run discard ID";

/// Below this many bytes free on the file system of a SQLite store, doctor reports a problem.
const LOW_SPACE: u64 = 1 << 20;

/// How many spaces the head-cache check samples (in id order).
const HEAD_SAMPLE: usize = 1000;

/// How much a check's finding matters.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Level {
    /// Nothing to do.
    Ok,
    /// Something wants an operator's look, but the store is healthy (parked runs up to
    /// `doctor.parked_threshold`).
    Warning,
    /// The store is unhealthy: `cairn doctor` exits 1, `/v1/doctor` answers 503.
    Problem,
}

/// One check's result.
#[derive(Serialize, Debug)]
pub(crate) struct Check {
    /// What was checked (`integrity`, `migrations:cairn`, `storage`, `ready`, `spool`,
    /// `head_caches`, `retention`).
    pub(crate) name: String,
    /// Whether it found no problem (a warning is ok: the store is healthy).
    pub(crate) ok: bool,
    /// `ok`, `warning` or `problem`: what `ok` says, with warnings told apart.
    pub(crate) level: Level,
    /// What was found, without URLs, payloads or space ids.
    pub(crate) detail: String,
    /// The command that repairs the problem, when one exists.
    pub(crate) repair: Option<String>,
}

impl Check {
    fn ok(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ok: true,
            level: Level::Ok,
            detail: detail.into(),
            repair: None,
        }
    }
    fn warning(name: impl Into<String>, detail: impl Into<String>, repair: &str) -> Self {
        Self {
            name: name.into(),
            ok: true,
            level: Level::Warning,
            detail: detail.into(),
            repair: Some(repair.to_owned()),
        }
    }
    fn problem(name: impl Into<String>, detail: impl Into<String>, repair: Option<&str>) -> Self {
        Self {
            name: name.into(),
            ok: false,
            level: Level::Problem,
            detail: detail.into(),
            repair: repair.map(str::to_owned),
        }
    }
}

/// The whole report.
#[derive(Serialize, Debug)]
pub(crate) struct Report {
    /// No check found a problem.
    pub(crate) healthy: bool,
    /// The checks, in the order they ran.
    pub(crate) checks: Vec<Check>,
}

/// What a running server hands doctor: its own handles on the open store.
pub(crate) struct Serving<'a> {
    /// The store's spool.
    pub(crate) spool: &'a dyn cairn::Spool,
    /// The store's epoch-log diagnostics.
    pub(crate) diagnostics: &'a dyn cairn::EpochDiagnostics,
    /// The store's own diagnostics (integrity, scratch leftovers), on its connections.
    pub(crate) store: &'a dyn Diagnostics,
    /// The store's migration state, on its own connections (no connection of its own per
    /// request).
    pub(crate) migrations: &'a Migrations,
    /// Writes the server saw refused because the store's storage is full, since the last
    /// write that stored something.
    pub(crate) storage: Option<crate::serve::storage::Refusals>,
}

/// What the configuration says is too much.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// `spool.retention_max_bytes`: the cap on run-event bytes.
    pub(crate) retention_cap: u64,
    /// `doctor.parked_threshold`: more parked runs than this are a problem (none: never).
    pub(crate) parked_threshold: Option<u64>,
}

/// Runs every check against `target`. `app` is an application's set to report on as well.
/// With `serving`, the store checks use a running server's handles instead of opening the
/// store again.
pub(crate) async fn report(
    target: &DatabaseUrl,
    app: Option<MigrationSet>,
    limits: Limits,
    serving: Option<Serving<'_>>,
) -> Report {
    let mut checks = Vec::new();
    let own = serving.as_ref().map(|s| s.store);
    let integrity = integrity(target, own).await;
    let intact = integrity.ok;
    checks.push(integrity);
    checks.push(scratch(target, own).await);
    let mut openable = false;
    if intact {
        let mut sets = vec![cairn::migrate::cairn_set()];
        sets.extend(app);
        for (i, set) in sets.into_iter().enumerate() {
            let served = serving.as_ref().map(|s| s.migrations);
            let (check, serves) = migrations(target, served, set).await;
            if i == 0 {
                openable = serves;
            }
            checks.push(check);
        }
    }
    let refused = serving.as_ref().and_then(|s| s.storage.as_ref());
    checks.extend(storage(target, own, refused).await);
    if let Some(serving) = serving {
        checks.push(ready(serving.diagnostics).await);
        checks.extend(store_checks(serving.spool, serving.diagnostics, limits).await);
    } else if openable {
        match open(target, IfMissing::Refuse).await {
            Ok(store) => {
                let (spool, diag) = (store.spool(), store.diagnostics());
                checks.extend(store_checks(spool.as_ref(), diag.as_ref(), limits).await);
                let _ = store.close().await;
            }
            Err(e) => checks.push(Check::problem(
                "open",
                crate::error::one_line(&e.to_string()),
                None,
            )),
        }
    }
    Report {
        healthy: checks.iter().all(|c| c.ok),
        checks,
    }
}

/// The store's room to write: writes a running server saw refused for a full store
/// (`refused`), and for SQLite the free space of the file system that holds the file. A problem
/// when a refusal is current or fewer than [`LOW_SPACE`] bytes are free; a warning when the
/// last refusal is past the server's hold and no write has shown since whether there is room.
/// Nothing for a Postgres store outside a server: its disk is the database server's, and a
/// read-only check cannot see it.
async fn storage(
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
async fn ready(diagnostics: &dyn cairn::EpochDiagnostics) -> Check {
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
async fn integrity(target: &DatabaseUrl, own: Option<&dyn Diagnostics>) -> Check {
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
fn integrity_check(backend: Scheme, found: Integrity) -> Check {
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

/// Environment variable naming the scratch Postgres server of `cairn migrate check`.
const SCRATCH_POSTGRES_ENV: &str = "CAIRN_CHECK_POSTGRES_URL";

/// Leftovers of `cairn migrate check` that no running check owns, as the backends' diagnostics
/// list them (each engine decides which names are its scratch stores and when a check owns
/// one): the SQLite engine's scratch directories in this machine's temporary directory, and
/// the Postgres engine's scratch schemas on the scratch server (`CAIRN_CHECK_POSTGRES_URL`),
/// or, without one, in a Postgres store's own database (asked of a running server's store's
/// own diagnostics, `own`, when there are). Read-only: nothing is removed; the next `cairn
/// migrate check` on the same machine or server removes them.
async fn scratch(target: &DatabaseUrl, own: Option<&dyn Diagnostics>) -> Check {
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

/// The set's stamp, lineage and classification, read without the lock. Returns the check and
/// whether this build serves the store as it is (at head or ahead: opening writes nothing).
/// `served`: a running server's store's own migration state (its pool's connections), used
/// instead of connecting to `target` again.
async fn migrations(
    target: &DatabaseUrl,
    served: Option<&Migrations>,
    set: MigrationSet,
) -> (Check, bool) {
    let set = &set;
    let name = format!("migrations:{}", set.name());
    let m = match served {
        Some(m) => m.clone(),
        None => match crate::open::migrations(target, IfMissing::Refuse) {
            Ok(m) => m,
            Err(e) => return (Check::problem(name, one(&e.to_string()), None), false),
        },
    };
    let state = match m.state(set.name()).await {
        Ok(s) => s,
        Err(e) => {
            return (
                Check::problem(name, one(&e.report().to_string()), None),
                false,
            )
        }
    };
    // From the store: escaped, so that it cannot forge report lines.
    let stamp =
        cairn::migrate::escape_control(state.stamp.as_deref().unwrap_or("(none)")).into_owned();
    let lineage = state.lineage.as_ref().map_or(0, Vec::len);
    let cmd = |c: &str| match set.name() {
        cairn::migrate::CAIRN_SET => format!("cairn migrate {c}"),
        other => format!("cairn migrate {c} --set {other} --source DIR"),
    };
    let base = format!("stamp {stamp}, lineage of {lineage} revision(s)");
    match m.classify(set, &state) {
        Classification::AtHead {
            repair_lineage: false,
        } => (Check::ok(name, format!("{base}: at head")), true),
        Classification::AtHead {
            repair_lineage: true,
        } => (
            Check::problem(
                name,
                format!("{base}: at head, lineage missing or another history's"),
                Some(&cmd("repair")),
            ),
            true,
        ),
        // The verdict `cairn migrate up` (and every open) gives: a store ahead that carries a
        // contract revision this build lacks is refused, not served.
        Classification::Ahead { .. } => match m.check_contracts_known(set).await {
            Ok(()) => (
                Check::ok(
                    name,
                    format!("{base}: ahead (a newer build's store; served as is)"),
                ),
                true,
            ),
            Err(e) if e.is_refusal() => (
                Check::problem(
                    name,
                    format!("{base}: refused ({})", one(&e.report().to_string())),
                    None,
                ),
                false,
            ),
            Err(e) => (
                Check::problem(name, one(&e.report().to_string()), None),
                false,
            ),
        },
        Classification::Upgrade { pending, .. } => (
            Check::problem(
                name,
                format!("{base}: behind, pending {}", pending.join(" ")),
                Some(&cmd("up")),
            ),
            false,
        ),
        Classification::Refused(refusal) => (
            Check::problem(
                name,
                format!(
                    "{base}: refused ({}); open it with a build whose history holds the \
                     store's revision",
                    one(&refusal.to_string())
                ),
                None,
            ),
            false,
        ),
    }
}

/// Spool counts, retention usage and a head-cache sample, from an open store.
async fn store_checks(
    spool: &dyn cairn::Spool,
    diag: &dyn cairn::EpochDiagnostics,
    limits: Limits,
) -> Vec<Check> {
    let cap = limits.retention_cap;
    let mut checks = Vec::new();
    match spool.stats().await {
        Ok(stats) => {
            let n = |s: RunState| stats.runs.get(&s).copied().unwrap_or(0);
            let age = stats.oldest_queued.map_or("-".to_owned(), |t| {
                let now =
                    cairn::Timestamp::from_system_time(std::time::SystemTime::now()).unwrap_or(t);
                format!("{}s", now.duration_since(t).as_secs())
            });
            let counts = format!(
                "pending={} claimed={} parked={} oldest_pending_age={age}",
                n(RunState::Queued),
                n(RunState::Claimed),
                n(RunState::Parked)
            );
            checks.push(parked_check(
                counts,
                n(RunState::Parked),
                limits.parked_threshold,
            ));
            let percent = if cap == 0 {
                100.0
            } else {
                stats.event_bytes as f64 * 100.0 / cap as f64
            };
            let detail = format!(
                "event bytes {} of the configured {cap}-byte cap ({percent:.1}%, {} events)",
                stats.event_bytes, stats.events
            );
            checks.push(if stats.event_bytes > cap {
                Check::problem(
                    "retention",
                    format!(
                        "{detail}: over the cap; the oldest events go at the next retention \
                         pass, or raise spool.retention_max_bytes"
                    ),
                    None,
                )
            } else {
                Check::ok("retention", detail)
            });
        }
        Err(e) => checks.push(Check::problem("spool", one(&e.report().to_string()), None)),
    }
    let mut stale = 0usize;
    let mut sampled = 0usize;
    let mut failed = None;
    match diag.list_spaces(None, HEAD_SAMPLE).await {
        Ok(spaces) => {
            // A reserved space (the backfill's marker) is cairn's own record, not a space:
            // counted as `cairn backfill` counts them.
            for space in spaces.iter().filter(|s| !s.is_reserved()) {
                match probe(diag, space).await {
                    Ok(p) if p.cache_is_current() => {}
                    Ok(_) => stale += 1,
                    Err(e) => {
                        failed = Some(cairn::backfill::error_code(&e));
                        break;
                    }
                }
                sampled += 1;
            }
        }
        Err(e) => failed = Some(cairn::backfill::error_code(&e)),
    }
    checks.push(match (failed, stale) {
        (Some(code), _) => Check::problem(
            "head_caches",
            format!("the sample stopped at an error (code {code})"),
            None,
        ),
        (None, 0) => Check::ok(
            "head_caches",
            format!("{sampled} space(s) sampled, every cache current"),
        ),
        (None, n) => Check::problem(
            "head_caches",
            format!(
                "{n} of {sampled} sampled space(s) have a stale cache (harmless: appends \
                 recompute; repairing saves that work)"
            ),
            Some("cairn backfill"),
        ),
    });
    checks
}

/// The spool check's verdict on `parked` runs: none is ok; up to `threshold` (any number
/// without one) is a warning — parked runs wait for an operator, the store is healthy; more is
/// a problem. Either way the repair names the commands that show, retry and discard them.
fn parked_check(counts: String, parked: u64, threshold: Option<u64>) -> Check {
    if parked == 0 {
        return Check::ok("spool", counts);
    }
    let look = format!(
        "{counts}: {parked} parked run(s) wait for an operator (each holds the reason it was \
         parked; once that is fixed, retry it, or discard it)"
    );
    match threshold {
        Some(max) if parked > max => Check::problem(
            "spool",
            format!("{look}; more than doctor.parked_threshold ({max})"),
            Some(PARKED_REPAIR),
        ),
        _ => Check::warning("spool", look, PARKED_REPAIR),
    }
}

fn one(s: &str) -> String {
    crate::error::one_line(s)
}

/// The application set named by `--set NAME --source DIR`, if any.
pub(crate) fn app_set(args: crate::cli::SetArgs) -> Result<Option<MigrationSet>, CliError> {
    match (args.set, args.source) {
        (Some(name), Some(dir)) if name != cairn::migrate::CAIRN_SET => Ok(Some(
            MigrationSet::from_dir(name, &dir).map_err(|e| CliError::Store(e.into()))?,
        )),
        _ => Ok(None),
    }
}

/// `cairn doctor`: prints the report (lines, or JSON with `--json`); unhealthy → exit 1 with
/// one stderr line (warnings leave it healthy: exit 0).
pub(crate) async fn run(
    target: &DatabaseUrl,
    app: Option<MigrationSet>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let config = crate::config::Config::load(None, crate::config::Overrides::default())
        .map_err(|p| CliError::Config(p.0.join("; ")))?;
    let limits = Limits {
        retention_cap: config.spool.retention_max_bytes,
        parked_threshold: config.doctor.parked_threshold,
    };
    let report = report(target, app, limits, None).await;
    if json {
        serde_json::to_writer_pretty(&mut *out, &report).map_err(|e| CliError::Output(e.into()))?;
        writeln!(out)?;
    } else {
        for c in &report.checks {
            let mark = match c.level {
                Level::Ok => "ok",
                Level::Warning => "WARNING",
                Level::Problem => "PROBLEM",
            };
            writeln!(out, "{mark} {}: {}", c.name, c.detail)?;
            if let Some(r) = &c.repair {
                writeln!(out, "  repair: {r}")?;
            }
        }
    }
    out.flush()?;
    if report.healthy {
        Ok(())
    } else {
        let n = report.checks.iter().filter(|c| !c.ok).count();
        Err(CliError::Config(format!(
            "{n} problem(s) found (listed on stdout, each with its repair when one exists)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parked_runs_are_a_warning_up_to_the_threshold() {
        let check = |parked, threshold| parked_check("counts".into(), parked, threshold);
        let none = check(0, Some(0));
        assert_eq!((none.ok, none.level, none.repair), (true, Level::Ok, None));
        for (parked, threshold) in [(3, None), (3, Some(3)), (1, Some(5))] {
            let c = check(parked, threshold);
            assert_eq!(
                (c.ok, c.level),
                (true, Level::Warning),
                "{parked} {threshold:?}"
            );
            assert!(c.repair.unwrap().contains("cairn run retry ID"));
        }
        for (parked, threshold) in [(4, Some(3)), (1, Some(0))] {
            let c = check(parked, threshold);
            assert_eq!(
                (c.ok, c.level),
                (false, Level::Problem),
                "{parked} {threshold:?}"
            );
            assert!(c.detail.contains("doctor.parked_threshold"), "{}", c.detail);
        }
        let json = serde_json::to_value(check(1, None)).unwrap();
        assert_eq!(
            (&json["ok"], &json["level"]),
            (&true.into(), &"warning".into())
        );
    }
}

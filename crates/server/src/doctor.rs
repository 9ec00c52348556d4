//! `cairn doctor [--json]`: a read-only health report of a store, with the command that repairs
//! each problem found.
//!
//! Read-only: the migration state is read without the lock, and the store is opened (for the
//! spool counts and the head-cache sample) only when cairn's set is at this build's head or
//! ahead, where opening writes nothing. A store that is behind is reported as such, not
//! upgraded.

use std::io::Write;

use cairn::backfill::probe;
use cairn::migrate::{classify, Classification, MigrationSet, Runner};
use cairn::{DatabaseUrl, RunState};
use serde::Serialize;

use crate::error::CliError;
use crate::open::{migrator, open, IfMissing};

/// The commands that show parked runs and why each was parked.
const PARKED_REPAIR: &str = "cairn runs --state parked; cairn run show ID";

/// How many spaces the head-cache check samples (in id order).
const HEAD_SAMPLE: usize = 1000;

/// The tables every cairn store holds (revisions 0001–0003).
const TABLES: [&str; 8] = [
    "epoch",
    "epoch_parent",
    "epoch_event",
    "epoch_head",
    "spool_run",
    "spool_event",
    "spool_fact",
    "spool_import",
];

/// One check's result.
#[derive(Serialize, Debug)]
pub(crate) struct Check {
    /// What was checked (`integrity`, `migrations:cairn`, `ready`, `spool`, `head_caches`,
    /// `retention`).
    pub(crate) name: String,
    /// Whether it found nothing to repair.
    pub(crate) ok: bool,
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
            detail: detail.into(),
            repair: None,
        }
    }
    fn problem(name: impl Into<String>, detail: impl Into<String>, repair: Option<&str>) -> Self {
        Self {
            name: name.into(),
            ok: false,
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
}

/// Runs every check against `target`. `app` is an application's set to report on as well;
/// `retention_cap` is the configured cap on run-event bytes. With `serving`, the store checks
/// use a running server's handles instead of opening the store again.
pub(crate) async fn report(
    target: &DatabaseUrl,
    app: Option<MigrationSet>,
    retention_cap: u64,
    serving: Option<Serving<'_>>,
) -> Report {
    let mut checks = Vec::new();
    let integrity = integrity(target).await;
    let intact = integrity.ok;
    checks.push(integrity);
    checks.push(scratch(target).await);
    let mut openable = false;
    if intact {
        let mut sets = vec![cairn::migrate::cairn_set()];
        sets.extend(app);
        for (i, set) in sets.into_iter().enumerate() {
            let (check, serves) = migrations(target, set).await;
            if i == 0 {
                openable = serves;
            }
            checks.push(check);
        }
    }
    if let Some(serving) = serving {
        checks.push(ready(serving.diagnostics).await);
        checks.extend(store_checks(serving.spool, serving.diagnostics, retention_cap).await);
    } else if openable {
        match open(target, IfMissing::Refuse).await {
            Ok(store) => {
                let (spool, diag) = (store.spool(), store.diagnostics());
                checks.extend(store_checks(spool.as_ref(), diag.as_ref(), retention_cap).await);
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
                crate::error::one_line(&e.to_string()),
                replaced.then_some("restart cairn serve so that it opens the file now at the path"),
            )
        }
    }
}

/// SQLite: `PRAGMA quick_check` on a read-only connection. Postgres: cairn's tables present in
/// the store's schema.
async fn integrity(target: &DatabaseUrl) -> Check {
    const DAMAGED: &str = "restore the store from a backup, or point --database at the right store";
    match target {
        DatabaseUrl::Sqlite(path) => {
            if !path.exists() {
                return Check::problem(
                    "integrity",
                    "no store file here; the first `cairn append` creates it",
                    None,
                );
            }
            let target_path = path.as_path();
            let path = path.clone();
            let result = tokio::task::spawn_blocking(move || -> Result<Vec<String>, String> {
                let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
                let conn = rusqlite::Connection::open_with_flags(&path, flags)
                    .map_err(|e| e.to_string())?;
                let mut stmt = conn
                    .prepare("PRAGMA quick_check")
                    .map_err(|e| e.to_string())?;
                let rows = stmt
                    .query_map([], |r| r.get::<_, String>(0))
                    .map_err(|e| e.to_string())?;
                rows.collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())
            })
            .await;
            match result {
                Ok(Ok(rows)) if rows == ["ok"] => Check::ok("integrity", "quick_check: ok"),
                Ok(Ok(rows)) => Check::problem(
                    "integrity",
                    format!("quick_check found {} problem(s); {DAMAGED}", rows.len()),
                    None,
                ),
                Ok(Err(e)) => match read_only(target_path) {
                    // Not damage: SQLite cannot open a WAL store, even to read, where it cannot
                    // create the store's shared-memory file (`-shm`) beside it.
                    Some(why) => Check::problem(
                        "integrity",
                        format!(
                            "the store is read-only ({why}), so SQLite cannot open it, not even \
                             to read ({}); nothing says it is damaged: make it writable (e.g. \
                             remount the file system read-write) or copy the store to a \
                             writable directory, and run doctor again",
                            one(&e)
                        ),
                        None,
                    ),
                    None => Check::problem(
                        "integrity",
                        format!("not a readable SQLite database ({}); {DAMAGED}", one(&e)),
                        None,
                    ),
                },
                Err(_) => Check::problem("integrity", "the check did not finish", None),
            }
        }
        DatabaseUrl::Postgres { schema, .. } => {
            // cairn's parser: it refuses a query parameter the driver would log with its value.
            let options = match target.postgres_connect_options() {
                Ok(o) => o,
                Err(e) => return Check::problem("integrity", one(&e.to_string()), None),
            };
            let pool = match sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
            {
                Ok(p) => p,
                // The driver's message may hold the host; say only what failed.
                Err(_) => {
                    return Check::problem(
                        "integrity",
                        "cannot connect to the Postgres server; check that it runs and that \
                         --database names it",
                        None,
                    )
                }
            };
            let found: Result<Vec<String>, _> = sqlx::query_scalar(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = COALESCE($1, current_schema())",
            )
            .bind(schema.as_deref())
            .fetch_all(&pool)
            .await;
            pool.close().await;
            match found {
                Ok(found) => {
                    let missing: Vec<&str> = TABLES
                        .iter()
                        .copied()
                        .filter(|t| !found.iter().any(|f| f == t))
                        .collect();
                    if missing.is_empty() {
                        Check::ok("integrity", "every cairn table is present")
                    } else if missing.len() == TABLES.len() {
                        Check::problem(
                            "integrity",
                            "no cairn table in this schema: not a cairn store yet; any \
                             writing command (e.g. `cairn migrate up`) creates it",
                            Some("cairn migrate up"),
                        )
                    } else {
                        Check::problem(
                            "integrity",
                            format!("missing tables: {}; {DAMAGED}", missing.join(", ")),
                            None,
                        )
                    }
                }
                Err(_) => Check::problem("integrity", "cannot list the schema's tables", None),
            }
        }
    }
}

/// Why the store file at `path` cannot be written, when that is so: a read-only file system,
/// or a file or directory this user may not write (permissions, an immutable flag). Checked
/// with `access(2)`, which opens nothing: closing a descriptor of the store file would drop the
/// SQLite locks this process holds on it (a running server's `/v1/doctor`).
fn read_only(path: &std::path::Path) -> Option<&'static str> {
    #[cfg(unix)]
    {
        use rustix::fs::{access, Access};
        use rustix::io::Errno;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        let checks = [
            (path, "the file is not writable by this user"),
            (dir, "its directory is not writable by this user"),
        ];
        checks
            .into_iter()
            .find_map(|(p, unwritable)| match access(p, Access::WRITE_OK) {
                Err(Errno::ROFS) => Some("read-only file system"),
                Err(Errno::ACCESS | Errno::PERM) => Some(unwritable),
                _ => None,
            })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// The prefix of the additivity check's throwaway SQLite directories (in the temporary
/// directory, each with a `.lock` file beside it while its check runs).
const SQLITE_SCRATCH: &str = "cairn_additivity_";
/// The prefix of the additivity check's throwaway Postgres schemas.
const PG_SCRATCH: &str = "cairn_add_";

/// Whether `name` is `prefix` + 16 lowercase hex digits, as `scratch_name` makes them.
fn is_scratch(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix).is_some_and(|hex| {
        hex.len() == 16
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Environment variable naming the scratch Postgres server of `cairn migrate check`.
const SCRATCH_POSTGRES_ENV: &str = "CAIRN_CHECK_POSTGRES_URL";

/// Leftovers of `cairn migrate check` that no running check owns: scratch directories of the
/// SQLite engine in the temporary directory whose lock file is gone or unlocked, and scratch
/// schemas of the Postgres engine with no session of their check connected (the check's
/// sessions carry the schema's name as their `application_name`) on the scratch server
/// (`CAIRN_CHECK_POSTGRES_URL`), or, without one, in a Postgres store's own database. Read-only:
/// nothing is removed; the next `cairn migrate check` on the same machine or server removes them.
async fn scratch(target: &DatabaseUrl) -> Check {
    let mut found = Vec::new();
    let mut repairs = Vec::new();
    let base = std::env::temp_dir();
    let dirs = tokio::task::spawn_blocking(move || sqlite_leftovers(&base))
        .await
        .unwrap_or_default();
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
            Some(DatabaseUrl::parse(&url).and_then(|u| u.postgres_connect_options())),
            "cairn migrate check --backend postgres",
        ),
        (None, DatabaseUrl::Postgres { .. }) => (
            Some(target.postgres_connect_options()),
            // The check refuses its own store's database as its scratch server, so it is run
            // for another store (the default one, without --database).
            "cairn migrate check --backend postgres --postgres-url URL (URL: this database; \
             without --database)",
        ),
        (None, DatabaseUrl::Sqlite(_)) => (None, ""),
    };
    if let Some(server) = server {
        let found_schemas = match server {
            Ok(options) => pg_leftovers(options).await,
            Err(_) => None,
        };
        match found_schemas {
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

fn sqlite_leftovers(base: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_scratch(name, SQLITE_SCRATCH) {
            continue;
        }
        if !std::fs::symlink_metadata(entry.path()).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let lock = base.join(format!("{name}.lock"));
        let owned = match std::fs::File::open(&lock) {
            // A lock we can take is nobody's: release it at once (closing the file does).
            Ok(file) => !matches!(fs4::FileExt::try_lock(&file), Ok(())),
            Err(_) => false,
        };
        if !owned {
            found.push(name.to_owned());
        }
    }
    found.sort();
    found
}

async fn pg_leftovers(options: sqlx::postgres::PgConnectOptions) -> Option<Vec<String>> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .ok()?;
    let names: Result<Vec<String>, _> = sqlx::query_scalar(
        "SELECT n.nspname::text FROM pg_namespace n \
         WHERE n.nspname LIKE 'cairn\\_add\\_%' \
         AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.application_name = n.nspname) \
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await;
    pool.close().await;
    Some(
        names
            .ok()?
            .into_iter()
            .filter(|n| is_scratch(n, PG_SCRATCH))
            .collect(),
    )
}

/// The set's stamp, lineage and classification, read without the lock. Returns the check and
/// whether this build serves the store as it is (at head or ahead: opening writes nothing).
async fn migrations(target: &DatabaseUrl, set: MigrationSet) -> (Check, bool) {
    let runner = Runner::new(set);
    let set = runner.set();
    let name = format!("migrations:{}", set.name());
    let m = match migrator(target, IfMissing::Refuse) {
        Ok(m) => m,
        Err(e) => return (Check::problem(name, one(&e.to_string()), None), false),
    };
    let state = match m.read_state(set.name()).await {
        Ok(s) => s,
        Err(e) => return (Check::problem(name, one(&e.to_string()), None), false),
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
    match classify(set, m.dialect(), &state) {
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
        Classification::Ahead { .. } => match runner.check_contracts_known(m.as_ref()).await {
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
                    format!("{base}: refused ({})", one(&e.to_string())),
                    None,
                ),
                false,
            ),
            Err(e) => (Check::problem(name, one(&e.to_string()), None), false),
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
    cap: u64,
) -> Vec<Check> {
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
            checks.push(match n(RunState::Parked) {
                0 => Check::ok("spool", counts),
                parked => Check::problem(
                    "spool",
                    format!(
                        "{counts}: {parked} parked run(s) need a look (each holds the reason it \
                         was parked; a run parked for a credential or collector problem is \
                         enqueued again under a new key once that is fixed)"
                    ),
                    Some(PARKED_REPAIR),
                ),
            });
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
        Err(e) => checks.push(Check::problem("spool", one(&e.to_string()), None)),
    }
    let mut stale = 0usize;
    let mut sampled = 0usize;
    let mut failed = None;
    match diag.list_spaces(None, HEAD_SAMPLE).await {
        Ok(spaces) => {
            for space in &spaces {
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
/// one stderr line.
pub(crate) async fn run(
    target: &DatabaseUrl,
    app: Option<MigrationSet>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let config = crate::config::Config::load(None, crate::config::Overrides::default())
        .map_err(|p| CliError::Config(p.0.join("; ")))?;
    let report = report(target, app, config.spool.retention_max_bytes, None).await;
    if json {
        serde_json::to_writer_pretty(&mut *out, &report).map_err(|e| CliError::Output(e.into()))?;
        writeln!(out)?;
    } else {
        for c in &report.checks {
            let mark = if c.ok { "ok" } else { "PROBLEM" };
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

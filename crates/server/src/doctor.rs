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
use cairn::spool::RetentionPolicy;
use cairn::{DatabaseUrl, RunState};
use serde::Serialize;

use crate::error::CliError;
use crate::open::{migrator, open, IfMissing};

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
    /// What was checked (`integrity`, `migrations:cairn`, `spool`, `head_caches`, `retention`).
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

/// Runs every check against `target`. `app` is an application's set to report on as well.
pub(crate) async fn report(target: &DatabaseUrl, app: Option<MigrationSet>) -> Report {
    let mut checks = Vec::new();
    let integrity = integrity(target).await;
    let intact = integrity.ok;
    checks.push(integrity);
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
    if openable {
        match open(target, IfMissing::Refuse).await {
            Ok(store) => {
                checks.extend(store_checks(&store).await);
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
                Ok(Err(e)) => Check::problem(
                    "integrity",
                    format!("not a readable SQLite database ({}); {DAMAGED}", one(&e)),
                    None,
                ),
                Err(_) => Check::problem("integrity", "the check did not finish", None),
            }
        }
        DatabaseUrl::Postgres { url, schema } => {
            let pool = match sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(url)
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
    let stamp = state.stamp.as_deref().unwrap_or("(none)").to_owned();
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
        Classification::Ahead { .. } => (
            Check::ok(
                name,
                format!("{base}: ahead (a newer build's store; served as is)"),
            ),
            true,
        ),
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
async fn store_checks(store: &cairn::Store) -> Vec<Check> {
    let mut checks = Vec::new();
    match store.spool().stats().await {
        Ok(stats) => {
            let n = |s: RunState| stats.runs.get(&s).copied().unwrap_or(0);
            let age = stats.oldest_queued.map_or("-".to_owned(), |t| {
                let now =
                    cairn::Timestamp::from_system_time(std::time::SystemTime::now()).unwrap_or(t);
                format!("{}s", now.duration_since(t).as_secs())
            });
            checks.push(Check::ok(
                "spool",
                format!(
                    "pending={} claimed={} parked={} oldest_pending_age={age}",
                    n(RunState::Queued),
                    n(RunState::Claimed),
                    n(RunState::Parked)
                ),
            ));
            let cap = RetentionPolicy::default().max_bytes;
            let detail = format!(
                "event bytes {} of the {cap}-byte cap ({} events)",
                stats.event_bytes, stats.events
            );
            checks.push(if stats.event_bytes > cap {
                Check::problem("retention", format!("{detail}: over the cap"), None)
            } else {
                Check::ok("retention", detail)
            });
        }
        Err(e) => checks.push(Check::problem("spool", one(&e.to_string()), None)),
    }
    let diag = store.diagnostics();
    let mut stale = 0usize;
    let mut sampled = 0usize;
    let mut failed = None;
    match diag.list_spaces(None, HEAD_SAMPLE).await {
        Ok(spaces) => {
            for space in &spaces {
                match probe(diag.as_ref(), space).await {
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
    let report = report(target, app).await;
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

//! `cairn migrate check`: the executed additivity check and the executed lock check of every
//! revision after a set's first, on throwaway stores.

use std::io::Write;
use std::sync::Arc;

use cairn::migrate::{
    additivity_engine, check_set, check_set_locks, revision_from_sql, AdditivityEngine, Dialect,
    MigrationSet, Revision,
};
use cairn::{DatabaseUrl, Scheme};

use super::args::CheckBackend;
use super::migrate_report::{Checked, Tally};
use crate::error::CliError;

/// Environment variable naming the scratch Postgres server of `cairn migrate check`.
const SCRATCH_POSTGRES_ENV: &str = "CAIRN_CHECK_POSTGRES_URL";

/// `cairn migrate check`: the additivity check on each engine the set is for (or `backend`),
/// and on Postgres the lock check; lines, or one JSON document (`json`). Fails (exit 1) on an
/// additivity violation outside a contract revision or a lock finding no marker accepts.
pub(super) async fn check(
    target: &DatabaseUrl,
    set: &MigrationSet,
    backend: CheckBackend,
    postgres_url: Option<String>,
    with_revision: Option<&std::path::Path>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let mut revisions = set.revisions().to_vec();
    if let Some(file) = with_revision {
        revisions.push(revision_from_file(file, &set.head().id)?);
    }
    // A single-engine set is checked on its engine: named explicitly, the other engine is
    // refused naming the missing dialect; `--backend all` runs the set's engine only.
    let runs = |engine: CheckBackend, dialect: Dialect| match backend {
        CheckBackend::All => Ok(set.supports(dialect)),
        b if b == engine => set.require(dialect).map(|()| true).map_err(CliError::from),
        _ => Ok(false),
    };
    let (sqlite, postgres) = (
        runs(CheckBackend::Sqlite, Dialect::Sqlite)?,
        runs(CheckBackend::Postgres, Dialect::Postgres)?,
    );
    let mut notes = Vec::new();
    for (ran, skipped, only) in [
        (sqlite, Scheme::Postgres, Scheme::Sqlite),
        (postgres, Scheme::Sqlite, Scheme::Postgres),
    ] {
        if ran && set.only().is_some() {
            let note = format!("{skipped}: not checked: set {} is {only}-only", set.name());
            if !json {
                writeln!(out, "{note}")?;
            }
            notes.push(note);
        }
    }
    // The set's marks carry over: contract (its findings are not violations), no-transaction
    // (how the lock check runs it) and the accepted lock findings.
    let mut checked = MigrationSet::new(set.name(), revisions).map_err(CliError::from)?;
    for r in set.revisions() {
        if set.is_contract(&r.id) {
            checked = checked.with_contract(&r.id).map_err(CliError::from)?;
        }
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            if set.is_no_transaction(&r.id, dialect) {
                checked = checked
                    .with_no_transaction(&r.id, dialect)
                    .map_err(CliError::from)?;
            }
        }
        for name in set.accepted_locks(&r.id) {
            checked = checked
                .with_accepted_lock(&r.id, &name)
                .map_err(CliError::from)?;
        }
    }
    let set = checked;
    let mut engines: Vec<(Scheme, Arc<dyn AdditivityEngine>)> = Vec::new();
    if sqlite {
        engines.push((Scheme::Sqlite, additivity_engine(Scheme::Sqlite, None)?));
    }
    if postgres {
        // The check runs revisions on a server, inside throwaway schemas; it is never pointed
        // at the store's own database by default (a revision could still take locks there, or
        // reach further), so the server is always named explicitly. Without one it is a usage
        // error (exit status 2), as a missing required flag is.
        let Some(url) = postgres_url.or_else(|| std::env::var(SCRATCH_POSTGRES_ENV).ok()) else {
            clap::Error::raw(
                clap::error::ErrorKind::MissingRequiredArgument,
                format!(
                    "the Postgres additivity check needs a scratch server: pass --postgres-url URL \
                     (or set {SCRATCH_POSTGRES_ENV}) naming a server whose databases hold no \
                     production data, or run --backend sqlite\n"
                ),
            )
            .exit()
        };
        if let DatabaseUrl::Postgres { url: store, .. } = target {
            if DatabaseUrl::parse(&url).ok().is_some_and(|u| match u {
                DatabaseUrl::Postgres { url, .. } => url == *store,
                DatabaseUrl::Sqlite(_) => false,
            }) {
                return Err(CliError::Config(
                    "the additivity check's scratch server must not be the store's own database; pass another --postgres-url".into(),
                ));
            }
        }
        engines.push((
            Scheme::Postgres,
            additivity_engine(Scheme::Postgres, Some(&url))?,
        ));
    }
    let mut tally = Tally::default();
    let mut documents = Vec::new();
    for (name, engine) in engines {
        let reports = check_set(engine.as_ref(), &set)
            .await
            .map_err(CliError::from)?;
        let locks = check_set_locks(engine.as_ref(), &set)
            .await
            .map_err(CliError::from)?;
        let checked = Checked {
            engine: name,
            set: &set,
            reports: &reports,
            locks: locks.as_deref(),
        };
        if json {
            documents.push(checked.json(&mut tally));
        } else {
            checked.print(&mut tally, out)?;
        }
    }
    if json {
        let doc = serde_json::json!({
            "ok": tally.violations == 0 && tally.findings == 0,
            "violations": tally.violations,
            "lock_findings": tally.findings,
            "notes": notes,
            "engines": documents,
        });
        writeln!(out, "{doc}")?;
    }
    out.flush()?;
    tally.verdict()
}

/// Most bytes a revision file for `check --with-revision` may hold.
const MAX_REVISION_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Reads a revision for `check --with-revision`: the file's SQL statements, named after the
/// file, following `parent`.
fn revision_from_file(file: &std::path::Path, parent: &str) -> Result<Revision, CliError> {
    let text = crate::small_file::read(file, MAX_REVISION_FILE_BYTES).map_err(|source| {
        CliError::Store(cairn::Error::Io {
            path: file.display().to_string(),
            source,
        })
    })?;
    let id = file
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| CliError::Config("the revision file needs a UTF-8 name".into()))?
        .to_owned();
    let revision = revision_from_sql(id, parent, &text, format!("from {}", file.display()))
        .map_err(|e| CliError::Config(format!("{}: {e}", file.display())))?;
    if revision.up(Dialect::Sqlite).is_empty() {
        return Err(CliError::Config(format!(
            "{} holds no SQL statement",
            file.display()
        )));
    }
    Ok(revision)
}

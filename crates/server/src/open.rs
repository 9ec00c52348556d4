//! Opens the store a command names, through the `cairn` facade: the binary names no backend.

use std::path::Path;

use cairn::migrate::Migrations;
use cairn::spool::SpoolConfig;
use cairn::{DatabaseUrl, Error, Store};

use crate::error::CliError;

/// Environment variable that names the database when `--database` is absent.
pub(crate) const DATABASE_ENV: &str = "CAIRN_DATABASE";

/// What to do when the store does not exist yet. Only a write has a reason to create a store;
/// reading or repairing a store that is not there is an error, and must not leave an empty
/// store file (or Postgres schema) behind.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum IfMissing {
    Create,
    Refuse,
}

/// The store `--database` names, or the platform default SQLite file.
pub(crate) fn target(database: Option<&str>) -> Result<DatabaseUrl, CliError> {
    Ok(match database {
        Some(url) => DatabaseUrl::parse(url)?,
        None => DatabaseUrl::default_sqlite()?,
    })
}

/// Opens the store at `url` through the migration runner, for one command.
///
/// A one-shot command is not a build that keeps running against the store: it does not
/// register in the fleet registry (a read-only command such as `cairn doctor` writes nothing
/// there), and it does not upgrade a store behind this build — that is `cairn migrate up`'s
/// job, or a service's — but refuses it and says so (a missing store it may create is created
/// at head). `cairn serve` registers and upgrades, through [`open_with`].
pub(crate) async fn open(url: &DatabaseUrl, if_missing: IfMissing) -> Result<Store, CliError> {
    open_store(url, if_missing, SpoolConfig::default(), false).await
}

/// Opens the store for a long-running server with a spool config (`cairn serve`'s retry
/// backoff); the server upgrades a store behind it, registers in the fleet registry and
/// heartbeats until it closes.
pub(crate) async fn open_with(
    url: &DatabaseUrl,
    if_missing: IfMissing,
    spool: SpoolConfig,
) -> Result<Store, CliError> {
    open_store(url, if_missing, spool, true).await
}

/// `serving`: a long-running server (registers, upgrades) rather than a one-shot command.
async fn open_store(
    url: &DatabaseUrl,
    if_missing: IfMissing,
    spool: SpoolConfig,
    serving: bool,
) -> Result<Store, CliError> {
    refuse_missing_file(url, if_missing)?;
    Ok(Store::builder_at(url.clone())
        .create_if_missing(if_missing == IfMissing::Create)
        .spool_config(spool)
        .register_in_fleet(serving)
        .upgrade(serving)
        .open()
        .await?)
}

/// The store's migration state (for `cairn migrate …`), without opening the store.
pub(crate) fn migrations(url: &DatabaseUrl, if_missing: IfMissing) -> Result<Migrations, CliError> {
    refuse_missing_file(url, if_missing)?;
    Ok(Migrations::at(url, if_missing == IfMissing::Create)?)
}

/// A SQLite store that must exist and does not gets the binary's own message, which says how
/// a store comes to be. An empty file is no store: SQLite would take it as an empty database
/// and the open would create a store in it.
fn refuse_missing_file(url: &DatabaseUrl, if_missing: IfMissing) -> Result<(), CliError> {
    if let Some(path) = url.sqlite_path() {
        if if_missing == IfMissing::Refuse && !exists_no_follow(path)? {
            return Err(CliError::NoStore(format!("at {}", path.display())));
        }
    }
    Ok(())
}

/// Refuses a location that holds nothing (no SQLite file, no Postgres schema) with one verdict
/// on both engines: the words a missing SQLite file gets. Read-only: nothing is created.
pub(crate) async fn refuse_empty_location(url: &DatabaseUrl) -> Result<(), CliError> {
    refuse_missing_file(url, IfMissing::Refuse)?;
    if cairn::migrate::location_exists(url).await? {
        return Ok(());
    }
    Err(CliError::NoStore(match url {
        DatabaseUrl::Sqlite(path) => format!("at {}", path.display()),
        DatabaseUrl::Postgres {
            schema: Some(schema),
            ..
        } => format!("in schema {schema}"),
        DatabaseUrl::Postgres { schema: None, .. } => "in the database's default schema".into(),
    }))
}

/// Whether anything (a non-empty file, or a symlink, dangling or not) sits at `path`. A symlink
/// counts as present so that the backend gets to refuse it with its own error; an empty
/// regular file counts as absent.
fn exists_no_follow(path: &Path) -> Result<bool, CliError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => Ok(!(meta.is_file() && meta.len() == 0)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(Error::Io {
            path: path.display().to_string(),
            source,
        }
        .into()),
    }
}

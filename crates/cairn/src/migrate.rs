//! Lineage-aware migrations, for operator tools and services with their own schema.
//!
//! A service hands its [`MigrationSet`]s to [`crate::StoreBuilder::migrations`]; operator tools
//! (the `cairn migrate …` commands) reach a store's migration state without opening it, through
//! [`migrator`], and run the executed additivity check through [`additivity_engine`].
//!
//! The fleet registry ([`cairn_migrate::fleet`]) lists the builds that have the store open;
//! [`live_builds`] reads it (`cairn migrate fleet`). A revision marked contract (first line
//! [`CONTRACT_MARKER`] in its up file) is applied only when no live build lacks it, unless
//! forced ([`Runner::force_contract`], [`crate::StoreBuilder::force_contract`]).

use std::sync::Arc;
use std::time::Duration;

pub use cairn_core::schema::Dialect;
use cairn_core::{Error, Result};
pub use cairn_migrate::additivity::{check_set, AdditivityEngine, RevisionReport, Rule, Violation};
pub use cairn_migrate::escape_control;
pub use cairn_migrate::fleet::{Blocker, FleetEntry, DEFAULT_EXPIRY, DEFAULT_HEARTBEAT_INTERVAL};
pub use cairn_migrate::{
    classify, split_statements, Checksum, Classification, LineageEntry, LineageVerdict,
    MigrateError, MigrationBackend, MigrationSet, Opened, Refusal, Revision, Runner, SplitError,
    StoredState, CAIRN_SET,
};
pub use cairn_migrate::{AppliedContract, Downgraded, OpenReport, CONTRACT_MARKER};
pub use cairn_migrate::{Diagnostics, Integrity};

use crate::url::{Backend, DatabaseUrl};

/// cairn's own migration set, as this build knows it.
pub fn cairn_set() -> MigrationSet {
    cairn_migrate::cairn_set()
}

/// The migration backend of the store at `url`, to read its stamp and lineage (`status`,
/// `history`) or to run a set's upgrade or lineage repair through a [`Runner`] — without
/// opening the store's other capabilities.
///
/// With `create_if_missing` off, a SQLite file that does not exist is refused with
/// [`Error::NotFound`] instead of being created.
///
/// # Errors
/// [`Error::NotFound`] as above; [`Error::InvalidInput`] for a bad Postgres schema name or a
/// backend this build was compiled without.
pub fn migrator(url: &DatabaseUrl, create_if_missing: bool) -> Result<Arc<dyn MigrationBackend>> {
    match url {
        DatabaseUrl::Sqlite(path) => {
            #[cfg(feature = "sqlite")]
            {
                if !create_if_missing && !exists_no_follow(path)? {
                    return Err(Error::NotFound {
                        what: format!("cairn store at {}", path.display()),
                    });
                }
                let opts =
                    cairn_sqlite::SqliteOptions::default().create_if_missing(create_if_missing);
                Ok(Arc::new(cairn_sqlite::SqliteMigrator::new(path, opts)))
            }
            #[cfg(not(feature = "sqlite"))]
            {
                let _ = (path, create_if_missing);
                Err(crate::store::missing_feature(Backend::Sqlite))
            }
        }
        DatabaseUrl::Postgres { url, schema } => {
            #[cfg(feature = "postgres")]
            {
                let mut opts = cairn_postgres::PgOptions::new(url.clone())
                    .create_if_missing(create_if_missing);
                if let Some(schema) = schema {
                    opts = opts.schema(schema.clone());
                }
                Ok(Arc::new(cairn_postgres::PgMigrator::new(opts)?))
            }
            #[cfg(not(feature = "postgres"))]
            {
                let _ = (url, schema, create_if_missing);
                Err(crate::store::missing_feature(Backend::Postgres))
            }
        }
    }
}

/// The live builds in the fleet registry of the store `backend` reaches (see [`migrator`]):
/// every entry refreshed within `expiry` of `now`, ordered by instance id. A store without a
/// registry (its cairn set predates `0004_fleet`) has none. Takes no lock and writes nothing.
///
/// # Errors
/// Store errors.
pub async fn live_builds(
    backend: &dyn MigrationBackend,
    now: cairn_core::spool::Timestamp,
    expiry: Duration,
) -> Result<Vec<FleetEntry>> {
    let all = backend.read_fleet().await.map_err(Error::from)?;
    Ok(cairn_migrate::fleet::live(all, now, expiry))
}

/// Read-only [`Diagnostics`] of the store at `url` (its integrity, the additivity check's
/// leftovers where its engine makes them), built from the location alone: it works on a
/// store that is damaged, missing or refused, and never creates or migrates one (`cairn
/// doctor`).
///
/// # Errors
/// [`Error::InvalidInput`] for a bad Postgres schema name or a backend this build was
/// compiled without.
pub fn diagnostics(url: &DatabaseUrl) -> Result<Arc<dyn Diagnostics>> {
    match url {
        DatabaseUrl::Sqlite(path) => {
            #[cfg(feature = "sqlite")]
            {
                Ok(Arc::new(cairn_sqlite::SqliteDiagnostics::new(path)))
            }
            #[cfg(not(feature = "sqlite"))]
            {
                let _ = path;
                Err(crate::store::missing_feature(Backend::Sqlite))
            }
        }
        DatabaseUrl::Postgres { url, schema } => {
            #[cfg(feature = "postgres")]
            {
                let mut opts = cairn_postgres::PgOptions::new(url.clone());
                if let Some(schema) = schema {
                    opts = opts.schema(schema.clone());
                }
                Ok(Arc::new(cairn_postgres::PgDiagnostics::new(opts)?))
            }
            #[cfg(not(feature = "postgres"))]
            {
                let _ = (url, schema);
                Err(crate::store::missing_feature(Backend::Postgres))
            }
        }
    }
}

/// The executed additivity check's engine for `backend`. The Postgres engine builds its
/// throwaway schemas on the server `postgres_url` names.
///
/// # Errors
/// [`Error::InvalidInput`] when `postgres_url` is missing for Postgres, or for a backend this
/// build was compiled without.
pub fn additivity_engine(
    backend: Backend,
    postgres_url: Option<&str>,
) -> Result<Arc<dyn AdditivityEngine>> {
    match backend {
        Backend::Sqlite => {
            #[cfg(feature = "sqlite")]
            {
                Ok(Arc::new(cairn_sqlite::SqliteAdditivity::new()))
            }
            #[cfg(not(feature = "sqlite"))]
            {
                Err(crate::store::missing_feature(Backend::Sqlite))
            }
        }
        Backend::Postgres => {
            #[cfg(feature = "postgres")]
            {
                let url = postgres_url.ok_or_else(|| {
                    Error::invalid(
                        "additivity check",
                        "the Postgres engine needs a server URL for its throwaway schemas",
                    )
                })?;
                Ok(Arc::new(cairn_postgres::PgAdditivity::new(url.to_owned())))
            }
            #[cfg(not(feature = "postgres"))]
            {
                let _ = postgres_url;
                Err(crate::store::missing_feature(Backend::Postgres))
            }
        }
    }
}

/// Whether anything (a file, or a symlink, dangling or not) sits at `path`. A symlink counts as
/// present so that the backend refuses it with its own error.
#[cfg(feature = "sqlite")]
fn exists_no_follow(path: &std::path::Path) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(Error::Io {
            path: path.display().to_string(),
            source,
        }),
    }
}

//! The facade's one engine switch: a parsed URL's scheme → the engine that serves it. Every
//! other place in the facade asks the engine ([`cairn_migrate::backend::Engine`]: open,
//! migrator, diagnostics, additivity, location checks); no SQL and no driver here.

use cairn_core::{Error, Result};
use cairn_migrate::backend::Engine;

use crate::url::{DatabaseUrl, Scheme};

/// The engine of the store location `url` names. Connects nowhere and touches no file.
///
/// # Errors
/// [`Error::InvalidInput`] for an engine this build was compiled without (enable the `sqlite`
/// or `postgres` feature).
pub(crate) fn engine(url: &DatabaseUrl) -> Result<Box<dyn Engine>> {
    match url {
        DatabaseUrl::Sqlite(path) => sqlite(path),
        DatabaseUrl::Postgres { url, schema } => postgres(url, schema.clone()),
    }
}

#[cfg(feature = "sqlite")]
fn sqlite(path: &std::path::Path) -> Result<Box<dyn Engine>> {
    Ok(Box::new(cairn_sqlite::SqliteEngine::new(path)))
}

#[cfg(not(feature = "sqlite"))]
fn sqlite(_: &std::path::Path) -> Result<Box<dyn Engine>> {
    Err(missing_feature(Scheme::Sqlite))
}

#[cfg(feature = "postgres")]
fn postgres(url: &str, schema: Option<String>) -> Result<Box<dyn Engine>> {
    Ok(Box::new(cairn_postgres::PgEngine::new(url, schema)))
}

#[cfg(not(feature = "postgres"))]
fn postgres(_: &str, _: Option<String>) -> Result<Box<dyn Engine>> {
    Err(missing_feature(Scheme::Postgres))
}

/// The refusal of a URL whose engine this build was compiled without.
#[cfg_attr(all(feature = "sqlite", feature = "postgres"), allow(dead_code))]
fn missing_feature(scheme: Scheme) -> Error {
    Error::invalid(
        "database URL",
        format!("this build of cairn has no {scheme} backend; enable the `{scheme}` feature"),
    )
}

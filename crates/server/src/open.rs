//! Chooses and opens a store from a database URL at run time.
//!
//! The rest of the binary sees the store only as `Arc<dyn EpochDiagnostics>`; this module is the
//! one place that names a backend crate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_core::{EpochDiagnostics, Error};

use crate::error::CliError;

/// Environment variable that names the database when `--database` is absent.
pub(crate) const DATABASE_ENV: &str = "CAIRN_DATABASE";

/// Query parameter of a Postgres URL naming the schema (store namespace) to use; it is stripped
/// before the URL reaches the driver.
const SCHEMA_PARAM: &str = "cairn_schema";

/// Where a store lives, parsed from a URL.
///
/// Deliberately not `Debug`: a Postgres URL may hold a password and must never be printed.
pub(crate) enum Target {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A Postgres database, with the schema to use when the URL named one.
    Postgres { url: String, schema: Option<String> },
}

/// What to do when the SQLite file does not exist yet. Only an append has a reason to create
/// a store; reading or repairing a store that is not there is an error, and must not leave an
/// empty store file behind.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum IfMissing {
    Create,
    Refuse,
}

impl Target {
    /// Parses `sqlite:///abs/path`, `sqlite://relative/path`, a bare path, or
    /// `postgres://…` / `postgresql://…`.
    ///
    /// Error messages never repeat the URL: it may contain a password.
    pub(crate) fn parse(url: &str) -> Result<Self, CliError> {
        if url.trim().is_empty() {
            return Err(CliError::Config("the database URL is empty".into()));
        }
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(Self::Sqlite(PathBuf::from(url)));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "sqlite" => {
                if rest.is_empty() {
                    return Err(CliError::Config(
                        "the sqlite:// database URL names no file".into(),
                    ));
                }
                // `sqlite:///abs` leaves `/abs` here; `sqlite://rel` leaves `rel`.
                Ok(Self::Sqlite(PathBuf::from(rest)))
            }
            "postgres" | "postgresql" => {
                let (url, schema) = split_schema(url)?;
                Ok(Self::Postgres { url, schema })
            }
            // Only the scheme is echoed; it cannot hold a secret, the rest of the URL can.
            other if other.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) => {
                Err(CliError::Config(format!(
                    "unsupported database URL scheme `{other}`; use sqlite:// (or a file path) or postgres://"
                )))
            }
            _ => Err(CliError::Config(
                "unsupported database URL; use sqlite:// (or a file path) or postgres://".into(),
            )),
        }
    }

    /// The default store: `cairn.db` under the platform data directory
    /// (e.g. `~/.local/share/cairn/cairn.db`).
    pub(crate) fn default_sqlite() -> Result<Self, CliError> {
        let dirs = directories::ProjectDirs::from("", "", "cairn").ok_or_else(|| {
            CliError::Config(
                "cannot find a home directory for the default store; pass --database or set CAIRN_DATABASE".into(),
            )
        })?;
        Ok(Self::Sqlite(dirs.data_dir().join("cairn.db")))
    }

    /// Opens the store.
    pub(crate) async fn open(
        self,
        if_missing: IfMissing,
    ) -> Result<Arc<dyn EpochDiagnostics>, CliError> {
        match self {
            Self::Sqlite(path) => {
                if if_missing == IfMissing::Refuse && !exists_no_follow(&path)? {
                    return Err(CliError::NoStore(path));
                }
                let store = cairn_sqlite::SqliteStore::open(&path).await?;
                Ok(Arc::new(store))
            }
            Self::Postgres { url, schema } => {
                let store = match schema {
                    None => cairn_postgres::PgStore::connect(&url).await?,
                    Some(schema) => {
                        let opts = cairn_postgres::PgOptions::new(url).with_schema(schema);
                        cairn_postgres::PgStore::connect_with(opts).await?
                    }
                };
                Ok(Arc::new(store))
            }
        }
    }
}

impl Target {
    /// The store's migration backend (for `cairn migrate …`). Reading the state of a SQLite
    /// file that does not exist is refused rather than creating it, unless `if_missing` allows.
    pub(crate) fn migrator(
        &self,
        if_missing: IfMissing,
    ) -> Result<Arc<dyn cairn_migrate::MigrationBackend>, CliError> {
        match self {
            Self::Sqlite(path) => {
                if if_missing == IfMissing::Refuse && !exists_no_follow(path)? {
                    return Err(CliError::NoStore(path.clone()));
                }
                Ok(Arc::new(cairn_sqlite::SqliteMigrator::new(
                    path,
                    cairn_sqlite::SqliteOptions::default(),
                )))
            }
            Self::Postgres { url, schema } => {
                let mut opts = cairn_postgres::PgOptions::new(url.clone());
                if let Some(schema) = schema {
                    opts = opts.with_schema(schema.clone());
                }
                Ok(Arc::new(cairn_postgres::PgMigrator::new(opts)?))
            }
        }
    }
}

/// Whether anything (a file, or a symlink, dangling or not) sits at `path`. A symlink counts as
/// present so that the backend gets to refuse it with its own error.
fn exists_no_follow(path: &Path) -> Result<bool, CliError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(Error::Io {
            path: path.display().to_string(),
            source,
        }
        .into()),
    }
}

/// Removes the `cairn_schema` query parameter from a Postgres URL and returns it separately.
fn split_schema(url: &str) -> Result<(String, Option<String>), CliError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut schema = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((SCHEMA_PARAM, value)) => {
                if value.is_empty() {
                    return Err(CliError::Config(format!(
                        "the `{SCHEMA_PARAM}` parameter of the database URL is empty"
                    )));
                }
                schema = Some(value.to_owned());
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, schema))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_path(url: &str) -> PathBuf {
        match Target::parse(url) {
            Ok(Target::Sqlite(p)) => p,
            _ => panic!("expected a sqlite target"),
        }
    }

    #[test]
    fn sqlite_urls_and_bare_paths_map_to_files() {
        assert_eq!(
            sqlite_path("sqlite:///abs/x.db"),
            PathBuf::from("/abs/x.db")
        );
        assert_eq!(sqlite_path("sqlite://rel/x.db"), PathBuf::from("rel/x.db"));
        assert_eq!(sqlite_path("SQLITE://rel.db"), PathBuf::from("rel.db"));
        assert_eq!(sqlite_path("/tmp/x.db"), PathBuf::from("/tmp/x.db"));
        assert_eq!(sqlite_path("x.db"), PathBuf::from("x.db"));
    }

    #[test]
    fn postgres_urls_keep_their_query_but_lose_the_schema_parameter() {
        let Ok(Target::Postgres { url, schema }) =
            Target::parse("postgres://u:pw@h/db?sslmode=disable&cairn_schema=tenant_a")
        else {
            panic!("expected a postgres target");
        };
        assert_eq!(url, "postgres://u:pw@h/db?sslmode=disable");
        assert_eq!(schema.as_deref(), Some("tenant_a"));

        let Ok(Target::Postgres { url, schema }) = Target::parse("postgresql://h/db") else {
            panic!("expected a postgres target");
        };
        assert_eq!(url, "postgresql://h/db");
        assert_eq!(schema, None);
    }

    #[test]
    fn bad_urls_are_refused_without_echoing_them() {
        for url in [
            "",
            "  ",
            "sqlite://",
            "mysql://u:hunter2@h/db",
            "p%s://u:hunter2@h",
        ] {
            let Err(err) = Target::parse(url) else {
                panic!("expected an error");
            };
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
        let Err(err) = Target::parse("postgres://u:hunter2@h/db?cairn_schema=") else {
            panic!("expected an error");
        };
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}

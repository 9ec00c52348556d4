//! Where a store lives, parsed from a database URL.

use std::fmt;
use std::path::{Path, PathBuf};

use cairn_core::{Error, Result};

/// Query parameter of a Postgres URL naming the schema (store namespace) to use; it is stripped
/// before the URL reaches the driver.
pub const SCHEMA_PARAM: &str = "cairn_schema";

/// Which engine a store runs on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum Backend {
    /// One SQLite file: the embedded default.
    Sqlite,
    /// A PostgreSQL database (one schema per store).
    Postgres,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        })
    }
}

/// A store's location, parsed from a URL:
///
/// - `sqlite:///absolute/path.db`, `sqlite://relative/path.db`, or a bare file path → a SQLite
///   file;
/// - `postgres://…` or `postgresql://…` → a PostgreSQL database; a `cairn_schema=NAME` query
///   parameter picks the schema that holds the store (default `public`) and is removed before
///   the URL reaches the driver.
///
/// Deliberately not `Debug` and never echoed in errors: a Postgres URL may hold a password.
#[derive(Clone)]
pub enum DatabaseUrl {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A Postgres database.
    Postgres {
        /// The driver's URL, without the `cairn_schema` parameter.
        url: String,
        /// The schema named by `cairn_schema`, if any.
        schema: Option<String>,
    },
}

impl DatabaseUrl {
    /// Parses a database URL (see the type's docs for the forms).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty URL, an unsupported scheme, a `sqlite://` URL with
    /// no file or an empty `cairn_schema`. The message never repeats the URL.
    pub fn parse(url: &str) -> Result<Self> {
        if url.trim().is_empty() {
            return Err(Error::invalid("database URL", "it is empty"));
        }
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(Self::Sqlite(PathBuf::from(url)));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "sqlite" => {
                if rest.is_empty() {
                    return Err(Error::invalid(
                        "database URL",
                        "the sqlite:// URL names no file",
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
                Err(Error::invalid(
                    "database URL",
                    format!(
                        "unsupported scheme `{other}`; use sqlite:// (or a file path) or postgres://"
                    ),
                ))
            }
            _ => Err(Error::invalid(
                "database URL",
                "unsupported scheme; use sqlite:// (or a file path) or postgres://",
            )),
        }
    }

    /// The platform default store: `cairn.db` under the platform data directory (e.g.
    /// `~/.local/share/cairn/cairn.db`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the platform has no home directory to put it in.
    pub fn default_sqlite() -> Result<Self> {
        let dirs = directories::ProjectDirs::from("", "", "cairn").ok_or_else(|| {
            Error::invalid(
                "database URL",
                "no home directory for the default store; pass a database URL",
            )
        })?;
        Ok(Self::Sqlite(dirs.data_dir().join("cairn.db")))
    }

    /// The engine the URL names.
    pub fn backend(&self) -> Backend {
        match self {
            Self::Sqlite(_) => Backend::Sqlite,
            Self::Postgres { .. } => Backend::Postgres,
        }
    }

    /// The SQLite file, for a SQLite URL.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            Self::Sqlite(p) => Some(p),
            Self::Postgres { .. } => None,
        }
    }

    /// The Postgres driver's connect options for a Postgres URL, for a tool that talks to the
    /// server itself (`cairn doctor`). Every query parameter left once `cairn_schema` is
    /// removed must be one the driver reads: the driver would log any other with its value,
    /// which may be a secret, so it is refused instead. Stores opened through cairn check
    /// their URL the same way.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a SQLite URL, a Postgres URL the driver cannot parse, or one
    /// with a query parameter the driver does not read (named, never its value).
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn postgres_connect_options(&self) -> Result<sqlx::postgres::PgConnectOptions> {
        match self {
            Self::Postgres { url, .. } => cairn_postgres::connect_options_from_url(url),
            Self::Sqlite(_) => Err(Error::invalid(
                "database URL",
                "a SQLite store has no Postgres connect options",
            )),
        }
    }
}

/// Removes the `cairn_schema` query parameter from a Postgres URL and returns it separately.
fn split_schema(url: &str) -> Result<(String, Option<String>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut schema = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((SCHEMA_PARAM, value)) => {
                if value.is_empty() {
                    return Err(Error::invalid(
                        "database URL",
                        format!("the `{SCHEMA_PARAM}` parameter is empty"),
                    ));
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
        match DatabaseUrl::parse(url) {
            Ok(DatabaseUrl::Sqlite(p)) => p,
            _ => panic!("expected a sqlite URL"),
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
        let Ok(DatabaseUrl::Postgres { url, schema }) =
            DatabaseUrl::parse("postgres://u:pw@h/db?sslmode=disable&cairn_schema=tenant_a")
        else {
            panic!("expected a postgres URL");
        };
        assert_eq!(url, "postgres://u:pw@h/db?sslmode=disable");
        assert_eq!(schema.as_deref(), Some("tenant_a"));

        let Ok(DatabaseUrl::Postgres { url, schema }) = DatabaseUrl::parse("postgresql://h/db")
        else {
            panic!("expected a postgres URL");
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
            "postgres://u:hunter2@h/db?cairn_schema=",
        ] {
            let Err(err) = DatabaseUrl::parse(url) else {
                panic!("expected an error for {url:?}");
            };
            assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }
}

//! Where a store lives, parsed from a database URL.

use std::fmt;
use std::path::{Path, PathBuf};

use cairn_core::{Error, Result};

/// Query parameter of a Postgres URL naming the schema (store namespace) to use; it is stripped
/// before the URL reaches the driver.
pub const SCHEMA_PARAM: &str = "cairn_schema";

/// Which built-in engine a store runs on: the scheme of its URL.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum Scheme {
    /// One SQLite file: the embedded default.
    Sqlite,
    /// A PostgreSQL database (one schema per store).
    Postgres,
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scheme::Sqlite => "sqlite",
            Scheme::Postgres => "postgres",
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
    /// no file or with a query (`?mode=ro`: cairn reads no SQLite URL parameter, and the file
    /// would otherwise be named `p.db?mode=ro`), an empty `cairn_schema` or a query parameter
    /// given twice in a Postgres URL. The message never repeats the URL; it names a parameter
    /// only by a plain key.
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
                // `sqlite://user:secret@host/x` would otherwise name a directory `user:secret@host`
                // and echo the secret in every message about the path.
                if rest.split('/').next().is_some_and(|first| first.contains('@')) {
                    return Err(Error::invalid(
                        "database URL",
                        "a sqlite:// URL takes no user name, password or host; name the file \
                         (a path whose first part holds `@` can be given without sqlite://)",
                    ));
                }
                // A query would otherwise become part of the file's name (`p.db?mode=ro`);
                // cairn reads no SQLite URL parameter, so any is refused.
                if let Some((_, query)) = rest.split_once('?') {
                    return Err(sqlite_query_refused(query));
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
    pub fn scheme(&self) -> Scheme {
        match self {
            Self::Sqlite(_) => Scheme::Sqlite,
            Self::Postgres { .. } => Scheme::Postgres,
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

/// A parameter's key as a message may show it: a plain name, else nothing (text without its
/// `=` could be a value, and a value can be a secret).
fn shown_key(key: &str) -> String {
    let plain = !key.is_empty()
        && key.len() <= 64
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        format!("`{key}`")
    } else {
        "(its name is not shown)".to_owned()
    }
}

fn sqlite_query_refused(query: &str) -> Error {
    let key = query.split('&').next().unwrap_or_default();
    let key = key.split_once('=').map_or("", |(k, _)| k);
    Error::invalid(
        "database URL",
        format!(
            "the sqlite:// URL has a query parameter {}; cairn reads none from a SQLite URL \
             (the file would be named with it), so remove it",
            shown_key(key)
        ),
    )
}

/// Removes the `cairn_schema` query parameter from a Postgres URL and returns it separately.
/// A parameter given twice is refused: the driver would silently take one of the two.
fn split_schema(url: &str) -> Result<(String, Option<String>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut schema = None;
    let mut kept = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        if let Some((key, _)) = pair.split_once('=') {
            if !seen.insert(key) {
                return Err(Error::invalid(
                    "database URL",
                    format!(
                        "the query parameter {} is given twice; give it once",
                        shown_key(key)
                    ),
                ));
            }
        }
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
        let parsed = DatabaseUrl::parse(url).expect("a valid URL");
        parsed.sqlite_path().expect("a sqlite URL").to_path_buf()
    }

    impl DatabaseUrl {
        /// The driver's URL and the schema of a Postgres URL.
        fn postgres_parts(&self) -> Option<(String, Option<String>)> {
            match self {
                Self::Postgres { url, schema } => Some((url.clone(), schema.clone())),
                Self::Sqlite(_) => None,
            }
        }
    }

    fn postgres(url: &str) -> (String, Option<String>) {
        let parsed = DatabaseUrl::parse(url).expect("a valid URL");
        parsed.postgres_parts().expect("a postgres URL")
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
        let (url, schema) = postgres("postgres://u:pw@h/db?sslmode=disable&cairn_schema=tenant_a");
        assert_eq!(url, "postgres://u:pw@h/db?sslmode=disable");
        assert_eq!(schema.as_deref(), Some("tenant_a"));

        let (url, schema) = postgres("postgresql://h/db");
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

    /// Issue 44 item 4.6: `?cairn_schema=a&cairn_schema=b` used `b` without a word; any
    /// parameter given twice is refused, naming its key (when it is a plain name) and never a
    /// value.
    #[test]
    fn a_postgres_parameter_given_twice_is_refused() {
        for (url, key) in [
            (
                "postgres://u:hunter2@h/db?cairn_schema=a&cairn_schema=b",
                "`cairn_schema`",
            ),
            (
                "postgres://h/db?sslmode=disable&cairn_schema=a&sslmode=require",
                "`sslmode`",
            ),
            ("postgres://h/db?hunter2=x&hunter2=y", "`hunter2`"),
            (
                "postgres://h/db?a%20b=hunter2&a%20b=x",
                "(its name is not shown)",
            ),
        ] {
            let Err(err) = DatabaseUrl::parse(url) else {
                panic!("expected an error for {url:?}");
            };
            assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
            let text = err.to_string();
            assert!(text.contains(key) && text.contains("twice"), "{text}");
            assert!(
                !text.contains("hunter2=") && !text.contains("=hunter2"),
                "{text}"
            );
        }
        // Distinct keys, and `options[…]` keys that differ in their name, are fine.
        assert!(
            DatabaseUrl::parse("postgres://h/db?options[a]=1&options[b]=2&cairn_schema=s").is_ok()
        );
    }

    /// Issue 44 item 4.6: `sqlite:///…/p.db?mode=ro` created a file named `p.db?mode=ro`; a
    /// query in a `sqlite://` URL is refused, naming its key.
    #[test]
    fn a_sqlite_url_with_credentials_is_refused_without_echoing_them() {
        for url in [
            "sqlite://u:hunter2@/x.db",
            "sqlite://u:hunter2@host/x.db",
            "sqlite://@/x",
        ] {
            let err = DatabaseUrl::parse(url).err().expect("refused").to_string();
            assert!(!err.contains("hunter2"), "{err}");
            assert!(err.contains("no user name"), "{err}");
        }
        // A bare path may hold `@` anywhere; so may a sqlite:// path after its first part.
        assert_eq!(sqlite_path("a@b/x.db"), PathBuf::from("a@b/x.db"));
        assert_eq!(
            sqlite_path("sqlite://dir/a@b.db"),
            PathBuf::from("dir/a@b.db")
        );
    }

    #[test]
    fn a_sqlite_url_with_a_query_is_refused() {
        for (url, key) in [
            ("sqlite:///tmp/p.db?mode=ro", "`mode`"),
            ("sqlite://rel.db?cache=shared&mode=ro", "`cache`"),
            ("sqlite:///tmp/p.db?", "(its name is not shown)"),
        ] {
            let Err(err) = DatabaseUrl::parse(url) else {
                panic!("expected an error for {url:?}");
            };
            assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
            assert!(err.to_string().contains(key), "{err}");
        }
        // A bare path is a path: its `?` is part of the file's name, as the user wrote it.
        assert_eq!(
            sqlite_path("/tmp/odd?name.db"),
            PathBuf::from("/tmp/odd?name.db")
        );
    }
}

//! Connection options and the validated schema (store namespace) name.

use std::fmt;
use std::time::Duration;

use cairn_core::{Error, Result};

/// How to reach a Postgres server and which schema to keep the store in.
///
/// `Debug` never prints the URL: it may carry a password.
#[derive(Clone)]
pub struct PgOptions {
    /// `postgres://…` or `postgresql://…` connection URL.
    pub url: String,
    /// The schema that holds the store's tables: the store namespace. Two stores in different
    /// schemas of one database are independent and never block each other. Must match
    /// `[a-z_][a-z0-9_]{0,62}`; default `public`.
    pub schema: String,
    /// Largest number of pooled connections (default 10).
    pub max_connections: u32,
    /// How long a statement waits for a lock (including a space's write lock) before the
    /// operation fails with [`Error::Retryable`] (default 10 s).
    pub lock_timeout: Duration,
    /// How long an operation waits for a pooled connection before it fails with
    /// [`Error::Unavailable`] (default 10 s).
    pub acquire_timeout: Duration,
}

impl PgOptions {
    /// Options for `url` with every other field at its default.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: "public".into(),
            max_connections: 10,
            lock_timeout: Duration::from_secs(10),
            acquire_timeout: Duration::from_secs(10),
        }
    }

    /// The same options with another schema.
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }
}

impl fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgOptions")
            .field("url", &"<redacted>")
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("lock_timeout", &self.lock_timeout)
            .field("acquire_timeout", &self.acquire_timeout)
            .finish()
    }
}

/// A schema name that matched `[a-z_][a-z0-9_]{0,62}`, so it is a plain Postgres identifier
/// that needs no escaping and cannot carry SQL.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct SchemaName(String);

impl SchemaName {
    pub(crate) fn parse(name: &str) -> Result<Self> {
        let bytes = name.as_bytes();
        let valid = !bytes.is_empty()
            && bytes.len() <= 63
            && (bytes[0].is_ascii_lowercase() || bytes[0] == b'_')
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_');
        if !valid {
            return Err(Error::invalid(
                "postgres schema name",
                "must match [a-z_][a-z0-9_]{0,62}",
            ));
        }
        Ok(Self(name.to_owned()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_validated() {
        for ok in ["public", "_x", "cairn_t_0123abcd", &"a".repeat(63)] {
            assert!(SchemaName::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Public",
            "1abc",
            "a-b",
            "a\"; drop schema public; --",
            "é",
            &"a".repeat(64),
        ] {
            assert!(
                matches!(SchemaName::parse(bad), Err(Error::InvalidInput { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn debug_hides_the_url() {
        let o = PgOptions::new("postgres://u:secret@h/db");
        assert!(!format!("{o:?}").contains("secret"));
    }
}

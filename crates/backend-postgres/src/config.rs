//! Connection options and the validated schema (store namespace) name.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use cairn_core::{Error, Result};
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;

use crate::error::map;

/// Where the server is: a URL parsed when the store connects, or the connect options of a pool
/// the service already has.
#[derive(Clone)]
enum Source {
    Url(String),
    Options(Box<PgConnectOptions>),
}

/// How to reach a Postgres server and which schema to keep the store in: a builder.
///
/// ```
/// # use std::time::Duration;
/// let opts = cairn_postgres::PgOptions::new("postgres://app@db.internal/app")
///     .schema("cairn")
///     .max_connections(4)
///     .lock_timeout(Duration::from_secs(5));
/// ```
///
/// `Debug` never prints the URL, the host or the password.
#[derive(Clone)]
#[non_exhaustive]
pub struct PgOptions {
    source: Source,
    pub(crate) schema: String,
    pub(crate) max_connections: u32,
    pub(crate) lock_timeout: Duration,
    pub(crate) acquire_timeout: Duration,
    pub(crate) create_if_missing: bool,
    /// A pooler declared with [`PgOptions::pooler`]; `None`: as the URL says.
    pooler: Option<crate::pooler::Pooler>,
}

impl PgOptions {
    /// Options for the server at `url` (`postgres://…` or `postgresql://…`) with every other
    /// setting at its default: schema `public`, 10 connections, 10 s lock and acquire
    /// timeouts, the store created when missing. The URL is parsed when the store connects.
    pub fn new(url: impl Into<String>) -> Self {
        Self::with_source(Source::Url(url.into()), 10)
    }

    /// Options that reach the server the way `pool` does, for a service that already has a
    /// pool: cairn reuses the pool's connect options (credentials, host, port, database, TLS
    /// settings) but not its connections. It opens its own small pool (default 4 connections,
    /// see [`PgOptions::max_connections`]), because every cairn connection carries session
    /// settings — `search_path` set to the store's schema and cairn's `lock_timeout` — that must
    /// not leak into the connections the service's own queries run on. Closing either pool
    /// leaves the other open. Startup parameters set on the pool's options (`options(…)`,
    /// `application_name`) come along; cairn's session settings take precedence over them.
    pub fn from_pool(pool: &PgPool) -> Self {
        Self::with_source(
            Source::Options(Box::new((*pool.connect_options()).clone())),
            4,
        )
    }

    fn with_source(source: Source, max_connections: u32) -> Self {
        Self {
            source,
            schema: "public".into(),
            max_connections,
            lock_timeout: Duration::from_secs(10),
            acquire_timeout: Duration::from_secs(10),
            create_if_missing: true,
            pooler: None,
        }
    }

    /// The schema that holds the store's tables: the store namespace. Two stores in different
    /// schemas of one database are independent and never block each other. Must match
    /// `[a-z_][a-z0-9_]{0,62}` (checked when the store connects); default `public`.
    #[must_use]
    pub fn schema(mut self, name: impl Into<String>) -> Self {
        self.schema = name.into();
        self
    }

    /// The largest number of connections cairn's pool holds (at least 1).
    #[must_use]
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    /// How long a statement waits for a lock (including a space's write lock) before the
    /// operation fails with [`Error::Retryable`] (default 10 s).
    #[must_use]
    pub fn lock_timeout(mut self, d: Duration) -> Self {
        self.lock_timeout = d;
        self
    }

    /// How long an operation waits for a pooled connection before it fails with
    /// [`Error::Unavailable`] (default 10 s).
    #[must_use]
    pub fn acquire_timeout(mut self, d: Duration) -> Self {
        self.acquire_timeout = d;
        self
    }

    /// Whether opening creates the schema and cairn's tables when they are missing (default
    /// `true`). With `false`, a missing schema, or a schema that does not hold cairn's store, is
    /// refused with [`Error::NotFound`] and nothing is created: what a read-only command wants,
    /// so that a mistyped schema name is an error rather than a new empty store.
    #[must_use]
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// Declares what sits between cairn and the server: [`crate::Pooler::Transaction`] for a
    /// pooler in transaction mode (PgBouncer `pool_mode = transaction`), which the URL can say
    /// too (`?cairn_pooler=transaction`). This setting wins over the URL's. See
    /// docs/OPERATIONS.md, "Behind PgBouncer".
    #[must_use]
    pub fn pooler(mut self, mode: crate::pooler::Pooler) -> Self {
        self.pooler = Some(mode);
        self
    }

    /// The pooler mode: [`PgOptions::pooler`]'s, else the URL's `cairn_pooler`, else none.
    pub(crate) fn pooler_mode(&self) -> Result<crate::pooler::Pooler> {
        if let Some(mode) = self.pooler {
            return Ok(mode);
        }
        match &self.source {
            Source::Url(url) => Ok(crate::pooler::split_pooler(url)?.1.unwrap_or_default()),
            Source::Options(_) => Ok(crate::pooler::Pooler::None),
        }
    }

    /// The schema name as given (validated when the store connects).
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    /// The driver's connect options. A URL is parsed here, so a malformed one fails when the
    /// store connects; the error never repeats the URL.
    pub(crate) fn connect_options(&self) -> Result<PgConnectOptions> {
        match &self.source {
            Source::Url(url) => connect_options_from_url(url),
            Source::Options(opts) => Ok((**opts).clone()),
        }
    }
}

/// The query parameters the driver's URL parser (sqlx 0.8) reads; `options[NAME]` parameters
/// too (see [`connect_options_from_url`]).
const DRIVER_PARAMS: [&str; 18] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// The driver's connect options for a `postgres://…` URL, with every query parameter checked
/// first: one the driver does not read is refused. The driver reads `sslmode`, `sslrootcert`,
/// `sslcert`, `sslkey` (and their dashed forms), `statement-cache-capacity`, `host`,
/// `hostaddr`, `port`, `dbname`, `user`, `password`, `application_name`, `options` and
/// `options[NAME]`.
///
/// The driver ignores a parameter it does not know with a warning log line that carries the
/// parameter's value, and a value in a URL can be a secret (a password under a mistyped key);
/// cairn's own `cairn_schema` is read and removed by the `cairn` crate's `DatabaseUrl` before
/// a URL gets here (with [`PgOptions`], use [`PgOptions::schema`]). Refusing also keeps a
/// mistyped security setting (`sslmod=require`) from being dropped silently.
///
/// The TLS settings are checked too: `sslmode` must be `disable`, `prefer`, `require`,
/// `verify-ca` or `verify-full` (`allow` is refused: the driver would never try TLS), each TLS
/// parameter may appear once, `sslcert` and `sslkey` go together, and the files they and
/// `sslrootcert` name must be regular files of at most 1 MiB holding PEM of their kind (an
/// unencrypted key); they are read here, once, and the options carry their contents. As in libpq,
/// `sslmode=require` with an `sslrootcert` verifies the server's certificate chain
/// (`verify-ca`). See docs/OPERATIONS.md, "Postgres over TLS".
///
/// # Errors
/// [`Error::InvalidInput`] for a URL the driver cannot parse, an unknown parameter or a TLS
/// setting cairn cannot honour; the message names the parameter's key when it is a plain name,
/// never its value or the URL.
pub fn connect_options_from_url(url: &str) -> Result<PgConnectOptions> {
    // cairn's own `cairn_pooler` is read by `PgOptions` and not the driver's to see.
    let (url, _) = crate::pooler::split_pooler(url)?;
    let url = url.as_str();
    let mut tls = crate::tls::UrlTls::default();
    // A URL that does not parse is left to the driver's parser, which refuses it (without
    // logging anything); its error is mapped without the URL.
    if let Ok(parsed) = url::Url::parse(url) {
        for (key, value) in parsed.query_pairs() {
            let known = DRIVER_PARAMS.contains(&&*key)
                || (key.starts_with("options[") && key.ends_with(']'));
            if !known {
                return Err(unknown_param(&key, !value.is_empty()));
            }
            tls.note(&key, &value)?;
        }
    }
    let opts = PgConnectOptions::from_str(url).map_err(map)?;
    crate::tls::checked(opts, &tls)
}

/// The refusal of query parameter `key`: named only when it is a plain name that came with a
/// value (`key=value`); anything else could be a value written without its key.
fn unknown_param(key: &str, has_value: bool) -> Error {
    let plain = has_value
        && !key.is_empty()
        && key.len() <= 64
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let which = if plain {
        format!("`{key}`")
    } else {
        "(its name is not shown)".to_owned()
    };
    let hint = if key == "cairn_schema" {
        "; it names the store's schema for cairn's database URLs (with PgOptions, call .schema())"
    } else {
        ""
    };
    Error::invalid(
        "postgres connection options",
        format!(
            "the connection URL has a query parameter the driver does not read: {which}{hint}; \
             remove it (the driver reads {}, options[NAME])",
            DRIVER_PARAMS.join(", ")
        ),
    )
}

impl fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match self.source {
            Source::Url(_) => "url <redacted>",
            Source::Options(_) => "a pool's connect options <redacted>",
        };
        f.debug_struct("PgOptions")
            .field("source", &source)
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("lock_timeout", &self.lock_timeout)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("create_if_missing", &self.create_if_missing)
            .field("pooler", &self.pooler)
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
        // The server's own schemas: `pg_*` cannot be created and `pg_catalog` must not be
        // written to; `information_schema` exists in every database and would take cairn's
        // tables as a superuser's.
        if name.starts_with("pg_") || name == "information_schema" {
            return Err(Error::invalid(
                "postgres schema name",
                format!("`{name}` is a schema of the server itself; name a schema of your own"),
            ));
        }
        Ok(Self(name.to_owned()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// How long a pooled connection may sit idle before an acquire checks it with a round trip.
///
/// By default sqlx pings a connection every time it is taken out of the pool
/// (`test_before_acquire`): one round trip on every operation's critical path. The ping finds
/// a server that went away while the connection sat in the pool; for a connection used moments
/// ago that can only be a server that went away in between, which the operation's own first
/// statement finds as well. cairn's pools skip the ping for connections idle less than this
/// (the "alive bypass window" of pools like HikariCP, there 500 ms): a server restart within
/// that window fails the next operation on each such connection with [`Error::Unavailable`],
/// which a caller retries like any transient error, and the broken connection is dropped; a
/// connection idle longer is checked as before.
pub(crate) const IDLE_BEFORE_CHECK: Duration = Duration::from_millis(500);

/// `pool` with cairn's liveness check ([`IDLE_BEFORE_CHECK`]) instead of sqlx's ping on every
/// acquire.
pub(crate) fn with_liveness_check(
    pool: sqlx::postgres::PgPoolOptions,
) -> sqlx::postgres::PgPoolOptions {
    pool.test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= IDLE_BEFORE_CHECK {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_validated() {
        for ok in [
            "public",
            "_x",
            "cairn_t_0123abcd",
            "pgx",
            "my_pg_",
            &"a".repeat(63),
        ] {
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
            // The server's own schemas.
            "information_schema",
            "pg_catalog",
            "pg_toast",
            "pg_anything",
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

    #[tokio::test]
    async fn debug_hides_a_pools_credentials_and_host() {
        let pool = sqlx::postgres::PgPoolOptions::new().connect_lazy_with(
            PgConnectOptions::new()
                .host("secret-host.example")
                .username("someone")
                .password("s3cret"),
        );
        let shown = format!("{:?}", PgOptions::from_pool(&pool));
        for secret in ["s3cret", "someone", "secret-host"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }

    #[tokio::test]
    async fn from_pool_reuses_the_pools_connect_options_with_its_own_small_pool() {
        let pool = sqlx::postgres::PgPoolOptions::new().connect_lazy_with(
            PgConnectOptions::new()
                .host("h.example")
                .port(6543)
                .username("app")
                .database("appdb"),
        );
        let opts = PgOptions::from_pool(&pool);
        let c = opts.connect_options().unwrap();
        assert_eq!(
            (c.get_host(), c.get_port(), c.get_username()),
            ("h.example", 6543, "app")
        );
        assert_eq!(c.get_database(), Some("appdb"));
        assert_eq!(opts.max_connections, 4);
        assert!(opts.create_if_missing);
    }

    #[test]
    fn a_malformed_url_is_invalid_input_without_the_url() {
        let err = PgOptions::new("postgres://u:s3cret@h:notaport/db")
            .connect_options()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }

    /// Issue 21 item 15: a parameter the driver does not read is refused before the driver
    /// sees it (the driver would log its value); the error names the key, never the value.
    #[test]
    fn unknown_query_parameters_are_refused_without_their_value() {
        for (url, named) in [
            (
                "postgres://u@h/db?sslmode=disable&bogus=hunter2",
                Some("`bogus`"),
            ),
            (
                "postgres://u@h/db?cairn_schema=hunter2",
                Some("`cairn_schema`"),
            ),
            (
                "postgres://u@h/db?passwrd=hunter2&port=5432",
                Some("`passwrd`"),
            ),
            ("postgres://u@h/db?hunter2", None),
            ("postgres://u@h/db?a%20b=hunter2", None),
        ] {
            let err = PgOptions::new(url).connect_options().unwrap_err();
            assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
            let text = err.to_string();
            assert!(!text.contains("hunter2"), "{text}");
            if let Some(key) = named {
                assert!(text.contains(key), "{text}");
            }
        }
        let ok = PgOptions::new(
            "postgres://u@h:6543/db?sslmode=disable&application_name=app&options[search_path]=x",
        )
        .connect_options()
        .unwrap();
        assert_eq!((ok.get_host(), ok.get_port()), ("h", 6543));
    }

    #[test]
    fn the_builder_sets_every_option() {
        let o = PgOptions::new("postgres://h/db")
            .schema("tenant_a")
            .max_connections(3)
            .lock_timeout(Duration::from_millis(250))
            .acquire_timeout(Duration::from_secs(2))
            .create_if_missing(false);
        assert_eq!(o.schema_name(), "tenant_a");
        assert_eq!(o.max_connections, 3);
        assert_eq!(o.lock_timeout, Duration::from_millis(250));
        assert_eq!(o.acquire_timeout, Duration::from_secs(2));
        assert!(!o.create_if_missing);
    }
}

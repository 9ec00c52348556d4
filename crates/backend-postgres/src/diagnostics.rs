//! [`cairn_migrate::Diagnostics`] for a Postgres store: cairn's tables in the store's schema,
//! checked against the tables cairn's revisions create up to the store's stamp, and the
//! additivity check's leftover scratch schemas in the store's database.

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::{Error, Result};
use cairn_migrate::bookkeeping::{self as bk, STAMP_TABLE};
use cairn_migrate::diagnostics::tables_integrity;
use cairn_migrate::{Diagnostics, Integrity, InvalidIndex, CAIRN_SET};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};

use crate::additivity::scratch;
use crate::config::{PgOptions, SchemaName};
use crate::error::map;
use crate::sql::SESSION_SETUP;
use crate::store::PgStore;

/// The tables of schema `$1`.
const SCHEMA_TABLES: &str =
    "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1";

/// How the checks reach the server.
#[derive(Clone)]
enum Source {
    /// A connection of their own per check, as the options say.
    Options(PgOptions),
    /// A connection of an open store's pool (set up for the store's schema) per check.
    Pool(PgPool),
}

/// Read-only diagnostics of the Postgres store (one schema) that [`PgOptions`] name, built from
/// the options alone ([`PgDiagnostics::new`]): it works on a store that is damaged, missing or
/// refused by the migration runner, and never creates a schema or a table; each check connects
/// for its duration only. An open store's handle (`PgBackend`'s) uses the store's pool instead.
/// `Debug` never prints the URL.
#[derive(Clone)]
pub struct PgDiagnostics {
    source: Source,
    schema: SchemaName,
}

impl std::fmt::Debug for PgDiagnostics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDiagnostics")
            .field("schema", &self.schema.as_str())
            .finish_non_exhaustive()
    }
}

/// A check's connection: its own (closed after the check; behind a transaction-mode pooler,
/// `true`, one checkout transaction, ended first) or the store's pool's (returned).
enum Conn {
    Own(PgConnection, bool),
    Pooled(PoolConnection<Postgres>),
}

impl Conn {
    fn get(&mut self) -> &mut PgConnection {
        match self {
            Conn::Own(c, _) => c,
            Conn::Pooled(c) => c,
        }
    }

    async fn close(self) {
        if let Conn::Own(mut c, pooled) = self {
            if pooled {
                let _ = crate::pooler::end(&mut c).await;
            }
            let _ = c.close().await;
        }
    }
}

/// Why a check could not connect.
enum NoConnection {
    /// The options are unusable (e.g. a URL the driver cannot parse).
    Options(Error),
    /// The server did not let us in.
    Server(Error),
}

impl PgDiagnostics {
    /// Diagnostics of the store `opts` names. Nothing is connected until a check runs.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a schema name outside `[a-z_][a-z0-9_]{0,62}`.
    pub fn new(opts: PgOptions) -> Result<Self> {
        let schema = SchemaName::parse(&opts.schema)?;
        Ok(Self {
            source: Source::Options(opts),
            schema,
        })
    }

    /// Diagnostics of `store`'s schema, on a connection of its pool per check.
    pub(crate) fn from_store(store: &PgStore) -> Self {
        Self {
            source: Source::Pool(store.pool().clone()),
            schema: store.schema().clone(),
        }
    }

    async fn connect(&self) -> std::result::Result<Conn, NoConnection> {
        let opts = match &self.source {
            Source::Pool(pool) => {
                return pool
                    .acquire()
                    .await
                    .map(Conn::Pooled)
                    .map_err(|e| NoConnection::Server(map(e)))
            }
            Source::Options(opts) => opts,
        };
        let options = opts.connect_options().map_err(NoConnection::Options)?;
        let pooled = opts.pooler_mode().map_err(NoConnection::Options)?
            == crate::pooler::Pooler::Transaction;
        let lock_timeout_ms = opts.lock_timeout.as_millis().max(1).to_string();
        // Bounded by the acquire timeout: a server that accepts the connection but never
        // answers is unreachable, not a check that hangs.
        let connected = tokio::time::timeout(opts.acquire_timeout, async {
            if pooled {
                // Behind a transaction-mode pooler a session setting and a cached statement
                // would land on a server connection other clients use, and the next statement
                // may run on another one: the check is one checkout transaction that sets what
                // it needs (see `crate::pooler`), with no statement cached.
                let options = options.statement_cache_capacity(0);
                let mut conn = PgConnection::connect_with(&options).await.map_err(map)?;
                let begin = crate::pooler::begin_sql(self.schema.as_str(), &lock_timeout_ms);
                crate::pooler::begin(&mut conn, &begin).await.map_err(map)?;
                return Ok(conn);
            }
            let mut conn = PgConnection::connect_with(&options).await.map_err(map)?;
            sqlx::query(SESSION_SETUP)
                .bind(self.schema.as_str())
                .bind(lock_timeout_ms)
                .execute(&mut conn)
                .await
                .map_err(map)?;
            Ok(conn)
        })
        .await;
        match connected {
            Ok(Ok(conn)) => Ok(Conn::Own(conn, pooled)),
            Ok(Err(e)) => Err(NoConnection::Server(e)),
            Err(_) => Err(NoConnection::Server(crate::error::connect_timed_out())),
        }
    }

    /// The schema's tables and the store's stamp of cairn's set (none without one).
    async fn catalog(&self, conn: &mut PgConnection) -> Result<(Vec<String>, Option<String>)> {
        let tables: Vec<String> = sqlx::query_scalar(SCHEMA_TABLES)
            .bind(self.schema.as_str())
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        let stamp = if tables.iter().any(|t| t == STAMP_TABLE) {
            sqlx::query_scalar(bk::sql(Dialect::Postgres).read_stamp)
                .bind(CAIRN_SET)
                .fetch_optional(&mut *conn)
                .await
                .map_err(map)?
        } else {
            None
        };
        Ok((tables, stamp))
    }
}

#[async_trait]
impl Diagnostics for PgDiagnostics {
    fn engine(&self) -> &str {
        "postgres"
    }

    /// Every table cairn's revisions create up to the store's stamp is in the schema
    /// ([`tables_integrity`]); none of them is [`Integrity::Missing`]. A server that cannot be
    /// reached is [`Integrity::Unreachable`].
    async fn integrity(&self) -> Integrity {
        let mut conn = match self.connect().await {
            Ok(c) => c,
            Err(NoConnection::Options(e)) => {
                return Integrity::Unchecked {
                    detail: e.to_string(),
                }
            }
            Err(NoConnection::Server(_)) => return Integrity::Unreachable,
        };
        let catalog = self.catalog(conn.get()).await;
        conn.close().await;
        match catalog {
            Ok((tables, stamp)) => tables_integrity(Dialect::Postgres, stamp.as_deref(), &tables),
            Err(_) => Integrity::Unchecked {
                detail: "cannot list the schema's tables".into(),
            },
        }
    }

    /// The Postgres additivity engine's scratch schemas in the store's database that no running
    /// check owns, by the engine's own rule.
    async fn scratch_leftovers(&self) -> Result<Vec<String>> {
        let mut conn = self.connect().await.map_err(|e| match e {
            NoConnection::Options(e) | NoConnection::Server(e) => e,
        })?;
        let found = scratch::leftovers(conn.get()).await;
        conn.close().await;
        found
    }

    /// The schema's invalid indexes, each with the process building it now in this database.
    async fn invalid_indexes(&self) -> Result<Vec<InvalidIndex>> {
        let mut conn = self.connect().await.map_err(|e| match e {
            NoConnection::Options(e) | NoConnection::Server(e) => e,
        })?;
        let found: Result<Vec<(String, String, Option<i32>)>> = sqlx::query_as(INVALID_INDEXES)
            .bind(self.schema.as_str())
            .fetch_all(conn.get())
            .await
            .map_err(map);
        conn.close().await;
        Ok(found?
            .into_iter()
            .map(|(name, table, building)| InvalidIndex {
                name,
                table,
                building,
            })
            .collect())
    }
}

/// The invalid indexes of schema `$1`: qualified name, qualified table, and the process
/// building each now in this database.
const INVALID_INDEXES: &str = concat!(
    "\
SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname), \
    pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(t.relname), \
    ",
    crate::sql::index_builder!(),
    " \
FROM pg_catalog.pg_index i \
JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid \
JOIN pg_catalog.pg_class t ON t.oid = i.indrelid \
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
WHERE n.nspname = $1 AND NOT i.indisvalid \
ORDER BY c.relname"
);

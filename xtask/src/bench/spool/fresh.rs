//! A fresh spool for each measurement (a new SQLite file or a new Postgres schema, dropped
//! after), and the queue and keys every row uses.

use std::sync::Arc;

use cairn::spool::SpoolConfig;
use cairn::testkit::postgres::{PgOptions, PgSpool, PgStore};
use cairn::testkit::sqlite::{SqliteOptions, SqliteSpool};
use cairn::{DedupKey, QueueName, Spool, SystemClock};

use super::super::setup::{random_tag, store_err, Backend};

pub(super) fn queue() -> QueueName {
    QueueName::new("bench").expect("a valid queue name")
}

pub(super) fn key(i: u64) -> DedupKey {
    DedupKey::from_parts(["bench", &format!("{i:08}")]).expect("a valid key")
}

/// A fresh spool: a new SQLite file, or a new schema on the Postgres server.
pub(super) struct Fresh {
    pub(super) spool: Arc<dyn Spool>,
    /// The SQLite file or the Postgres schema, for the wake consumer.
    pub(super) target: String,
    pub(super) schema: String,
    pub(super) _dir: Option<tempfile::TempDir>,
    pub(super) admin: Option<sqlx::PgPool>,
    pub(super) pg: Option<PgSpool>,
}

impl Fresh {
    pub(super) async fn open(backend: Backend, pg_url: Option<&str>) -> Result<Self, String> {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::Builder::new()
                    .prefix("cairn-bench-spool-")
                    .tempdir()
                    .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
                let path = dir.path().join("spool.db");
                let spool =
                    SqliteSpool::open(&path, SqliteOptions::default(), Arc::new(SystemClock))
                        .await
                        .map_err(store_err)?;
                Ok(Self {
                    spool: Arc::new(spool),
                    target: path.display().to_string(),
                    schema: String::new(),
                    _dir: Some(dir),
                    admin: None,
                    pg: None,
                })
            }
            Backend::Postgres => {
                let url = pg_url.ok_or("no Postgres server")?;
                let schema = format!("cairn_bench_spool_{}", random_tag());
                let admin = sqlx::PgPool::connect(url)
                    .await
                    .map_err(|e| format!("cannot connect to Postgres: {e}"))?;
                let store =
                    PgStore::open_with(PgOptions::new(url.to_owned()).schema(schema.clone()))
                        .await
                        .map_err(store_err)?;
                let spool =
                    PgSpool::from_store(&store, Arc::new(SystemClock), SpoolConfig::default())
                        .map_err(store_err)?;
                Ok(Self {
                    spool: Arc::new(spool.clone()),
                    target: url.to_owned(),
                    schema,
                    _dir: None,
                    admin: Some(admin),
                    pg: Some(spool),
                })
            }
        }
    }

    pub(super) async fn close(self) -> Result<(), String> {
        if let Some(pg) = &self.pg {
            pg.close().await;
        }
        if let Some(admin) = &self.admin {
            sqlx::query(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
                .execute(admin)
                .await
                .map_err(|e| format!("cannot drop the bench schema: {e}"))?;
            admin.close().await;
        }
        Ok(())
    }
}

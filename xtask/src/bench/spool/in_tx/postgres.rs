//! Row 7 on Postgres: the store in one schema and the application's tables in another, cairn's
//! pool and the application's own `sqlx` pool.

use std::time::Instant;

use cairn::{EnqueueOptions, Store};

use super::super::super::setup::Backend;
use super::super::super::setup::{random_tag, store_err};
use super::super::fresh::queue;
use super::subject::{
    now_micros, order_id, phases, tx_key, variants, BareRow, Phases, Subject, PG_A1, PG_A2, PG_B,
};

pub(super) struct PgSubject {
    pub(super) store: Store,
    /// The application's own pool (4 connections, no ping on acquire).
    pub(super) app: sqlx::PgPool,
    pub(super) admin: sqlx::PgPool,
    pub(super) store_schema: String,
    pub(super) app_schema: String,
    pub(super) insert_order: String,
    pub(super) insert_bare: String,
    pub(super) tag: u64,
}

impl PgSubject {
    pub(super) async fn open(url: &str) -> Result<Self, String> {
        let tag = random_tag();
        let store_schema = format!("cairn_bench_tx_{tag}");
        let app_schema = format!("cairn_bench_app_{tag}");
        let admin = sqlx::PgPool::connect(url)
            .await
            .map_err(|e| format!("cannot connect to Postgres: {e}"))?;
        let store = Store::builder(url)
            .schema(store_schema.clone())
            .open()
            .await
            .map_err(store_err)?;
        let ddl = format!(
            "CREATE SCHEMA {app_schema};
             CREATE TABLE {app_schema}.bench_order (
                 id BIGINT PRIMARY KEY,
                 customer TEXT NOT NULL,
                 amount BIGINT NOT NULL,
                 created_at BIGINT NOT NULL
             );
             CREATE TABLE {app_schema}.bench_bare_run
                 (LIKE {store_schema}.spool_run INCLUDING DEFAULTS INCLUDING IDENTITY);
             ALTER TABLE {app_schema}.bench_bare_run ADD PRIMARY KEY (run_no);"
        );
        sqlx::raw_sql(&ddl)
            .execute(&admin)
            .await
            .map_err(|e| format!("cannot create the application's tables: {e}"))?;
        let app = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect(url)
            .await
            .map_err(|e| format!("cannot connect the application's pool: {e}"))?;
        Ok(Self {
            store,
            app,
            admin,
            insert_order: format!(
                "INSERT INTO {app_schema}.bench_order (id, customer, amount, created_at) \
                 VALUES ($1, $2, $3, $4)"
            ),
            insert_bare: format!(
                "INSERT INTO {app_schema}.bench_bare_run (run_id, queue, dedup_key, state, \
                 max_attempts, priority, enqueued_at, updated_at, due_at, payload_bytes, payload, \
                 claim_attempt, claim_jitter, closed) \
                 VALUES ($1, $2, $3, 'queued', 25, 0, $4, $4, $4, $5, $6, 1, $7, false)"
            ),
            store_schema,
            app_schema,
            tag: u64::from_str_radix(&tag, 16).unwrap_or(0x5eed),
        })
    }

    pub(super) async fn close(self) -> Result<(), String> {
        self.app.close().await;
        let _ = self.store.close().await;
        let drop = format!(
            "DROP SCHEMA IF EXISTS {} CASCADE; DROP SCHEMA IF EXISTS {} CASCADE",
            self.app_schema, self.store_schema
        );
        let r = sqlx::raw_sql(&drop).execute(&self.admin).await;
        self.admin.close().await;
        r.map(|_| ())
            .map_err(|e| format!("cannot drop the bench schemas: {e}"))
    }

    async fn order(&self, conn: &mut sqlx::PgConnection, id: i64, now: i64) -> Result<(), String> {
        sqlx::query(&self.insert_order)
            .bind(id)
            .bind("customer")
            .bind(4200_i64)
            .bind(now)
            .execute(conn)
            .await
            .map(|_| ())
            .map_err(|e| format!("the order row: {e}"))
    }

    async fn bare(&self, conn: &mut sqlx::PgConnection, row: &BareRow) -> Result<(), String> {
        sqlx::query(&self.insert_bare)
            .bind(&row.run_id)
            .bind("bench")
            .bind(&row.key)
            .bind(row.now)
            .bind(2_i64)
            .bind(b"{}".as_slice())
            .bind(row.jitter)
            .execute(conn)
            .await
            .map(|_| ())
            .map_err(|e| format!("the bare row: {e}"))
    }
}

fn pg_err(e: sqlx::Error) -> String {
    format!("the application's transaction: {e}")
}

impl Subject for PgSubject {
    fn labels(&self) -> Vec<&'static str> {
        variants(Backend::Postgres)
            .iter()
            .map(|(l, _)| *l)
            .collect()
    }

    async fn one(&self, v: usize, n: u64) -> Result<Phases, String> {
        let key = tx_key(v, n);
        let id = order_id(v, n);
        let now = now_micros();
        let t0 = Instant::now();
        match variants(Backend::Postgres)[v].0 {
            PG_A1 => {
                let mut tx = self.store.begin().await.map_err(store_err)?;
                let t1 = Instant::now();
                let conn = tx.postgres().ok_or("not a Postgres transaction")?;
                self.order(conn, id, now).await?;
                let t2 = Instant::now();
                tx.enqueue(&queue(), &key, b"{}".to_vec(), EnqueueOptions::default())
                    .await
                    .map_err(store_err)?;
                let t3 = Instant::now();
                tx.commit().await.map_err(store_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
            PG_A2 => {
                let mut tx = self.app.begin().await.map_err(pg_err)?;
                let t1 = Instant::now();
                self.order(&mut tx, id, now).await?;
                let t2 = Instant::now();
                self.store
                    .enqueue_in(
                        &mut tx,
                        &queue(),
                        &key,
                        b"{}".to_vec(),
                        EnqueueOptions::default(),
                    )
                    .await
                    .map_err(store_err)?;
                let t3 = Instant::now();
                tx.commit().await.map_err(pg_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
            PG_B => {
                let row = BareRow::new(self.tag, id as u64, &key);
                let mut tx = self.app.begin().await.map_err(pg_err)?;
                let t1 = Instant::now();
                self.order(&mut tx, id, now).await?;
                let t2 = Instant::now();
                self.bare(&mut tx, &row).await?;
                let t3 = Instant::now();
                tx.commit().await.map_err(pg_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
            _ => {
                let row = BareRow::new(self.tag, id as u64, &key);
                let mut tx = self.store.begin().await.map_err(store_err)?;
                let t1 = Instant::now();
                let conn = tx.postgres().ok_or("not a Postgres transaction")?;
                self.order(conn, id, now).await?;
                let t2 = Instant::now();
                let conn = tx.postgres().ok_or("not a Postgres transaction")?;
                self.bare(conn, &row).await?;
                let t3 = Instant::now();
                tx.commit().await.map_err(store_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
        }
    }
}

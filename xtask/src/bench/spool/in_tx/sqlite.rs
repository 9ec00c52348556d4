//! Row 7 on SQLite: one store file whose application tables come from an application migration
//! set, cairn's transactions and the application's own `rusqlite` connection to the file.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cairn::testkit::sqlite::{SqliteBackend, SqliteOptions};
use cairn::{EnqueueOptions, MigrationSet, Store};

use super::super::super::setup::Backend;
use super::super::super::setup::{random_tag, store_err};
use super::super::fresh::queue;
use super::subject::{
    now_micros, order_id, phases, tx_key, variants, BareRow, Phases, Subject, LITE_A,
    LITE_A_HANDLE, LITE_B,
};

/// The application's tables on SQLite: an order row, and a table as wide as `spool_run`
/// (its columns and types after cairn's revisions 0002, 0005 and 0006) with only its primary
/// key — no unique constraints, checks or secondary indexes.
const SQLITE_APP_SET: &str = "\
CREATE TABLE bench_order (
    id INTEGER PRIMARY KEY,
    customer TEXT NOT NULL,
    amount BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE bench_bare_run (
    run_no INTEGER PRIMARY KEY,
    run_id BLOB NOT NULL,
    queue TEXT NOT NULL,
    dedup_key BLOB NOT NULL,
    supersede_group BLOB,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    enqueued_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    due_at BIGINT,
    finished_at BIGINT,
    lease_token BLOB,
    lease_consumer TEXT,
    lease_expires_at BIGINT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    reason TEXT,
    last_event_seq BIGINT NOT NULL DEFAULT 0,
    payload_bytes BIGINT NOT NULL,
    payload BLOB NOT NULL,
    claim_attempt INTEGER,
    claim_jitter BIGINT,
    closed INTEGER
);
";

const SQLITE_INSERT_ORDER: &str =
    "INSERT INTO bench_order (id, customer, amount, created_at) VALUES (?1, ?2, ?3, ?4)";
const SQLITE_INSERT_BARE: &str = "INSERT INTO bench_bare_run (run_id, queue, dedup_key, state, \
     max_attempts, priority, enqueued_at, updated_at, due_at, payload_bytes, payload, \
     claim_attempt, claim_jitter, closed) \
     VALUES (?1, ?2, ?3, 'queued', 25, 0, ?4, ?4, ?4, ?5, ?6, 1, ?7, 0)";

pub(super) struct LiteSubject {
    pub(super) backend: Arc<SqliteBackend>,
    pub(super) store: Store,
    /// The application's own connection to the store's file.
    pub(super) app: Arc<Mutex<rusqlite::Connection>>,
    pub(super) tag: u64,
    pub(super) _dir: tempfile::TempDir,
}

/// `O::default()` for the options argument of `open`: cairn's `OpenOptions` reached through
/// the type `SqliteBackend::open` takes (xtask depends on the `cairn` facade only, which
/// re-exports that type under its `backend` feature).
fn default_arg<O: Default, R>(_: &impl Fn(O) -> R) -> O {
    O::default()
}

fn lite_err(e: rusqlite::Error) -> cairn::Error {
    cairn::Error::backend("sqlite", e.to_string())
}

impl LiteSubject {
    pub(super) async fn open() -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("cairn-bench-tx-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let path = dir.path().join("store.db");
        let set = MigrationSet::from_files("bench_app", [("0001_bench_app.sql", SQLITE_APP_SET)])
            .map_err(|e| format!("the application's migration set: {e}"))?;
        let backend = {
            let path: &Path = &path;
            let open = |opts| SqliteBackend::open(path, SqliteOptions::default(), opts);
            let opts = default_arg(&open).migrations(set);
            open(opts).await.map_err(store_err)?
        };
        let backend = Arc::new(backend);
        let store = Store::from_backend(backend.clone());
        let app_path = path.clone();
        let app = tokio::task::spawn_blocking(move || {
            let conn = rusqlite::Connection::open(&app_path)?;
            conn.execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; \
                 PRAGMA busy_timeout=5000;",
            )?;
            // The durability compared must be cairn's: WAL, and a sync on every commit.
            let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
            let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
            Ok::<_, rusqlite::Error>((conn, mode, sync))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("the application's connection: {e}"))?;
        let (app, mode, sync) = app;
        if !mode.eq_ignore_ascii_case("wal") || sync != 2 {
            return Err(format!(
                "the application's connection runs journal_mode={mode}, synchronous={sync}; \
                 the comparison needs WAL and FULL (2)"
            ));
        }
        Ok(Self {
            backend,
            store,
            app: Arc::new(Mutex::new(app)),
            tag: random_tag_number(),
            _dir: dir,
        })
    }

    pub(super) async fn close(self) {
        let _ = self.store.close().await;
    }
}

fn random_tag_number() -> u64 {
    u64::from_str_radix(&random_tag(), 16).unwrap_or(0x5eed)
}

fn insert_order(conn: &rusqlite::Connection, id: i64, now: i64) -> rusqlite::Result<usize> {
    conn.prepare_cached(SQLITE_INSERT_ORDER)?
        .execute(rusqlite::params![id, "customer", 4200, now])
}

fn insert_bare(conn: &rusqlite::Connection, row: &BareRow) -> rusqlite::Result<usize> {
    conn.prepare_cached(SQLITE_INSERT_BARE)?
        .execute(rusqlite::params![
            row.run_id,
            "bench",
            row.key,
            row.now,
            2,
            b"{}".to_vec(),
            row.jitter
        ])
}

impl Subject for LiteSubject {
    fn labels(&self) -> Vec<&'static str> {
        variants(Backend::Sqlite).iter().map(|(l, _)| *l).collect()
    }

    async fn one(&self, v: usize, n: u64) -> Result<Phases, String> {
        let key = tx_key(v, n);
        let id = order_id(v, n);
        let now = now_micros();
        let t0 = Instant::now();
        match variants(Backend::Sqlite)[v].0 {
            LITE_A => {
                let q = queue();
                let [t1, t2, t3] = self
                    .backend
                    .transaction(move |tx| {
                        let t1 = Instant::now();
                        insert_order(tx.connection(), id, now).map_err(lite_err)?;
                        let t2 = Instant::now();
                        tx.enqueue(&q, &key, b"{}".to_vec(), EnqueueOptions::default())?;
                        Ok([t1, t2, Instant::now()])
                    })
                    .await
                    .map_err(store_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
            LITE_A_HANDLE => {
                let mut tx = self.store.begin().await.map_err(store_err)?;
                let t1 = Instant::now();
                tx.sqlite(move |c| insert_order(c, id, now))
                    .await
                    .map_err(store_err)?;
                let t2 = Instant::now();
                tx.enqueue(&queue(), &key, b"{}".to_vec(), EnqueueOptions::default())
                    .await
                    .map_err(store_err)?;
                let t3 = Instant::now();
                tx.commit().await.map_err(store_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
            LITE_B => {
                let row = BareRow::new(self.tag, order_id(v, n) as u64, &key);
                let app = self.app.clone();
                let [t1, t2, t3] = tokio::task::spawn_blocking(move || {
                    let conn = app
                        .lock()
                        .map_err(|_| "the application's connection is poisoned")?;
                    let r = (|| {
                        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
                        let t1 = Instant::now();
                        insert_order(&conn, id, now)?;
                        let t2 = Instant::now();
                        insert_bare(&conn, &row)?;
                        let t3 = Instant::now();
                        conn.prepare_cached("COMMIT")?.execute([])?;
                        Ok::<_, rusqlite::Error>([t1, t2, t3])
                    })();
                    if r.is_err() && !conn.is_autocommit() {
                        let _ = conn.execute_batch("ROLLBACK");
                    }
                    r.map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("the application's transaction: {e}"))?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
            _ => {
                let row = BareRow::new(self.tag, order_id(v, n) as u64, &key);
                let [t1, t2, t3] = self
                    .backend
                    .transaction(move |tx| {
                        let t1 = Instant::now();
                        insert_order(tx.connection(), id, now).map_err(lite_err)?;
                        let t2 = Instant::now();
                        insert_bare(tx.connection(), &row).map_err(lite_err)?;
                        Ok([t1, t2, Instant::now()])
                    })
                    .await
                    .map_err(store_err)?;
                Ok(phases([t0, t1, t2, t3, Instant::now()]))
            }
        }
    }
}

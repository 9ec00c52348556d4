//! Transactions through the facade on both engines: a process killed with an open transaction
//! leaves neither the application's row nor cairn's run (T1), and `Store::transaction`'s error
//! rolls both back.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use cairn::{DedupKey, MigrationSet, QueueName, Store};

/// Set in the child process: the store URL it opens.
const CHILD_URL: &str = "CAIRN_TX_CHILD_URL";
/// The child prints this once its transaction holds the row and the run.
const INSIDE: &str = "cairn-tx-child-inside";

fn shop() -> MigrationSet {
    MigrationSet::from_files(
        "shop",
        [(
            "0001_orders.sql",
            "CREATE TABLE orders (id BIGINT PRIMARY KEY)",
        )],
    )
    .unwrap()
}

async fn open(url: &str) -> Store {
    Store::builder(url)
        .migrations(shop())
        .register_in_fleet(false)
        .open()
        .await
        .unwrap_or_else(|e| panic!("open {url}: {e}"))
}

fn receipts() -> QueueName {
    QueueName::new("receipts").unwrap()
}

fn receipt(id: i64) -> DedupKey {
    DedupKey::from_parts(["receipt", &id.to_string()]).unwrap()
}

/// The application's row inside `tx`, with the engine's driver.
async fn insert_order(tx: &mut cairn::Transaction, id: i64) -> cairn::Result<()> {
    if let Some(conn) = tx.postgres() {
        sqlx::query("INSERT INTO orders (id) VALUES ($1)")
            .bind(id)
            .execute(conn)
            .await
            .map_err(|e| cairn::Error::backend("app", e.to_string()))?;
        Ok(())
    } else {
        tx.sqlite(move |c| c.execute("INSERT INTO orders (id) VALUES (?1)", [id]))
            .await
            .map(drop)
    }
}

/// Whether order `id` is committed, read through a connection of the test's own.
async fn order_exists(url: &str, schema: Option<&str>, id: i64) -> bool {
    match schema {
        None => {
            let path = url.strip_prefix("sqlite://").unwrap();
            let conn = rusqlite::Connection::open(path).unwrap();
            conn.query_row("SELECT count(*) FROM orders WHERE id = ?1", [id], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap()
                == 1
        }
        Some(schema) => {
            use sqlx::Connection;
            let server = url.split('?').next().unwrap();
            let mut conn = sqlx::PgConnection::connect(server).await.unwrap();
            sqlx::query_scalar::<_, i64>(&format!(
                "SELECT count(*) FROM \"{schema}\".orders WHERE id = $1"
            ))
            .bind(id)
            .fetch_one(&mut conn)
            .await
            .unwrap()
                == 1
        }
    }
}

/// Both engines' URLs: a temporary SQLite file and a scratch schema of the test server (with
/// the schema's name).
async fn urls(dir: &std::path::Path) -> Vec<(String, Option<String>)> {
    let server = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|why| panic!("no Postgres server for the transaction test: {why}"));
    let schema = cairn::testkit::scratch_name("cairn_tx");
    let sep = if server.contains('?') { '&' } else { '?' };
    vec![
        (format!("sqlite://{}", dir.join("shop.db").display()), None),
        (format!("{server}{sep}cairn_schema={schema}"), Some(schema)),
    ]
}

async fn drop_schema(url: &str, schema: &str) {
    use sqlx::Connection;
    let server = url.split('?').next().unwrap();
    let mut conn = sqlx::PgConnection::connect(server).await.unwrap();
    sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
}

/// T1, killed: a process holding a transaction with the application's row and cairn's run is
/// killed (SIGKILL) before it commits; reopened, the store has neither, and the key is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_inside_a_transaction_leaves_neither_row_nor_run() {
    const TEST: &str = "a_process_killed_inside_a_transaction_leaves_neither_row_nor_run";
    if let Ok(url) = std::env::var(CHILD_URL) {
        let store = open(&url).await;
        let mut tx = store.begin().await.unwrap();
        insert_order(&mut tx, 7).await.unwrap();
        tx.enqueue(&receipts(), &receipt(7), b"7".to_vec(), Default::default())
            .await
            .unwrap();
        println!("\n{INSIDE}");
        std::io::stdout().flush().unwrap();
        // Wait to be killed; the parent never writes.
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        panic!("the parent did not kill this child");
    }
    let dir = tempfile::tempdir().unwrap();
    for (url, schema) in urls(dir.path()).await {
        // Create the store (and the orders table) before the child opens it.
        open(&url).await.close().await.unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture", "--test-threads", "1"])
            .env(CHILD_URL, &url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let inside = tokio::task::spawn_blocking(move || {
            BufReader::new(out)
                .lines()
                .map_while(Result::ok)
                .any(|l| l.trim() == INSIDE)
        });
        let inside = tokio::time::timeout(Duration::from_secs(60), inside)
            .await
            .expect("the child reports its open transaction within 60 s")
            .unwrap();
        assert!(
            inside,
            "{url}: the child ended before its transaction was open"
        );
        child.kill().unwrap();
        child.wait().unwrap();

        let store = open(&url).await;
        assert!(
            !order_exists(&url, schema.as_deref(), 7).await,
            "{url}: the killed transaction's row is gone"
        );
        let again = store
            .spool()
            .enqueue(&receipts(), &receipt(7), b"7".to_vec(), Default::default())
            .await
            .unwrap();
        assert!(
            again.created,
            "{url}: the killed transaction's run is gone, its key free"
        );
        store.close().await.unwrap();
        if let Some(schema) = schema {
            drop_schema(&url, &schema).await;
        }
    }
}

/// `Store::transaction`: `Ok` commits the row and the run, `Err` rolls both back; a bulk
/// enqueue inside it is one commit with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_transaction_commits_on_ok_and_rolls_back_on_err() {
    let dir = tempfile::tempdir().unwrap();
    for (url, schema) in urls(dir.path()).await {
        let store = open(&url).await;
        let q = receipts();
        let committed = store
            .transaction(async |tx| {
                insert_order(tx, 1).await?;
                let items = (1..=3)
                    .map(|i| cairn::spool::EnqueueItem::new(receipt(i), "x"))
                    .collect();
                tx.enqueue_many(&q, items).await
            })
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(committed.len(), 3);
        assert!(order_exists(&url, schema.as_deref(), 1).await);
        let refused: cairn::Result<()> = store
            .transaction(async |tx| {
                insert_order(tx, 2).await?;
                tx.enqueue(&q, &receipt(20), b"x".to_vec(), Default::default())
                    .await?;
                Err(cairn::Error::invalid("order", "refused by the application"))
            })
            .await;
        assert!(
            matches!(refused, Err(cairn::Error::InvalidInput { .. })),
            "{refused:?}"
        );
        assert!(
            !order_exists(&url, schema.as_deref(), 2).await,
            "{url}: rolled back"
        );
        let again = store
            .spool()
            .enqueue(&q, &receipt(20), b"x".to_vec(), Default::default())
            .await
            .unwrap();
        assert!(again.created, "{url}: the rolled-back run is gone");
        // The application's statement failing (a duplicate order) fails the transaction.
        let dup = store
            .transaction(async |tx| {
                tx.enqueue(&q, &receipt(30), b"x".to_vec(), Default::default())
                    .await?;
                insert_order(tx, 1).await
            })
            .await;
        assert!(
            dup.is_err(),
            "{url}: a duplicate order fails the transaction"
        );
        let free = store
            .spool()
            .enqueue(&q, &receipt(30), b"x".to_vec(), Default::default())
            .await
            .unwrap();
        assert!(free.created, "{url}: the failed transaction's run is gone");
        store.close().await.unwrap();
        if let Some(schema) = schema {
            drop_schema(&url, &schema).await;
        }
    }
}

//! The application's statements through cairn (issue 44 item 5.4): one sea-query statement,
//! run with `Transaction::execute` / `fetch_all`, built for the transaction's engine, and one
//! classification of its errors on both engines — a duplicate key is `Error::Conflict`,
//! another constraint violation `Error::InvalidInput` without the row's values — and the
//! mapping helpers for statements the application runs on the raw connection. Each case runs
//! on SQLite and on the test Postgres server (which must be there: the test fails without it).

use cairn::sea_query::{Alias, Expr, ExprTrait, Order, Query, Value};
use cairn::spool::RunFilter;
use cairn::{DedupKey, Error, MigrationSet, QueueName, Store};
use sqlx::Connection;

/// The application's set: the same table on both engines, its bytes column `blob` (`BLOB`
/// on SQLite, `BYTEA` on Postgres).
fn shop(blob: &str) -> MigrationSet {
    let orders = format!(
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, note TEXT NOT NULL, \
         qty BIGINT CHECK (qty > 0), price DOUBLE PRECISION, receipt {blob})"
    );
    MigrationSet::from_files("shop", [("0001_orders.sql", orders.as_str())]).unwrap()
}

fn orders() -> Alias {
    Alias::new("orders")
}

fn col(name: &str) -> Alias {
    Alias::new(name)
}

/// `INSERT INTO orders (id, note, qty) VALUES (…)`, the same statement for both engines.
fn insert(id: i64, note: Option<&str>, qty: i64) -> cairn::sea_query::InsertStatement {
    Query::insert()
        .into_table(orders())
        .columns([col("id"), col("note"), col("qty")])
        .values_panic([id.into(), note.map(str::to_owned).into(), qty.into()])
        .to_owned()
}

async fn runs(store: &Store, queue: &QueueName) -> usize {
    store
        .spool()
        .runs(
            &RunFilter {
                queue: Some(queue.clone()),
                ..Default::default()
            },
            100,
        )
        .await
        .unwrap()
        .len()
}

/// The cases, on `store` (whose `orders` table comes from [`shop`]).
async fn cases(store: &Store) {
    let engine = store.engine().to_owned();
    let queue = QueueName::new("receipts").unwrap();
    let key = |id: i64| DedupKey::from_parts(["receipt", &id.to_string()]).unwrap();

    // An order and its job commit together.
    store
        .transaction(async |tx| {
            assert_eq!(tx.execute(&insert(1, Some("first"), 3)).await?, 1);
            tx.enqueue(&queue, &key(1), b"1".to_vec(), Default::default())
                .await?;
            Ok(())
        })
        .await
        .unwrap_or_else(|e| panic!("{engine}: {}", e.report()));
    assert_eq!(runs(store, &queue).await, 1, "{engine}");

    // The same id again: Conflict, and the enqueue before it rolled back with it.
    let err = store
        .transaction(async |tx| {
            tx.enqueue(&queue, &key(2), b"2".to_vec(), Default::default())
                .await?;
            tx.execute(&insert(1, Some("again"), 1)).await?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Conflict { .. }),
        "{engine}: {}",
        err.report()
    );
    assert_eq!(
        runs(store, &queue).await,
        1,
        "{engine}: the enqueue rolled back"
    );

    // Other constraint violations: InvalidInput on both engines, without the row's values.
    let not_null = store
        .transaction(async |tx| tx.execute(&insert(987_654_321, None, 1)).await)
        .await
        .unwrap_err();
    assert!(
        matches!(not_null, Error::InvalidInput { .. }),
        "{engine}: {}",
        not_null.report()
    );
    assert!(
        !not_null.report().to_string().contains("987654321"),
        "{engine}: {}",
        not_null.report()
    );
    let check = store
        .transaction(async |tx| tx.execute(&insert(5, Some("secret-note"), -4)).await)
        .await
        .unwrap_err();
    assert!(
        matches!(check, Error::InvalidInput { .. }),
        "{engine}: {}",
        check.report()
    );
    assert!(
        !check.report().to_string().contains("secret-note"),
        "{engine}: {}",
        check.report()
    );

    // Updates and deletes answer the rows they affected; a select answers the rows, with the
    // same value variants on both engines.
    let rows = store
        .transaction(async |tx| {
            tx.execute(&insert(2, Some("second"), 1)).await?;
            let third = Query::insert()
                .into_table(orders())
                .columns([
                    col("id"),
                    col("note"),
                    col("qty"),
                    col("price"),
                    col("receipt"),
                ])
                .values_panic([
                    3.into(),
                    "third".into(),
                    2.into(),
                    2.5_f64.into(),
                    vec![0_u8, 1, 2].into(),
                ])
                .to_owned();
            tx.execute(&third).await?;
            let update = Query::update()
                .table(orders())
                .value(col("qty"), Expr::col(col("qty")).add(10))
                .and_where(Expr::col(col("id")).lte(2))
                .to_owned();
            assert_eq!(tx.execute(&update).await?, 2);
            let delete = Query::delete()
                .from_table(orders())
                .and_where(Expr::col(col("id")).eq(2))
                .to_owned();
            assert_eq!(tx.execute(&delete).await?, 1);
            tx.fetch_all(
                &Query::select()
                    .columns([
                        col("id"),
                        col("note"),
                        col("qty"),
                        col("price"),
                        col("receipt"),
                    ])
                    .from(orders())
                    .order_by(col("id"), Order::Asc)
                    .to_owned(),
            )
            .await
        })
        .await
        .unwrap_or_else(|e| panic!("{engine}: {}", e.report()));
    let null_price = if engine == "postgres" {
        Value::Double(None)
    } else {
        Value::BigInt(None)
    };
    assert_eq!(
        rows,
        vec![
            vec![
                Value::BigInt(Some(1)),
                Value::String(Some("first".into())),
                Value::BigInt(Some(13)),
                null_price.clone(),
                if engine == "postgres" {
                    Value::Bytes(None)
                } else {
                    Value::BigInt(None)
                },
            ],
            vec![
                Value::BigInt(Some(3)),
                Value::String(Some("third".into())),
                Value::BigInt(Some(2)),
                Value::Double(Some(2.5)),
                Value::Bytes(Some(vec![0, 1, 2])),
            ],
        ],
        "{engine}"
    );

    // A select with a bound parameter, outside `store.transaction`.
    let mut tx = store.begin().await.unwrap();
    let one = tx
        .fetch_all(
            &Query::select()
                .column(col("note"))
                .from(orders())
                .and_where(Expr::col(col("note")).eq("third"))
                .to_owned(),
        )
        .await
        .unwrap();
    assert_eq!(
        one,
        vec![vec![Value::String(Some("third".into()))]],
        "{engine}"
    );
    tx.rollback().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sea_query_statements_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shop.db").display());
    let store = Store::builder(url)
        .migrations(shop("BLOB"))
        .open()
        .await
        .unwrap();
    cases(&store).await;

    // The raw connection's errors, classified by the same rules.
    let dup = store
        .transaction(async |tx| {
            tx.sqlite(|conn| conn.execute("INSERT INTO orders (id, note) VALUES (1, 'x')", []))
                .await
        })
        .await
        .unwrap_err();
    assert!(matches!(dup, Error::Conflict { .. }), "{}", dup.report());
    let raw = rusqlite::Connection::open_in_memory().unwrap();
    raw.execute_batch("CREATE TABLE t (a TEXT NOT NULL)")
        .unwrap();
    let e = raw.execute("INSERT INTO t VALUES (NULL)", []).unwrap_err();
    let e = cairn::classify_rusqlite_error(e);
    assert!(matches!(e, Error::InvalidInput { .. }), "{}", e.report());
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sea_query_statements_on_postgres() {
    let server = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|why| panic!("no Postgres server for the tx_execute test: {why}"));
    let schema = cairn::testkit::scratch_name("cairn_tx_execute");
    let sep = if server.contains('?') { '&' } else { '?' };
    let store = Store::builder(format!("{server}{sep}cairn_schema={schema}"))
        .migrations(shop("BYTEA"))
        .register_in_fleet(false)
        .open()
        .await
        .unwrap();
    cases(&store).await;

    // The raw connection's errors, classified by the same rules with the helper.
    let dup = store
        .transaction(async |tx| {
            let conn = tx.postgres().expect("a Postgres transaction");
            sqlx::query("INSERT INTO orders (id, note) VALUES (1, 'x')")
                .execute(conn)
                .await
                .map_err(cairn::classify_sqlx_error)?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(matches!(dup, Error::Conflict { .. }), "{}", dup.report());
    let null = store
        .transaction(async |tx| {
            let conn = tx.postgres().expect("a Postgres transaction");
            sqlx::query("INSERT INTO orders (id) VALUES (99)")
                .execute(conn)
                .await
                .map_err(cairn::classify_sqlx_error)?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(
        matches!(null, Error::InvalidInput { .. }),
        "{}",
        null.report()
    );
    store.close().await.unwrap();

    let mut admin = sqlx::PgConnection::connect(&server).await.unwrap();
    sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&mut admin)
        .await
        .unwrap();
}

/// `execute` and `fetch_all` can be awaited inside a spawned task (their futures are `Send`).
#[allow(dead_code)]
fn the_futures_are_send(
    tx: &mut cairn::Transaction,
    insert: &cairn::sea_query::InsertStatement,
    select: &cairn::sea_query::SelectStatement,
) {
    fn send<T: Send>(_: T) {}
    send(tx.execute(insert));
    send(tx.fetch_all(select));
}

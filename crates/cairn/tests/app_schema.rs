//! Where an application migration set's tables live on Postgres (issue 44 item 5.2), as the
//! facade's docs (`Transaction`, `StoreBuilder::migrations`) and docs/OPERATIONS.md state it:
//! a set runs with the store's schema (`cairn_schema`, default `public`) as its `search_path`,
//! so its unqualified tables are created in the store's schema next to cairn's, and a
//! transaction's connection, whose `search_path` is that schema (not `public`), finds them
//! unqualified; a table in another schema, `public` included, is named with its schema.

use cairn::{MigrationSet, Store};
use sqlx::Connection;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_sets_tables_live_in_the_stores_schema() {
    let server = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|why| panic!("no Postgres server for the schema test: {why}"));
    // `scratch_name` makes `[a-z0-9_]` names: safe as identifiers.
    let schema = cairn::testkit::scratch_name("cairn_app_schema");
    // A table of the application's in `public`, outside the store's schema.
    let audit = cairn::testkit::scratch_name("cairn_app_audit");
    let mut admin = sqlx::PgConnection::connect(&server)
        .await
        .expect("the test server");
    sqlx::raw_sql(&format!(
        "CREATE TABLE public.{audit} (id BIGINT PRIMARY KEY)"
    ))
    .execute(&mut admin)
    .await
    .unwrap();

    let set = MigrationSet::from_files(
        "shop",
        [(
            "0001_orders.sql",
            "CREATE TABLE orders (id BIGINT PRIMARY KEY)",
        )],
    )
    .unwrap();
    let sep = if server.contains('?') { '&' } else { '?' };
    let store = Store::builder(format!("{server}{sep}cairn_schema={schema}"))
        .migrations(set)
        .register_in_fleet(false)
        .open()
        .await
        .expect("the store opens and runs the set");

    // The set's unqualified table is in the store's schema, and only there.
    let homes: Vec<String> = sqlx::query_scalar(
        "SELECT table_schema::text FROM information_schema.tables \
         WHERE table_name = 'orders' AND table_schema IN ($1, 'public')",
    )
    .bind(&schema)
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert_eq!(
        homes,
        std::slice::from_ref(&schema),
        "the set's table is {schema}.orders"
    );

    // A transaction's connection finds it unqualified; a table in `public` is named with its
    // schema, and not found without it (the search_path is the store's schema, not `public`).
    let (insert_audit, unqualified) = (
        format!("INSERT INTO public.{audit} (id) VALUES (7)"),
        format!("SELECT count(*) FROM {audit}"),
    );
    let committed = store
        .transaction(async |tx| {
            let conn = tx.postgres().expect("a Postgres transaction");
            sqlx::query("INSERT INTO orders (id) VALUES (42)")
                .execute(&mut *conn)
                .await
                .map_err(|e| cairn::Error::backend("app", e.to_string()))?;
            sqlx::query(&insert_audit)
                .execute(&mut *conn)
                .await
                .map_err(|e| cairn::Error::backend("app", e.to_string()))?;
            let path: String = sqlx::query_scalar("SELECT current_setting('search_path')")
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| cairn::Error::backend("app", e.to_string()))?;
            let first = path.split(',').next().unwrap_or_default().trim();
            assert_eq!(
                first, schema,
                "the search_path starts with the store's schema"
            );
            Ok(())
        })
        .await;
    committed.expect("the transaction commits");
    let not_found = store
        .transaction(async |tx| {
            let conn = tx.postgres().expect("a Postgres transaction");
            sqlx::query(&unqualified)
                .execute(&mut *conn)
                .await
                .map_err(|e| cairn::Error::backend("app", e.to_string()))?;
            Ok(())
        })
        .await;
    assert!(
        not_found.is_err(),
        "a table in public is not found unqualified"
    );

    let orders: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {schema}.orders"))
        .fetch_one(&mut admin)
        .await
        .unwrap();
    let audits: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM public.{audit}"))
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!((orders, audits), (1, 1));

    store.close().await.unwrap();
    sqlx::raw_sql(&format!(
        "DROP SCHEMA {schema} CASCADE; DROP TABLE public.{audit}"
    ))
    .execute(&mut admin)
    .await
    .unwrap();
}

//! Opening a store: what the open did, `create_if_missing(false)`, closing, a service's own
//! pool, and a least-privilege role that owns its schema but cannot create schemas.

use std::str::FromStr;

use cairn_conformance::random_space;
use cairn_core::{scratch_name, EpochStore, Error, Event};
use cairn_migrate::{cairn_set, MigrationSet, Opened, Runner};
use cairn_postgres::testkit::test_server_url;
use cairn_postgres::{PgMigrator, PgOptions, PgStore};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

async fn url() -> String {
    test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"))
}

/// A connection as the test server's superuser, for setting up and inspecting.
async fn admin() -> PgConnection {
    let opts = PgConnectOptions::from_str(&url().await).expect("test server URL");
    PgConnection::connect_with(&opts)
        .await
        .expect("connect to the test server")
}

async fn exec(sql: &str) {
    let mut conn = admin().await;
    sqlx::query(sql)
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let _ = conn.close().await;
}

async fn schema_exists(schema: &str) -> bool {
    let mut conn = admin().await;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(schema)
            .fetch_one(&mut conn)
            .await
            .expect("catalog query");
    let _ = conn.close().await;
    exists
}

async fn tables_in(schema: &str) -> i64 {
    let mut conn = admin().await;
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relkind = 'r'",
    )
    .bind(schema)
    .fetch_one(&mut conn)
    .await
    .expect("catalog query");
    let _ = conn.close().await;
    n
}

/// A scratch schema name, dropped (with everything in it) when the guard goes.
struct Scratch(String);

impl Scratch {
    fn new() -> Self {
        Self(scratch_name("cairn_t"))
    }

    async fn drop_now(self) {
        exec(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.0)).await;
    }
}

fn ev(tag: &str) -> Vec<Event> {
    vec![Event::new("test.event", tag.as_bytes().to_vec())]
}

fn not_found_for(err: &Error, schema: &str) -> bool {
    matches!(err, Error::NotFound { what } if *what == format!("cairn store in schema {schema}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opened_says_what_the_open_did() {
    let s = Scratch::new();
    let opts = PgOptions::new(url().await).schema(&s.0).max_connections(2);
    let first = PgStore::open_with(opts.clone()).await.unwrap();
    assert!(
        matches!(first.opened(), Opened::Upgraded { from: None, applied } if !applied.is_empty()),
        "{:?}",
        first.opened()
    );
    let second = PgStore::open_with(opts).await.unwrap();
    assert_eq!(second.opened(), &Opened::AtHead);
    first.close().await;
    second.close().await;
    s.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_create_if_missing_a_missing_schema_is_not_found_and_nothing_is_created() {
    let s = Scratch::new();
    let opts = PgOptions::new(url().await)
        .schema(&s.0)
        .create_if_missing(false);
    let err = PgStore::open_with(opts.clone()).await.unwrap_err();
    assert!(not_found_for(&err, &s.0), "{err:?}");
    assert!(
        !schema_exists(&s.0).await,
        "the refused open created the schema"
    );
    // The migrator refuses to create it too (e.g. `cairn migrate up` on a mistyped schema).
    let err = Runner::new(cairn_set())
        .open(&PgMigrator::new(opts).unwrap())
        .await
        .map_err(Error::from)
        .unwrap_err();
    assert!(not_found_for(&err, &s.0), "{err:?}");
    assert!(
        !schema_exists(&s.0).await,
        "the migrator created the schema"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_create_if_missing_a_schema_without_a_store_is_not_found_and_left_empty() {
    let s = Scratch::new();
    exec(&format!("CREATE SCHEMA {}", s.0)).await;
    let opts = PgOptions::new(url().await)
        .schema(&s.0)
        .create_if_missing(false);
    let err = PgStore::open_with(opts).await.unwrap_err();
    assert!(not_found_for(&err, &s.0), "{err:?}");
    assert_eq!(tables_in(&s.0).await, 0, "the refused open created tables");
    s.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_create_if_missing_an_existing_store_opens() {
    let s = Scratch::new();
    let opts = PgOptions::new(url().await).schema(&s.0).max_connections(2);
    let created = PgStore::open_with(opts.clone()).await.unwrap();
    let space = random_space("existing");
    let a = created.append(&space, ev("a")).await.unwrap();
    created.close().await;
    let reader = PgStore::open_with(opts.create_if_missing(false))
        .await
        .unwrap();
    assert_eq!(reader.opened(), &Opened::AtHead);
    assert_eq!(reader.heads(&space).await.unwrap(), vec![a.head()]);
    reader.close().await;
    s.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_close_every_operation_is_unavailable() {
    let s = Scratch::new();
    let opts = PgOptions::new(url().await).schema(&s.0).max_connections(2);
    let store = PgStore::open_with(opts).await.unwrap();
    let space = random_space("closed");
    store.append(&space, ev("before")).await.unwrap();
    let clone = store.clone();
    store.close().await;
    let err = clone.append(&space, ev("after")).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    let err = store.heads(&space).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    s.drop_now().await;
}

async fn service_pool() -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .connect_with(PgConnectOptions::from_str(&url().await).unwrap())
        .await
        .expect("the service's pool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_from_a_services_pool_leaves_its_connections_and_its_pool_alone() {
    let s = Scratch::new();
    let service = service_pool().await;
    let store = PgStore::open_with(
        PgOptions::from_pool(&service)
            .schema(&s.0)
            .lock_timeout(std::time::Duration::from_millis(1234)),
    )
    .await
    .unwrap();
    let space = random_space("from-pool");
    let a = store.append(&space, ev("a")).await.unwrap();
    assert_eq!(store.heads(&space).await.unwrap(), vec![a.head()]);
    // The service's connection has none of cairn's session settings.
    let (search_path, lock_timeout): (String, String) =
        sqlx::query_as("SELECT current_setting('search_path'), current_setting('lock_timeout')")
            .fetch_one(&service)
            .await
            .unwrap();
    assert!(!search_path.contains(&s.0), "{search_path}");
    assert_ne!(lock_timeout, "1234ms");
    // Closing cairn's pool leaves the service's open.
    store.close().await;
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&service)
        .await
        .unwrap();
    assert_eq!(one, 1);
    service.close().await;
    s.drop_now().await;
}

/// Issue 9 item 3: a role that owns its schema but has no CREATE on the database opens a new
/// store, upgrades an application's set and repairs cairn's lineage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_create_on_the_database_opens_upgrades_and_repairs_its_own_schema() {
    let role = scratch_name("cairn_role");
    let schema = role.clone();
    exec(&format!("CREATE ROLE {role} LOGIN")).await;
    exec(&format!("CREATE SCHEMA {schema} AUTHORIZATION {role}")).await;
    let outcome = tokio::spawn({
        let (role, schema) = (role.clone(), schema.clone());
        async move { least_privilege_scenario(&role, &schema).await }
    })
    .await;
    exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await;
    exec(&format!("DROP ROLE IF EXISTS {role}")).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
}

async fn least_privilege_scenario(role: &str, schema: &str) {
    let mut conn = admin().await;
    let database: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let can_create: bool = sqlx::query_scalar("SELECT has_database_privilege($1, $2, 'CREATE')")
        .bind(role)
        .bind(&database)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let _ = conn.close().await;
    assert!(
        !can_create,
        "the test role must not have CREATE on the database"
    );

    let as_role = PgConnectOptions::from_str(&url().await)
        .unwrap()
        .username(role);
    let pool = PgPoolOptions::new().connect_lazy_with(as_role);
    let opts = PgOptions::from_pool(&pool)
        .schema(schema)
        .max_connections(2);

    // Open: cairn's tables are created in the existing schema.
    let store = PgStore::open_with(opts.clone())
        .await
        .unwrap_or_else(|e| panic!("open as a least-privilege role: {e}"));
    assert!(matches!(store.opened(), Opened::Upgraded { .. }));
    let space = random_space("least-privilege");
    store.append(&space, ev("a")).await.unwrap();
    store.close().await;

    // Upgrade: an application's set, one revision and then two.
    let migrator = PgMigrator::new(opts.clone()).unwrap();
    let v1 = [(
        "0001_items.sql",
        "CREATE TABLE lp_items (id bigint PRIMARY KEY);",
    )];
    let v2 = [
        v1[0],
        (
            "0002_note.sql",
            "ALTER TABLE lp_items ADD COLUMN note text;",
        ),
    ];
    for files in [&v1[..], &v2[..]] {
        let set = MigrationSet::from_files("lp_app", files.iter().copied()).unwrap();
        let opened = Runner::new(set)
            .open(&migrator)
            .await
            .unwrap_or_else(|e| panic!("upgrade as a least-privilege role: {e}"));
        assert!(matches!(opened, Opened::Upgraded { .. }), "{opened:?}");
    }

    // Repair: cairn's lineage lost, recorded again by the next open.
    exec(&format!(
        "DELETE FROM {schema}.cairn_migration_lineage WHERE set_name = 'cairn'"
    ))
    .await;
    let store = PgStore::open_with(opts)
        .await
        .unwrap_or_else(|e| panic!("repair as a least-privilege role: {e}"));
    assert_eq!(store.opened(), &Opened::LineageRepaired);
    store.close().await;
    pool.close().await;
}

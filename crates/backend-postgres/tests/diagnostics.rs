//! `PgDiagnostics`: the integrity of a healthy, damaged and missing store and of an unreachable
//! server, and the additivity check's leftover scratch schemas, on the test server (these tests
//! fail when there is none).

use std::str::FromStr;

use cairn_core::scratch_name;
use cairn_migrate::{Backend, Diagnostics, Integrity, OpenOptions};
use cairn_postgres::testkit::{harness, test_server_url};
use cairn_postgres::{PgBackend, PgDiagnostics, PgOptions};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

async fn url() -> String {
    test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"))
}

async fn connect(url: &str) -> PgConnection {
    PgConnection::connect_with(&PgConnectOptions::from_str(url).unwrap())
        .await
        .unwrap()
}

async fn exec(url: &str, sql: &str) {
    let mut conn = connect(url).await;
    sqlx::query(sql)
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let _ = conn.close().await;
}

async fn schema_exists(url: &str, schema: &str) -> bool {
    let mut conn = connect(url).await;
    let exists =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(schema)
            .fetch_one(&mut conn)
            .await
            .unwrap();
    let _ = conn.close().await;
    exists
}

/// A store the runner created holds every table of cairn's revisions.
#[tokio::test]
async fn a_healthy_store_is_intact() {
    let h = harness().await;
    let diagnostics = PgDiagnostics::new(h.options()).unwrap();
    assert_eq!(diagnostics.engine(), "postgres");
    assert_eq!(
        diagnostics.integrity().await,
        Integrity::Intact {
            detail: "every cairn table is present".into()
        }
    );
}

/// A table of the store's revisions dropped is damage, named; the other tables are not.
#[tokio::test]
async fn a_store_missing_a_table_is_damaged_and_the_table_named() {
    let h = harness().await;
    let url = url().await;
    exec(&url, &format!("DROP TABLE {}.spool_fact", h.schema())).await;
    let integrity = PgDiagnostics::new(h.options()).unwrap().integrity().await;
    assert_eq!(
        integrity,
        Integrity::Damaged {
            detail: "missing tables: spool_fact".into()
        }
    );
}

/// A schema that does not exist is no store: missing, and the check creates nothing.
#[tokio::test]
async fn a_missing_store_is_missing_and_stays_missing() {
    let url = url().await;
    let schema = scratch_name("cairn_t");
    let opts = PgOptions::new(url.clone()).schema(schema.clone());
    let diagnostics = PgDiagnostics::new(opts).unwrap();
    assert_eq!(diagnostics.integrity().await, Integrity::Missing);
    assert!(
        !schema_exists(&url, &schema).await,
        "diagnostics created it"
    );
}

/// A server that does not answer is unreachable, not a missing or damaged store.
#[tokio::test]
async fn an_unreachable_server_is_reported_as_such() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let opts = PgOptions::new(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
        .acquire_timeout(std::time::Duration::from_secs(2));
    let diagnostics = PgDiagnostics::new(opts).unwrap();
    assert_eq!(diagnostics.integrity().await, Integrity::Unreachable);
    assert!(diagnostics.scratch_leftovers().await.is_err());
}

/// A server that accepts the TCP connection but never answers (a wedged server, a port held by
/// something else) is unreachable within the acquire timeout: the checks and a migrator's look
/// end with `Unreachable` / `Error::Unavailable` instead of hanging.
#[tokio::test]
async fn a_server_that_never_answers_is_unreachable_within_the_acquire_timeout() {
    use cairn_migrate::MigrationBackend;
    use std::time::{Duration, Instant};
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    // Accepts and holds every connection without writing a byte.
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            conns.push(conn);
        }
    });
    let timeout = Duration::from_millis(500);
    let deadline = Duration::from_secs(10);
    let opts = PgOptions::new(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
        .acquire_timeout(timeout);
    let diagnostics = PgDiagnostics::new(opts.clone()).unwrap();
    let started = Instant::now();
    let found = tokio::time::timeout(deadline, diagnostics.integrity())
        .await
        .expect("integrity gives up within the acquire timeout");
    assert_eq!(found, Integrity::Unreachable);
    let listed = tokio::time::timeout(deadline, diagnostics.scratch_leftovers())
        .await
        .expect("the scratch listing gives up within the acquire timeout");
    assert!(
        matches!(listed, Err(cairn_core::Error::Unavailable { .. })),
        "{listed:?}"
    );
    let migrator = cairn_postgres::PgMigrator::new(opts).unwrap();
    let state = tokio::time::timeout(deadline, migrator.read_state("cairn"))
        .await
        .expect("the migrator's look gives up within the acquire timeout");
    assert!(
        matches!(
            state,
            Err(cairn_migrate::MigrateError::Store(
                cairn_core::Error::Unavailable { .. }
            ))
        ),
        "{state:?}"
    );
    assert!(started.elapsed() >= timeout, "each waited for the timeout");
    held.abort();
}

/// A database of its own: the scratch listing covers every schema of the database, and other
/// tests' additivity checks make theirs in the shared one. Dropped when the test ends.
struct Database {
    admin: String,
    name: String,
    url: String,
}

impl Database {
    async fn new() -> Self {
        let admin = url().await;
        let name = scratch_name("cairn_diag");
        exec(&admin, &format!("CREATE DATABASE {name}")).await;
        let mut options = url::Url::parse(&admin).unwrap();
        options.set_path(&name);
        Self {
            admin,
            name,
            url: options.to_string(),
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(exec(
                    &admin,
                    &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                ));
        })
        .join()
        .unwrap();
    }
}

/// A scratch schema whose check is gone is a leftover; one with a session of its check (the
/// check's sessions carry the schema's name as their `application_name`) is not; schemas
/// that only look alike are not scratch schemas. Listing drops nothing.
#[tokio::test]
async fn scratch_leftovers_are_the_scratch_schemas_no_running_check_owns() {
    let db = Database::new().await;
    let diagnostics = PgDiagnostics::new(PgOptions::new(db.url.clone())).unwrap();
    assert_eq!(
        diagnostics.scratch_leftovers().await.unwrap(),
        Vec::<String>::new()
    );
    let dead = scratch_name("cairn_add");
    let live = scratch_name("cairn_add");
    for schema in [&dead, &live, &"cairn_add_notes".to_owned()] {
        exec(&db.url, &format!("CREATE SCHEMA {schema}")).await;
    }
    let owner = PgConnection::connect_with(
        &PgConnectOptions::from_str(&db.url)
            .unwrap()
            .application_name(&live),
    )
    .await
    .unwrap();
    assert_eq!(
        diagnostics.scratch_leftovers().await.unwrap(),
        [dead.as_str()]
    );
    assert!(schema_exists(&db.url, &dead).await, "listing dropped it");
    owner.close().await.unwrap();
    let mut both = vec![dead, live];
    both.sort();
    // The server forgets a closed session asynchronously: poll with a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let found = diagnostics.scratch_leftovers().await.unwrap();
        if found == both {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "once its check is gone, the live schema is a leftover too: {found:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// An open store's handle checks on the store's own pool: intact while open, and, once the
/// store is closed, unreachable (it opens no connection of its own).
#[tokio::test]
async fn an_open_stores_diagnostics_use_its_pool() {
    let h = harness().await;
    let backend = PgBackend::open(h.options(), OpenOptions::default().register_in_fleet(false))
        .await
        .unwrap();
    let diagnostics = backend.diagnostics();
    assert_eq!(diagnostics.engine(), "postgres");
    assert_eq!(
        diagnostics.integrity().await,
        Integrity::Intact {
            detail: "every cairn table is present".into()
        }
    );
    backend.close().await.unwrap();
    assert_eq!(diagnostics.integrity().await, Integrity::Unreachable);
}

//! The migration backend's upgrade transaction: a revision that tries to end it fails the
//! upgrade and changes nothing (issue 9 item 5).

use std::str::FromStr;

use cairn_core::scratch_name;
use cairn_migrate::{MigrateError, MigrationBackend, MigrationSet, Runner};
use cairn_postgres::testkit::test_server_url;
use cairn_postgres::{PgMigrator, PgOptions, PgStore};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

async fn url() -> String {
    test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"))
}

async fn admin() -> PgConnection {
    let opts = PgConnectOptions::from_str(&url().await).expect("test server URL");
    PgConnection::connect_with(&opts)
        .await
        .expect("connect to the test server")
}

async fn tables_named(schema: &str, names: &[&str]) -> Vec<String> {
    let mut conn = admin().await;
    let found: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relname = ANY($2) ORDER BY 1",
    )
    .bind(schema)
    .bind(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    .fetch_all(&mut conn)
    .await
    .expect("catalog query");
    let _ = conn.close().await;
    found
}

async fn drop_schema(schema: &str) {
    let mut conn = admin().await;
    sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(&mut conn)
        .await
        .expect("drop the test schema");
    let _ = conn.close().await;
}

/// Opens a store in a new schema, then applies an application set whose only revision is
/// `sql`; returns the schema, the outcome and the set's stamp afterwards.
async fn upgrade_with(sql: &str) -> (String, Result<(), MigrateError>, Option<String>) {
    let schema = scratch_name("cairn_t");
    let opts = PgOptions::new(url().await)
        .schema(&schema)
        .max_connections(1);
    PgStore::open_with(opts.clone())
        .await
        .expect("the store opens")
        .close()
        .await;
    let migrator = PgMigrator::new(opts).unwrap();
    let set = MigrationSet::from_files("txn_app", [("0001_tx.sql", sql)]).expect("a valid set");
    let outcome = Runner::new(set).open(&migrator).await.map(|_| ());
    let stamp = migrator.read_state("txn_app").await.unwrap().stamp;
    (schema, outcome, stamp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_inside_a_revision_fails_the_upgrade_and_changes_nothing() {
    let (schema, outcome, stamp) = upgrade_with(
        "CREATE TABLE tx_before (id BIGINT); COMMIT; CREATE TABLE tx_after (id BIGINT);",
    )
    .await;
    let left = tables_named(&schema, &["tx_before", "tx_after"]).await;
    drop_schema(&schema).await;
    assert!(
        matches!(&outcome, Err(MigrateError::RevisionFailed { revision, .. }) if revision == "0001_tx"),
        "{outcome:?}"
    );
    assert_eq!(left, Vec::<String>::new(), "the upgrade left tables behind");
    assert_eq!(stamp, None, "the set was stamped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_inside_a_revision_fails_the_upgrade_and_nothing_runs_after_it() {
    let (schema, outcome, stamp) = upgrade_with(
        "CREATE TABLE tx_before (id BIGINT); ROLLBACK; CREATE TABLE tx_after (id BIGINT);",
    )
    .await;
    let left = tables_named(&schema, &["tx_before", "tx_after"]).await;
    drop_schema(&schema).await;
    assert!(
        matches!(&outcome, Err(MigrateError::RevisionFailed { revision, .. }) if revision == "0001_tx"),
        "{outcome:?}"
    );
    assert_eq!(
        left,
        Vec::<String>::new(),
        "a statement ran outside the upgrade"
    );
    assert_eq!(stamp, None, "the set was stamped");
}

/// Single-engine sets (issue 25): the fixtures of `crates/migrate/tests/fixtures`.
const SQLITE_ONLY: &[(&str, &str)] =
    cairn_migrate::embed_migrations!("../migrate/tests/fixtures/sqlite_only");
const POSTGRES_ONLY: &[(&str, &str)] =
    cairn_migrate::embed_migrations!("../migrate/tests/fixtures/postgres_only");

fn single_engine_fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrate/tests/fixtures")
        .join(name)
}

/// A Postgres-only set (no `.sqlite.sql` file) opens a Postgres store, embedded or read from
/// its directory; a SQLite-only one is refused in one line naming the missing dialect, and the
/// schema keeps no trace of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_engine_set_opens_on_its_engine_only() {
    let mut schemas = Vec::new();
    let mut outcomes = Vec::new();
    for set in [
        MigrationSet::from_embedded("solo", POSTGRES_ONLY).unwrap(),
        MigrationSet::from_dir("solo", single_engine_fixture("postgres_only")).unwrap(),
        MigrationSet::from_embedded("solo", SQLITE_ONLY).unwrap(),
        MigrationSet::from_dir("solo", single_engine_fixture("sqlite_only")).unwrap(),
    ] {
        let schema = scratch_name("cairn_t");
        let opts = PgOptions::new(url().await)
            .schema(&schema)
            .max_connections(1);
        PgStore::open_with(opts.clone())
            .await
            .expect("the store opens")
            .close()
            .await;
        let migrator = PgMigrator::new(opts).unwrap();
        let outcome = Runner::new(set).open(&migrator).await;
        let stamp = migrator.read_state("solo").await.unwrap().stamp;
        let tables = tables_named(&schema, &["solo_notes", "solo_note_tags"]).await;
        outcomes.push((outcome, stamp, tables));
        schemas.push(schema);
    }
    for schema in &schemas {
        drop_schema(schema).await;
    }
    for (outcome, stamp, tables) in &outcomes[..2] {
        assert!(
            matches!(outcome, Ok(cairn_migrate::Opened::Upgraded { applied, .. }) if applied.len() == 2),
            "{outcome:?}"
        );
        assert_eq!(stamp.as_deref(), Some("0002_note_tags"));
        assert_eq!(tables, &["solo_note_tags", "solo_notes"]);
    }
    for (outcome, stamp, tables) in &outcomes[2..] {
        let Err(e) = outcome else {
            panic!("a SQLite-only set opened a Postgres store: {outcome:?}");
        };
        assert!(
            matches!(e, MigrateError::UnsupportedDialect { .. }),
            "{e:?}"
        );
        let line = e.to_string();
        assert!(
            line.contains("SQLite-only")
                && line.contains("no Postgres SQL")
                && line.contains("0002_note_tags.postgres.sql"),
            "{line}"
        );
        assert_eq!(stamp, &None);
        assert!(tables.is_empty(), "{tables:?}");
    }
}

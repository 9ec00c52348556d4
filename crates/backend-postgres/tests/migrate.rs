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

/// Issue 48 item 3: a store whose `retry_items` table an application transaction holds (ACCESS
/// SHARE, as any open read does), and an application set at its base whose next revision
/// needs ACCESS EXCLUSIVE on it. Returns the schema, the migrator, the set and the holder.
async fn held_table() -> (String, PgMigrator, MigrationSet, PgConnection) {
    let schema = scratch_name("cairn_retry");
    let opts = PgOptions::new(url().await).schema(&schema);
    let migrator = PgMigrator::new(opts).unwrap();
    let base = [(
        "0001_items.sql",
        "CREATE TABLE retry_items (id BIGINT PRIMARY KEY)",
    )];
    Runner::new(MigrationSet::from_files("retry_app", base).unwrap())
        .open(&migrator)
        .await
        .unwrap();
    let set = MigrationSet::from_files(
        "retry_app",
        [
            base[0],
            (
                "0002_note.sql",
                "ALTER TABLE retry_items ADD COLUMN note TEXT",
            ),
        ],
    )
    .unwrap();
    let mut holder = admin().await;
    sqlx::raw_sql(&format!("BEGIN; SELECT count(*) FROM {schema}.retry_items"))
        .execute(&mut holder)
        .await
        .unwrap();
    (schema, migrator, set, holder)
}

/// Server processes of this database waiting for a lock on `schema`.retry_items.
async fn waiting_on_the_table(conn: &mut PgConnection, schema: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_catalog.pg_locks l \
         JOIN pg_catalog.pg_class c ON c.oid = l.relation \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE NOT l.granted AND n.nspname = $1 AND c.relname = 'retry_items'",
    )
    .bind(schema)
    .fetch_one(conn)
    .await
    .unwrap()
}

/// Issue 48 item 3: a revision that waits longer than its lock timeout for a table lock is
/// rolled back — so the reads queued behind its lock request go on — and the upgrade runs
/// again after a pause; once the long transaction ends it applies, reporting its tries and the
/// time they spent. A reader that gives up after a second never does meanwhile (the
/// migration's queued lock request blocks it for at most the revision lock timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_waiting_on_a_long_transaction_gives_way_and_is_tried_again() {
    let (schema, migrator, set, mut holder) = held_table().await;
    let runner = Runner::new(set)
        .with_revision_lock_timeout(std::time::Duration::from_millis(200))
        .with_revision_tries(50);
    let upgrade = tokio::spawn(async move { runner.open_with_report(&migrator).await });

    // A reader under a 1 s lock_timeout keeps reading while the upgrade waits, backs off and
    // waits again.
    let mut reader = admin().await;
    sqlx::raw_sql("SET lock_timeout = '1s'")
        .execute(&mut reader)
        .await
        .unwrap();
    let mut look = admin().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (mut waits_seen, mut was_waiting) = (0, false);
    while waits_seen < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the upgrade never waited twice"
        );
        let waiting = waiting_on_the_table(&mut look, &schema).await > 0;
        if waiting && !was_waiting {
            waits_seen += 1;
        }
        was_waiting = waiting;
        sqlx::raw_sql(&format!("SELECT count(*) FROM {schema}.retry_items"))
            .execute(&mut reader)
            .await
            .expect("a read never waits long behind the migration");
    }
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    let report = upgrade
        .await
        .unwrap()
        .expect("the upgrade applies once the table is free");
    assert!(report.tries >= 2, "{report:?}");
    assert!(
        report.lock_waits >= std::time::Duration::from_millis(200),
        "{report:?}"
    );
    assert_eq!(
        tables_named(&schema, &["retry_items"]).await,
        vec!["retry_items".to_string()]
    );
    drop_schema(&schema).await;
}

/// Issue 48 item 3: when every try gives up waiting, the upgrade fails with the lock timeout
/// and leaves the store as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_that_never_gets_its_lock_fails_after_its_tries_and_changes_nothing() {
    let (schema, migrator, set, mut holder) = held_table().await;
    let err = Runner::new(set)
        .with_revision_lock_timeout(std::time::Duration::from_millis(50))
        .with_revision_tries(2)
        .open_with_report(&migrator)
        .await
        .expect_err("the table stays held");
    assert!(
        matches!(&err, MigrateError::RevisionFailed { revision, source }
            if revision == "0002_note" && source.is_retryable()),
        "{err:?}"
    );
    assert_eq!(
        migrator
            .read_state("retry_app")
            .await
            .unwrap()
            .stamp
            .as_deref(),
        Some("0001_items")
    );
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    drop_schema(&schema).await;
}

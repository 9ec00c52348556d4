//! The Postgres additivity engine on specific revisions: the exact rule each is reported under,
//! and that a check leaves nothing behind — no event trigger (they are created in a transaction
//! that never commits, even when the revision itself says COMMIT) and no throwaway schema.

use std::collections::BTreeSet;
use std::str::FromStr;
use std::time::{Duration, Instant};

use cairn_core::{key64, scratch_name};
use cairn_migrate::additivity::{check_set, AdditivityEngine, RevisionReport, Rule, Violation};
use cairn_migrate::{cairn_revisions, MigrationSet, Revision};
use cairn_postgres::testkit::test_server_url;
use cairn_postgres::PgAdditivity;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tokio::sync::Mutex;

/// The tests of this file run one at a time, so the throwaway schemas present before and after
/// a check differ only by what that check left behind.
static SERIAL: Mutex<()> = Mutex::const_new(());

const EVENT_TRIGGERS: &str =
    "SELECT evtname::text FROM pg_event_trigger WHERE evtname LIKE 'cairn\\_add\\_%'";
const SCHEMAS: &str = "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'cairn\\_add\\_%'";

async fn url() -> String {
    test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"))
}

async fn names(query: &str) -> BTreeSet<String> {
    let opts = PgConnectOptions::from_str(&url().await).expect("test server URL");
    let mut conn = PgConnection::connect_with(&opts)
        .await
        .expect("connect to the test server");
    let rows: Vec<String> = sqlx::query_scalar(query)
        .fetch_all(&mut conn)
        .await
        .expect("catalog query");
    let _ = conn.close().await;
    rows.into_iter().collect()
}

fn revision(statements: &[&str]) -> Revision {
    Revision {
        id: "test_revision".into(),
        parent: Some(
            cairn_revisions()
                .last()
                .expect("cairn has revisions")
                .id
                .clone(),
        ),
        up_sqlite: Vec::new(),
        up_postgres: statements.iter().map(|s| (*s).to_owned()).collect(),
        description: "test".into(),
    }
}

/// Runs one check and asserts it left no event trigger and no throwaway schema behind.
async fn check(statements: &[&str]) -> Vec<Violation> {
    let _serial = SERIAL.lock().await;
    check_serially(statements).await
}

/// As [`check`], for a caller that holds [`SERIAL`].
async fn check_serially(statements: &[&str]) -> Vec<Violation> {
    let schemas_before = names(SCHEMAS).await;
    let engine = PgAdditivity::new(url().await);
    let violations = engine
        .check_revision(&cairn_revisions(), &revision(statements))
        .await
        .unwrap_or_else(|e| panic!("the check runs: {e}"));
    assert_eq!(
        names(EVENT_TRIGGERS).await,
        BTreeSet::new(),
        "an event trigger survived the check"
    );
    // Checks of other test processes on the same server come and go meanwhile; theirs are
    // claimed while they run, so a new schema nobody claims is this check's.
    let new: Vec<String> = names(SCHEMAS)
        .await
        .difference(&schemas_before)
        .cloned()
        .collect();
    let left = unclaimed(new).await;
    assert!(
        left.is_empty(),
        "the check left its schema behind: {left:?}"
    );
    violations
}

/// The schemas of `names` no live check claims.
async fn unclaimed(names: Vec<String>) -> Vec<String> {
    let opts = PgConnectOptions::from_str(&url().await).expect("test server URL");
    let mut conn = PgConnection::connect_with(&opts)
        .await
        .expect("connect to the test server");
    let mut out = Vec::new();
    for name in names {
        let free: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(claim_key(&name))
            .fetch_one(&mut conn)
            .await
            .expect("try the claim");
        if free {
            sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(claim_key(&name))
                .execute(&mut conn)
                .await
                .expect("release the claim");
            out.push(name);
        }
    }
    let _ = conn.close().await;
    out
}

fn rules_on(violations: &[Violation], table: &str) -> BTreeSet<Rule> {
    violations
        .iter()
        .filter(|v| v.table.as_deref() == Some(table))
        .map(|v| v.rule)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_additive_revision_has_no_violations() {
    let v = check(&[
        "CREATE TABLE a_new (id BIGINT PRIMARY KEY, ref BYTEA)",
        "ALTER TABLE epoch_event ADD COLUMN a_note TEXT, ADD COLUMN a_n INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE epoch_event ADD COLUMN a_v VARCHAR(3) DEFAULT 'ab'",
        "CREATE INDEX a_idx ON epoch_event (kind, a_note)",
        "CREATE VIEW a_view AS SELECT space, seq FROM epoch",
    ])
    .await;
    assert!(v.is_empty(), "{v:?}");
}

/// A storage parameter (fill factor, autovacuum settings, …) changes how rows are laid out or
/// vacuumed, never what an older build's statement returns: setting or resetting one is
/// additive. Any other table option, and a storage parameter set in the same `ALTER TABLE` as
/// another change, is still reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_parameter_is_additive_and_other_table_options_are_not() {
    let v = check(&[
        "ALTER TABLE epoch_event SET (fillfactor = 50)",
        "ALTER TABLE epoch_head SET (autovacuum_vacuum_scale_factor = 0.01, toast.autovacuum_enabled = false)",
        "ALTER TABLE epoch_head RESET (autovacuum_vacuum_scale_factor)",
    ])
    .await;
    assert!(v.is_empty(), "{v:?}");

    let v = check(&["ALTER TABLE epoch_event SET (user_catalog_table = true)"]).await;
    assert_eq!(
        rules_on(&v, "epoch_event"),
        BTreeSet::from([Rule::StatementKind, Rule::Definition]),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|x| x.detail.contains("user_catalog_table=true")),
        "the option is named: {v:?}"
    );

    // A storage parameter does not hide another change of the same statement.
    for other in [
        "SET (user_catalog_table = true)",
        "INHERIT s_parent",
        "REPLICA IDENTITY FULL",
    ] {
        let v = check(&[
            "CREATE TABLE s_parent (kind TEXT)",
            &format!("ALTER TABLE epoch_event SET (fillfactor = 50), {other}"),
        ])
        .await;
        assert!(
            rules_on(&v, "epoch_event").contains(&Rule::StatementKind),
            "{other}: {v:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identical_rebuild_is_a_rebuild_and_its_drop_a_forbidden_statement() {
    let v = check(&[
        "CREATE TABLE f_copy (LIKE epoch_head INCLUDING ALL)",
        "INSERT INTO f_copy SELECT * FROM epoch_head",
        "DROP TABLE epoch_head",
        "ALTER TABLE f_copy RENAME TO epoch_head",
    ])
    .await;
    assert_eq!(
        rules_on(&v, "epoch_head"),
        BTreeSet::from([Rule::StatementKind, Rule::Definition]),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|x| x.rule == Rule::Definition && x.detail.contains("rebuilt")),
        "the definition violation names the rebuild: {v:?}"
    );
    assert!(
        v.iter()
            .any(|x| x.rule == Rule::StatementKind
                && x.detail.starts_with("statement 3: DROP TABLE")),
        "the DROP is reported with its statement: {v:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_delete_that_deletes_nothing_is_still_a_delete() {
    let v = check(&["DELETE FROM epoch_event WHERE kind = 'no such kind'"]).await;
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].rule, Rule::StatementKind);
    assert_eq!(v[0].table.as_deref(), Some("epoch_event"));
    assert!(v[0].detail.contains("DELETE"), "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_inside_a_do_block_is_seen() {
    let v = check(&["DO $$BEGIN UPDATE epoch_head SET seq = seq WHERE false; END$$"]).await;
    assert_eq!(
        rules_on(&v, "epoch_head"),
        BTreeSet::from([Rule::StatementKind]),
        "{v:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_call_default_and_a_rewrite_are_reported_for_their_own_reasons() {
    let v = check(&["ALTER TABLE epoch_event ADD COLUMN f_at TIMESTAMPTZ DEFAULT now()"]).await;
    assert_eq!(
        rules_on(&v, "epoch_event"),
        BTreeSet::from([Rule::NewColumn]),
        "{v:?}"
    );
    let v = check(&["CLUSTER epoch USING epoch_pkey"]).await;
    assert!(
        rules_on(&v, "epoch").contains(&Rule::Definition),
        "a rewrite is a rebuild: {v:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_inside_the_revision_fails_and_publishes_no_event_trigger() {
    let v = check(&[
        "ALTER TABLE epoch ADD COLUMN a_x INTEGER",
        "COMMIT",
        "DELETE FROM epoch_head",
    ])
    .await;
    assert!(
        v.iter()
            .any(|x| x.rule == Rule::Failed && x.detail.starts_with("statement 2:")),
        "the COMMIT is refused: {v:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_outside_a_transaction_fails_and_the_rest_is_still_judged() {
    let v = check(&["VACUUM", "TRUNCATE epoch_head"]).await;
    assert!(
        v.iter()
            .any(|x| x.rule == Rule::Failed && x.detail.starts_with("statement 1:")),
        "{v:?}"
    );
    assert!(
        rules_on(&v, "epoch_head").contains(&Rule::StatementKind),
        "{v:?}"
    );
    assert!(rules_on(&v, "epoch_head").contains(&Rule::Rows), "{v:?}");
}

/// An application's set, checked the way a service opens: on a store that holds cairn's own
/// schema (seeded) first, with one synthesized row in each application table.
async fn check_app(files: &[(&str, &str)]) -> Vec<RevisionReport> {
    let _serial = SERIAL.lock().await;
    let set = MigrationSet::from_files("app", files.iter().copied()).expect("a valid app set");
    check_set(&PgAdditivity::new(url().await), &set)
        .await
        .unwrap_or_else(|e| panic!("the check runs: {e}"))
}

const APP_BASE: (&str, &str) = (
    "0001_items.sql",
    "CREATE TYPE app_mood AS ENUM ('calm', 'busy');
     CREATE TABLE app_items (id BIGINT PRIMARY KEY, name TEXT NOT NULL, at TIMESTAMPTZ NOT NULL,
         price NUMERIC(10, 2) NOT NULL, tags TEXT[] NOT NULL, flag BOOLEAN, data JSONB NOT NULL);
     CREATE TABLE app_moods (id BIGINT PRIMARY KEY, mood app_mood NOT NULL);
     CREATE TYPE app_pair AS (a INT, b INT);
     CREATE TABLE app_pairs (id BIGINT PRIMARY KEY, pair app_pair NOT NULL);",
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_revision_is_checked_over_cairns_schema_with_synthesized_rows() {
    let reports = check_app(&[
        APP_BASE,
        ("0002_note.sql", "ALTER TABLE app_items ADD COLUMN note TEXT;"),
        (
            "0003_rename.sql",
            "UPDATE app_items SET name = name || '!'; DELETE FROM app_moods; DELETE FROM epoch_head;
             DELETE FROM app_pairs;",
        ),
    ])
    .await;
    assert_eq!(reports.len(), 2);
    assert!(reports[0].violations.is_empty(), "{:?}", reports[0]);
    let v = &reports[1].violations;
    // The synthesized row (NOT NULL columns of several types filled) is seen to change.
    assert!(rules_on(v, "app_items").contains(&Rule::Rows), "{v:?}");
    assert!(
        rules_on(v, "app_items").contains(&Rule::StatementKind),
        "{v:?}"
    );
    // An enum column takes one of its labels.
    assert_eq!(
        rules_on(v, "app_moods"),
        BTreeSet::from([Rule::StatementKind, Rule::Rows]),
        "{v:?}"
    );
    // A table whose NOT NULL column has a type the synthesizer cannot fill (a composite) stays
    // empty: its DELETE is still a forbidden statement, but no rows change.
    assert_eq!(
        rules_on(v, "app_pairs"),
        BTreeSet::from([Rule::StatementKind]),
        "{v:?}"
    );
    // cairn's own tables are there, seeded, under the application's revision.
    assert!(
        rules_on(v, "epoch_head").is_superset(&BTreeSet::from([Rule::StatementKind, Rule::Rows])),
        "{v:?}"
    );
}

async fn admin_exec(sql: &str) {
    let opts = PgConnectOptions::from_str(&url().await).expect("test server URL");
    let mut conn = PgConnection::connect_with(&opts)
        .await
        .expect("connect to the test server");
    sqlx::query(sql)
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let _ = conn.close().await;
}

async fn count(sql: &str, bind: &str) -> i64 {
    let opts = PgConnectOptions::from_str(&url().await).expect("test server URL");
    let mut conn = PgConnection::connect_with(&opts)
        .await
        .expect("connect to the test server");
    let n: i64 = sqlx::query_scalar(sql)
        .bind(bind)
        .fetch_one(&mut conn)
        .await
        .expect("count query");
    let _ = conn.close().await;
    n
}

async fn schema_exists(name: &str) -> bool {
    count("SELECT count(*) FROM pg_namespace WHERE nspname = $1", name).await == 1
}

/// Polls `done` every 50 ms until it holds or `within` passes.
async fn wait_for<F, Fut>(within: Duration, what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !done().await {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The key a live check holds on its throwaway schema (the protocol every build shares).
fn claim_key(schema: &str) -> i64 {
    key64(
        "cairn 2026-11 postgres additivity scratch v1",
        &[schema.as_bytes()],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_a_killed_check_left_behind_is_dropped_by_the_next_check() {
    let _serial = SERIAL.lock().await;
    let left = scratch_name("cairn_add");
    admin_exec(&format!("CREATE SCHEMA {left}")).await;
    admin_exec(&format!("CREATE TABLE {left}.epoch (id int)")).await;
    let v = check_serially(&["CREATE TABLE k_new (id BIGINT)"]).await;
    assert!(v.is_empty(), "{v:?}");
    assert!(!schema_exists(&left).await, "the leftover schema survived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_of_a_live_check_survives_another_checks_cleanup() {
    let _serial = SERIAL.lock().await;
    // Claimed before it exists, as a check does, so no check running meanwhile takes it for a
    // leftover.
    let live = scratch_name("cairn_add");
    let opts = PgConnectOptions::from_str(&url().await).expect("test server URL");
    let mut holder = PgConnection::connect_with(&opts).await.unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(claim_key(&live))
        .execute(&mut holder)
        .await
        .unwrap();
    admin_exec(&format!("CREATE SCHEMA {live}")).await;
    check_serially(&["CREATE TABLE l_new (id BIGINT)"]).await;
    let survived = schema_exists(&live).await;
    let _ = holder.close().await;
    admin_exec(&format!("DROP SCHEMA {live} CASCADE")).await;
    assert!(survived, "a claimed schema was dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_check_leaves_no_schema_and_no_session_behind() {
    let _serial = SERIAL.lock().await;
    let engine = PgAdditivity::new(url().await);
    let task = tokio::spawn(async move {
        engine
            .check_revision(&cairn_revisions(), &revision(&["SELECT pg_sleep(25)"]))
            .await
    });
    // The check's sessions are named after its schema; the one running the revision says which.
    let sleeping = "SELECT count(*) FROM pg_stat_activity WHERE query = $1";
    wait_for(Duration::from_secs(60), "the revision runs", || async {
        count(sleeping, "SELECT pg_sleep(25)").await == 1
    })
    .await;
    let ours: Vec<String> = {
        let opts = PgConnectOptions::from_str(&url().await).expect("test server URL");
        let mut conn = PgConnection::connect_with(&opts).await.unwrap();
        let names = sqlx::query_scalar(
            "SELECT application_name::text FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(25)'",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let _ = conn.close().await;
        names
    };
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert!(schema_exists(&ours[0]).await, "{ours:?}");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    wait_for(
        Duration::from_secs(20),
        "the guard drops the schema",
        || async { !schema_exists(&ours[0]).await },
    )
    .await;
    let sessions = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1";
    wait_for(
        Duration::from_secs(20),
        "the check's sessions end",
        || async { count(sessions, &ours[0]).await == 0 },
    )
    .await;
}

/// Issue 9 item 4: a revision that reaches past the throwaway store — reads, writes or alters
/// a table in another schema, or creates an object there — is a violation for that reason,
/// and the rollback leaves the other schema as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_touching_an_object_outside_the_store_is_a_violation() {
    let other = scratch_name("cairn_t");
    admin_exec(&format!("CREATE SCHEMA {other}")).await;
    admin_exec(&format!("CREATE TABLE {other}.victim (id INT)")).await;
    admin_exec(&format!("INSERT INTO {other}.victim VALUES (1)")).await;
    let statements = [
        format!("DELETE FROM {other}.victim"),
        format!("ALTER TABLE {other}.victim ADD COLUMN x INT"),
        format!("CREATE TABLE {other}.planted (id INT)"),
        format!("CREATE TABLE o_copy AS SELECT * FROM {other}.victim"),
        "CREATE TABLE o_fine (id BIGINT)".to_owned(),
    ];
    let refs: Vec<&str> = statements.iter().map(String::as_str).collect();
    let v = check(&refs).await;
    let rows = count(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1",
        &other,
    )
    .await;
    let victim_rows = {
        let opts = PgConnectOptions::from_str(&url().await).expect("test server URL");
        let mut conn = PgConnection::connect_with(&opts).await.unwrap();
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {other}.victim"))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        let _ = conn.close().await;
        n
    };
    admin_exec(&format!("DROP SCHEMA {other} CASCADE")).await;
    for n in 1..=4 {
        assert!(
            v.iter().any(|x| x.rule == Rule::OutsideStore
                && x.detail.starts_with(&format!("statement {n}:"))
                && x.detail.contains("outside the throwaway store")),
            "statement {n} is flagged for reaching outside: {v:?}"
        );
    }
    assert!(
        !v.iter().any(|x| x.detail.starts_with("statement 5:")),
        "a statement inside the store is not: {v:?}"
    );
    assert_eq!(rows, 1, "the other schema gained or lost relations");
    assert_eq!(victim_rows, 1, "the other schema's row is gone");
}

/// Issue 13: the up-then-down check of an application revision's down SQL (`0002_*.down.sql`),
/// through `check_set`; only its down violations.
async fn down_violations(up: &str, down: &str) -> Vec<Violation> {
    let base = (
        "0001_items.sql",
        "CREATE TABLE items (id BIGINT PRIMARY KEY, name TEXT NOT NULL, qty INTEGER);
         CREATE INDEX items_name ON items (name);",
    );
    let reports = check_app(&[base, ("0002_next.sql", up), ("0002_next.down.sql", down)]).await;
    assert_eq!(reports.len(), 1);
    reports[0]
        .violations
        .iter()
        .filter(|v| v.rule == Rule::Down)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faithful_down_passes_the_up_then_down_check() {
    let v = down_violations(
        "ALTER TABLE items ADD COLUMN note TEXT;
         CREATE INDEX items_note ON items (note);
         CREATE TABLE item_tags (item BIGINT NOT NULL, tag TEXT NOT NULL);",
        "DROP TABLE item_tags; DROP INDEX items_note; ALTER TABLE items DROP COLUMN note;",
    )
    .await;
    assert!(v.is_empty(), "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_that_leaves_a_column_or_loses_rows_is_reported_with_its_reason() {
    let up = "ALTER TABLE items ADD COLUMN note TEXT;
              CREATE TABLE item_tags (item BIGINT NOT NULL, tag TEXT NOT NULL);";
    let left = down_violations(up, "DROP TABLE item_tags;").await;
    assert!(
        left.iter().any(|v| v.table.as_deref() == Some("items")
            && v.detail.contains("leaves column note behind")),
        "{left:?}"
    );
    let lost = down_violations(
        up,
        "DROP TABLE item_tags; ALTER TABLE items DROP COLUMN note; DELETE FROM items;",
    )
    .await;
    assert!(
        lost.iter().any(|v| v.table.as_deref() == Some("items")
            && v.detail.contains("1 of 1 row(s) lost or changed")),
        "{lost:?}"
    );
    let gone = down_violations(
        up,
        "DROP TABLE item_tags; ALTER TABLE items DROP COLUMN note; DROP INDEX items_name;",
    )
    .await;
    assert!(
        gone.iter()
            .any(|v| v.detail.contains("index items_name is gone")),
        "{gone:?}"
    );
    let failed = down_violations(up, "DROP TABLE no_such_table;").await;
    assert!(
        failed
            .iter()
            .any(|v| v.detail.contains("down statement 1 failed")),
        "{failed:?}"
    );
    for v in left.iter().chain(&lost).chain(&gone).chain(&failed) {
        assert!(v.to_string().starts_with("down-not-faithful"), "{v}");
    }
}

/// Issue 25: an identity column in an application's table is idiomatic; a later revision that
/// only creates another table is additive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_column_does_not_fail_a_later_additive_revision() {
    let reports = check_app(&[
        (
            "0001_items.sql",
            "CREATE TABLE items (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name TEXT);",
        ),
        ("0002_other.sql", "CREATE TABLE other (id BIGINT);"),
    ])
    .await;
    assert_eq!(reports.len(), 1);
    assert!(reports[0].violations.is_empty(), "{:?}", reports[0]);
}

/// The statements a kind's table gets in [`check_kinds`]: one, or several in order.
struct Statements(Vec<String>);

impl From<String> for Statements {
    fn from(s: String) -> Self {
        Self(vec![s])
    }
}

impl From<Vec<String>> for Statements {
    fn from(v: Vec<String>) -> Self {
        Self(v)
    }
}

/// Issue 25: an application's set whose base creates every idiomatic kind of table
/// ([`cairn_conformance::cases::table_kinds`]: identity columns always and by default, `serial`,
/// `bigserial`, a sequence default, an enum, range, list and hash partitioned tables, a
/// generated column, defaulted NOT NULL columns, CHECK constraints), then `next(table)` for
/// each kind's table (one or more statements) as its second revision; that revision's
/// violations, with the tables.
async fn check_kinds<S: Into<Statements>>(
    next: impl Fn(&str) -> S,
) -> (Vec<Violation>, Vec<&'static str>) {
    use cairn_conformance::cases::{kinds_app_set, table_kinds};
    use cairn_core::schema::Dialect;
    let tables: Vec<&'static str> = table_kinds()
        .into_iter()
        .filter(|k| k.sql(Dialect::Postgres).is_some())
        .map(|k| k.table)
        .collect();
    let statements: Vec<String> = tables.iter().flat_map(|t| next(t).into().0).collect();
    let set = kinds_app_set(Dialect::Postgres, &statements);
    let _serial = SERIAL.lock().await;
    let mut reports = check_set(&PgAdditivity::new(url().await), &set)
        .await
        .unwrap_or_else(|e| panic!("the check runs: {e}"));
    assert_eq!(reports.len(), 1);
    (reports.remove(0).violations, tables)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_table_passes_a_later_additive_revision() {
    let (v, tables) = check_kinds(|t| format!("ALTER TABLE {t} ADD COLUMN k_note TEXT")).await;
    assert_eq!(tables.len(), 12, "{tables:?}");
    assert!(v.is_empty(), "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_table_holds_a_synthesized_row() {
    // Deleting is forbidden whatever the rows; only a seeded row makes the rows change.
    let (v, tables) = check_kinds(|t| format!("DELETE FROM {t}")).await;
    for t in tables {
        assert!(
            rules_on(&v, t).contains(&Rule::Rows),
            "{t} was not seeded: {v:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_null_column_without_default_still_fails_beside_every_kind() {
    let (v, tables) =
        check_kinds(|t| format!("ALTER TABLE {t} ADD COLUMN k_must TEXT NOT NULL")).await;
    for (i, t) in tables.iter().enumerate() {
        let stmt = format!("statement {}:", i + 1);
        assert!(
            v.iter()
                .any(|x| x.rule == Rule::Failed && x.detail.starts_with(&stmt)),
            "{t}: {v:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_writes_that_a_new_trigger_refuses_still_fail_beside_every_kind() {
    let (v, tables) = check_kinds(|t| {
        vec![
            format!(
                "CREATE FUNCTION {t}_no() RETURNS trigger LANGUAGE plpgsql \
                 AS $$BEGIN RAISE EXCEPTION 'no'; END$$"
            ),
            format!(
                "CREATE TRIGGER {t}_guard BEFORE INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION {t}_no()"
            ),
        ]
    })
    .await;
    for t in tables {
        let rules = rules_on(&v, t);
        assert!(rules.contains(&Rule::Trigger), "{t}: {v:?}");
        assert!(rules.contains(&Rule::OldWrites), "{t}: {v:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_narrowed_check_fails_the_old_writes_on_the_synthesized_row() {
    let (v, _) = check_kinds(|t| {
        if t == "k_check" {
            "ALTER TABLE k_check DROP CONSTRAINT k_check_qty, \
             ADD CONSTRAINT k_check_qty CHECK (qty > 100) NOT VALID"
                .to_owned()
        } else {
            format!("ALTER TABLE {t} ADD COLUMN k_note TEXT")
        }
    })
    .await;
    let on_check = rules_on(&v, "k_check");
    assert!(on_check.contains(&Rule::OldWrites), "{v:?}");
    assert!(on_check.contains(&Rule::StatementKind), "{v:?}");
    assert!(
        v.iter().all(|x| x.table.as_deref() == Some("k_check")),
        "only k_check: {v:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_enum_label_changes_the_synthesized_rows() {
    let (v, _) = check_kinds(|t| {
        if t == "k_enum" {
            "ALTER TYPE k_mood RENAME VALUE 'calm' TO 'quiet'".to_owned()
        } else {
            "SELECT 1".to_owned()
        }
    })
    .await;
    assert!(rules_on(&v, "k_enum").contains(&Rule::Rows), "{v:?}");
}

/// A row of a table whose key is `GENERATED ALWAYS AS IDENTITY`, referenced by a row of
/// another table: an older writer's delete and re-insert of it keeps its key, so the
/// reference holds and a later additive revision passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_referenced_identity_always_row_does_not_fail_a_later_additive_revision() {
    let reports = check_app(&[
        (
            "0001_base.postgres.sql",
            "CREATE TABLE parent (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name TEXT NOT NULL);
             CREATE TABLE child (id BIGINT PRIMARY KEY, parent_id BIGINT NOT NULL REFERENCES parent(id));",
        ),
        ("0002_x.postgres.sql", "CREATE TABLE other (id INT);"),
    ])
    .await;
    assert_eq!(reports.len(), 1);
    assert!(reports[0].violations.is_empty(), "{:?}", reports[0]);
}

/// The same referenced identity-always row still fails old writes that a new trigger refuses:
/// keeping the key on re-insert hides no real violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_referenced_identity_always_row_still_fails_a_refused_insert() {
    let reports = check_app(&[
        (
            "0001_base.postgres.sql",
            "CREATE TABLE parent (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name TEXT NOT NULL);
             CREATE TABLE child (id BIGINT PRIMARY KEY, parent_id BIGINT NOT NULL REFERENCES parent(id));",
        ),
        (
            "0002_guard.postgres.sql",
            "CREATE FUNCTION parent_no() RETURNS trigger LANGUAGE plpgsql
               AS $$BEGIN RAISE EXCEPTION 'no'; END$$;
             CREATE TRIGGER parent_guard BEFORE INSERT ON parent FOR EACH ROW EXECUTE FUNCTION parent_no();",
        ),
    ])
    .await;
    assert_eq!(reports.len(), 1);
    let v = &reports[0].violations;
    assert!(rules_on(v, "parent").contains(&Rule::OldWrites), "{v:?}");
    assert!(rules_on(v, "child").is_empty(), "{v:?}");
}

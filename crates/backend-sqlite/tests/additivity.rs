//! Direct checks of the SQLite additivity engine: one revision per case on top of cairn's own
//! history, each asserting the rule it is reported under.

use std::time::{Duration, Instant};

use cairn_migrate::additivity::{AdditivityEngine, Rule, Violation};
use cairn_migrate::{cairn_revisions, Revision};
use cairn_sqlite::SqliteAdditivity;

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
        up_sqlite: statements.iter().map(|s| (*s).to_owned()).collect(),
        up_postgres: Vec::new(),
        description: "test".into(),
    }
}

async fn check(statements: &[&str]) -> Vec<Violation> {
    SqliteAdditivity::new()
        .check_revision(&cairn_revisions(), &revision(statements))
        .await
        .expect("the check runs")
}

fn rules(v: &[Violation]) -> Vec<Rule> {
    v.iter().map(|x| x.rule).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_add_column_and_index_pass() {
    let v = check(&[
        "ALTER TABLE epoch_event ADD COLUMN note TEXT",
        "ALTER TABLE epoch_head ADD seen INTEGER NOT NULL DEFAULT -1",
        "CREATE INDEX epoch_event_note ON epoch_event (note, kind)",
        "CREATE TABLE extra (id INTEGER PRIMARY KEY, v TEXT NOT NULL CHECK (v <> ''))",
        "INSERT INTO extra (v) VALUES ('seeded by the revision')",
    ])
    .await;
    assert!(v.is_empty(), "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identical_rebuild_is_refused() {
    let v = check(&[
        "CREATE TABLE copy (space BLOB NOT NULL, id BLOB NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (space, id))",
        "INSERT INTO copy SELECT space, id, seq FROM epoch_head",
        "DROP TABLE epoch_head",
        "ALTER TABLE copy RENAME TO epoch_head",
    ])
    .await;
    let r = rules(&v);
    assert!(r.contains(&Rule::StatementKind), "{v:?}");
    assert!(r.contains(&Rule::Definition), "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_delete_that_touches_nothing_is_refused_for_its_kind() {
    let v = check(&["DELETE FROM epoch_event WHERE 1 = 0"]).await;
    assert_eq!(rules(&v), vec![Rule::StatementKind], "{v:?}");
    assert_eq!(v[0].table.as_deref(), Some("epoch_event"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_of_json_payloads_changes_seeded_rows() {
    // The seed holds JSON and non-JSON payloads, so the rows differ afterwards too.
    let v = check(&["DELETE FROM epoch_event WHERE json_valid(payload)"]).await;
    let r = rules(&v);
    assert!(
        r.contains(&Rule::StatementKind) && r.contains(&Rule::Rows),
        "{v:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vacuum_cannot_run_in_the_transaction() {
    let v = check(&["VACUUM"]).await;
    assert!(rules(&v).contains(&Rule::Failed), "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_on_a_new_table_that_writes_an_existing_one_is_refused() {
    let v = check(&[
        "CREATE TABLE side (x INTEGER)",
        "CREATE TRIGGER side_ins AFTER INSERT ON side BEGIN DELETE FROM epoch_head WHERE 1 = 0; END",
        "INSERT INTO side VALUES (1)",
    ])
    .await;
    assert_eq!(rules(&v), vec![Rule::StatementKind], "{v:?}");
    assert!(v[0].detail.contains("side_ins"), "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_statements_are_flagged_for_review() {
    let v = check(&["PRAGMA user_version = 7"]).await;
    assert_eq!(rules(&v), vec![Rule::Unrecognised], "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_column_rules_each_name_the_column() {
    for (sql, want) in [
        (
            "ALTER TABLE epoch ADD COLUMN g INTEGER AS (seq + 1)",
            "generated",
        ),
        (
            "ALTER TABLE epoch_head ADD COLUMN r BLOB REFERENCES epoch (id)",
            "REFERENCES",
        ),
        (
            "ALTER TABLE epoch ADD COLUMN c INTEGER CHECK (c IS NULL)",
            "CHECK",
        ),
    ] {
        let v = check(&[sql]).await;
        assert!(
            v.iter()
                .any(|x| x.rule == Rule::NewColumn && x.detail.contains(want)),
            "{sql}: {v:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_corpus_change_is_judged_quickly() {
    use cairn_conformance::cases::{corpus, corpus_history, KINDS_REVISION};
    let history = corpus_history(cairn_core::schema::Dialect::Sqlite);
    let mut slowest = Duration::ZERO;
    for change in corpus() {
        let Some(sql) = change.sqlite else { continue };
        let start = Instant::now();
        let rev = Revision {
            parent: Some(KINDS_REVISION.into()),
            ..revision(sql)
        };
        let v = SqliteAdditivity::new()
            .check_revision(&history, &rev)
            .await
            .expect("the check runs");
        slowest = slowest.max(start.elapsed());
        println!(
            "{:40} {:?}",
            change.name,
            v.iter().map(ToString::to_string).collect::<Vec<_>>()
        );
        assert_eq!(v.is_empty(), change.allowed, "{}: {v:?}", change.name);
    }
    println!("slowest check: {slowest:?}");
    // Generous bound for a loaded shared machine; a check normally takes a few tens of ms.
    assert!(
        slowest < Duration::from_secs(5),
        "slowest check took {slowest:?}"
    );
}

/// An application's set: `items` at its base, then `statements` as its second revision, checked
/// on a store that holds cairn's own set first.
async fn check_app(statements: &[&str]) -> Vec<Violation> {
    use cairn_migrate::additivity::{check_set, CheckTarget};
    let base = Revision {
        id: "0001_items".into(),
        parent: None,
        up_sqlite: vec![
            "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INTEGER)".into(),
        ],
        up_postgres: Vec::new(),
        description: "items".into(),
    };
    let next = Revision {
        id: "0002_next".into(),
        parent: Some(base.id.clone()),
        ..revision(statements)
    };
    let set = cairn_migrate::MigrationSet::new("inventory", vec![base, next]).unwrap();
    let target = CheckTarget::for_revision(&set, 1).unwrap();
    assert_eq!(target.prelude().len(), 1, "cairn's own set comes first");
    let mut reports = check_set(&SqliteAdditivity::new(), &set)
        .await
        .expect("the check runs");
    assert_eq!(reports.len(), 1);
    reports.remove(0).violations
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_revision_adding_a_plain_column_passes() {
    let v = check_app(&[
        "ALTER TABLE items ADD COLUMN note TEXT",
        "CREATE INDEX items_note ON items (note)",
    ])
    .await;
    assert!(v.is_empty(), "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_tables_synthesized_row_is_judged() {
    // The table is empty until the engine synthesizes its row; a rewrite of it shows up as
    // changed rows, which only a seeded row can.
    let v = check_app(&["UPDATE items SET name = 'renamed'"]).await;
    assert!(rules(&v).contains(&Rule::Rows), "{v:?}");
    assert!(
        v.iter()
            .any(|x| x.rule == Rule::Rows && x.table.as_deref() == Some("items")),
        "{v:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_writes_to_an_application_table_must_still_succeed() {
    // A trigger on a new table is allowed on its own; one that makes the old INSERT into
    // `items` fail is caught by replaying the old writes on the synthesized row.
    let v = check_app(&[
        "CREATE TABLE items_guard (id INTEGER PRIMARY KEY)",
        "CREATE TRIGGER items_guard_insert BEFORE INSERT ON items BEGIN SELECT RAISE(ABORT, 'no'); END",
    ])
    .await;
    assert!(rules(&v).contains(&Rule::Trigger), "{v:?}");
    assert!(rules(&v).contains(&Rule::OldWrites), "{v:?}");
}

/// A scratch directory in the temporary directory as a check leaves it: the directory with a
/// throwaway store in it, and its sibling lock file. Returns both paths.
/// A scratch directory and its lock file as a check makes them; with `live`, the lock file is
/// locked (as a running check holds it) before the directory exists, so a check running in
/// another test meanwhile never sees it unlocked.
fn scratch_like_a_check(
    live: bool,
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    Option<std::fs::File>,
) {
    let name = cairn_core::scratch_name("cairn_additivity");
    let dir = std::env::temp_dir().join(&name);
    let lock = std::env::temp_dir().join(format!("{name}.lock"));
    std::fs::write(&lock, b"").unwrap();
    let held = live.then(|| {
        let held = std::fs::File::open(&lock).unwrap();
        fs4::FileExt::try_lock(&held).expect("nobody else holds the new lock");
        held
    });
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("check.db"), b"synthetic").unwrap();
    (dir, lock, held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_checks_scratch_directory_is_removed_by_the_next_check() {
    // A killed check leaves its directory and an unlocked lock file (the kill released it).
    let (dir, lock, _) = scratch_like_a_check(false);
    check(&["ALTER TABLE epoch_event ADD COLUMN note TEXT"]).await;
    assert!(
        !dir.exists(),
        "the leftover {} is still there",
        dir.display()
    );
    assert!(
        !lock.exists(),
        "its lock file {} is still there",
        lock.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_checks_scratch_directory_survives_another_checks_cleanup() {
    // A live check holds the lock on its lock file for as long as it runs.
    let (dir, lock, held) = scratch_like_a_check(true);
    check(&["ALTER TABLE epoch_event ADD COLUMN note TEXT"]).await;
    assert!(
        dir.join("check.db").exists(),
        "a live check's directory was removed"
    );
    assert!(lock.exists(), "a live check's lock file was removed");
    drop(held);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&lock).unwrap();
}

/// Issue 13: the executed up-then-down check on an application's set (`items` at its base, a
/// second revision with `down`), through `check_set`: only down violations are returned.
async fn check_app_down(up: &[&str], down: &[&str]) -> Vec<Violation> {
    let base = Revision {
        id: "0001_items".into(),
        parent: None,
        up_sqlite: vec![
            "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INTEGER)".into(),
            "CREATE INDEX items_name ON items (name)".into(),
        ],
        up_postgres: Vec::new(),
        description: "items".into(),
    };
    let next = Revision {
        id: "0002_next".into(),
        parent: Some(base.id.clone()),
        ..revision(up)
    };
    let down: Vec<String> = down.iter().map(|s| (*s).to_owned()).collect();
    let set = cairn_migrate::MigrationSet::new("inventory", vec![base, next])
        .unwrap()
        .with_down("0002_next", down.clone(), down)
        .unwrap();
    let mut reports = cairn_migrate::additivity::check_set(&SqliteAdditivity::new(), &set)
        .await
        .expect("the check runs");
    reports
        .remove(0)
        .violations
        .into_iter()
        .filter(|v| v.rule == Rule::Down)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faithful_down_passes_the_up_then_down_check() {
    let v = check_app_down(
        &[
            "ALTER TABLE items ADD COLUMN note TEXT",
            "CREATE INDEX items_note ON items (note)",
            "CREATE TABLE item_tags (item INTEGER NOT NULL, tag TEXT NOT NULL)",
        ],
        &[
            "DROP TABLE item_tags",
            "DROP INDEX items_note",
            "ALTER TABLE items DROP COLUMN note",
        ],
    )
    .await;
    assert!(v.is_empty(), "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_that_leaves_a_column_or_loses_rows_is_reported_with_its_reason() {
    let up = [
        "ALTER TABLE items ADD COLUMN note TEXT",
        "CREATE TABLE item_tags (item INTEGER NOT NULL, tag TEXT NOT NULL)",
    ];
    let left = check_app_down(&up, &["DROP TABLE item_tags"]).await;
    assert!(
        left.iter().any(|v| v.table.as_deref() == Some("items")
            && v.detail.contains("leaves column note behind")),
        "{left:?}"
    );
    let lost = check_app_down(
        &up,
        &[
            "DROP TABLE item_tags",
            "ALTER TABLE items DROP COLUMN note",
            "DELETE FROM items",
        ],
    )
    .await;
    assert!(
        lost.iter().any(|v| v.table.as_deref() == Some("items")
            && v.detail.contains("1 of 1 row(s) lost or changed")),
        "{lost:?}"
    );
    let gone = check_app_down(
        &up,
        &[
            "DROP TABLE item_tags",
            "ALTER TABLE items DROP COLUMN note",
            "DROP INDEX items_name",
        ],
    )
    .await;
    assert!(
        gone.iter()
            .any(|v| v.detail.contains("index items_name is gone")),
        "{gone:?}"
    );
    let failed = check_app_down(&up, &["DROP TABLE no_such_table"]).await;
    assert!(
        failed
            .iter()
            .any(|v| v.detail.contains("down statement 1 failed")),
        "{failed:?}"
    );
    for v in left.iter().chain(&lost).chain(&gone).chain(&failed) {
        assert_eq!(v.rule, Rule::Down);
        assert!(v.to_string().starts_with("down-not-faithful"), "{v}");
    }
}

/// Issue 25: the tables of every idiomatic kind SQLite has
/// ([`cairn_conformance::cases::table_kinds`]: generated columns, AUTOINCREMENT, a rowid alias,
/// defaulted NOT NULL columns, CHECK constraints).
fn kind_tables() -> Vec<&'static str> {
    cairn_conformance::cases::table_kinds()
        .into_iter()
        .filter(|k| k.sql(cairn_core::schema::Dialect::Sqlite).is_some())
        .map(|k| k.table)
        .collect()
}

/// An application's set whose base creates every kind of [`kind_tables`], then `next` as its
/// second revision: that revision's violations.
async fn check_kinds(next: Vec<String>) -> Vec<Violation> {
    let set = cairn_conformance::cases::kinds_app_set(cairn_core::schema::Dialect::Sqlite, &next);
    let mut reports = cairn_migrate::additivity::check_set(&SqliteAdditivity::new(), &set)
        .await
        .expect("the check runs");
    assert_eq!(reports.len(), 1);
    reports.remove(0).violations
}

fn on(v: &[Violation], table: &str) -> Vec<Rule> {
    v.iter()
        .filter(|x| x.table.as_deref() == Some(table))
        .map(|x| x.rule)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_table_passes_a_later_additive_revision() {
    let tables = kind_tables();
    assert_eq!(tables.len(), 5, "{tables:?}");
    let mut next = vec!["CREATE TABLE k_other (id INTEGER PRIMARY KEY)".to_owned()];
    next.extend(
        tables
            .iter()
            .map(|t| format!("ALTER TABLE {t} ADD COLUMN k_note TEXT")),
    );
    let v = check_kinds(next).await;
    assert!(v.is_empty(), "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_table_holds_a_synthesized_row() {
    // Deleting is forbidden whatever the rows; only a seeded row makes the rows change.
    let tables = kind_tables();
    let v = check_kinds(tables.iter().map(|t| format!("DELETE FROM {t}")).collect()).await;
    for t in tables {
        assert!(on(&v, t).contains(&Rule::Rows), "{t} was not seeded: {v:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_writes_that_a_new_trigger_refuses_still_fail_beside_every_kind() {
    let tables = kind_tables();
    let v = check_kinds(
        tables
            .iter()
            .map(|t| {
                format!(
                    "CREATE TRIGGER {t}_guard BEFORE INSERT ON {t} BEGIN SELECT RAISE(ABORT, 'no'); END"
                )
            })
            .collect(),
    )
    .await;
    for t in tables {
        let rules = on(&v, t);
        assert!(rules.contains(&Rule::Trigger), "{t}: {v:?}");
        assert!(rules.contains(&Rule::OldWrites), "{t}: {v:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_null_column_without_default_still_fails_beside_every_kind() {
    for t in kind_tables() {
        let v = check_kinds(vec![format!(
            "ALTER TABLE {t} ADD COLUMN k_must TEXT NOT NULL"
        )])
        .await;
        assert!(v.iter().any(|x| x.rule == Rule::Failed), "{t}: {v:?}");
    }
}

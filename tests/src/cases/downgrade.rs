//! Down cases (D…): compensating down SQL stored at apply time and run by any build
//! (`Runner::down`, `cairn migrate down --to REV`).
//!
//! The down SQL of a revision is stored in the store when the revision is applied, so the
//! build that rolls back — here always the older build `v1`, which never had the revisions it
//! undoes — runs it from the store. cairn's own set carries no down SQL: its cases check that
//! `down` past one of its revisions is refused, naming it, and changes nothing.

use cairn_migrate::{
    Classification, Downgraded, MigrateError, MigrationSet, Opened, Revision, Runner, RunnerHooks,
    CAIRN_SET,
};

use super::migrations::{rev, run, state, table_rev, Subject, DEADLINE};
use crate::MigrationHarness;

/// The expand build `v2` of the application set: two revisions on top of the base, each with
/// down SQL. The second's down only works while the first's table exists, so running them in
/// the wrong order fails.
fn v2_revisions(s: Subject) -> Vec<Revision> {
    vec![
        rev(
            "d_0002_notes",
            &s.head(),
            &[
                "ALTER TABLE app_items ADD COLUMN note TEXT",
                "CREATE TABLE d_side (id BIGINT NOT NULL PRIMARY KEY, item BIGINT)",
            ],
        ),
        rev(
            "d_0003_labels",
            "d_0002_notes",
            &[
                "ALTER TABLE d_side ADD COLUMN label TEXT",
                "CREATE INDEX d_side_label ON d_side (label)",
            ],
        ),
    ]
}

/// Attaches the same down SQL for both dialects.
fn with_down(set: MigrationSet, revision: &str, sql: &[&str]) -> MigrationSet {
    let sql: Vec<String> = sql.iter().map(|s| (*s).to_owned()).collect();
    set.with_down(revision, sql.clone(), sql)
        .expect("valid down SQL")
}

/// `v2` with its down SQL, plus `extra` revisions after it.
fn v2_set(s: Subject, extra: Vec<Revision>) -> MigrationSet {
    let mut revs = v2_revisions(s);
    revs.extend(extra);
    let set = with_down(
        s.set(revs),
        "d_0002_notes",
        &[
            "DROP TABLE d_side",
            "ALTER TABLE app_items DROP COLUMN note",
        ],
    );
    with_down(
        set,
        "d_0003_labels",
        &[
            "DROP INDEX d_side_label",
            "ALTER TABLE d_side DROP COLUMN label",
        ],
    )
}

fn runner(set: MigrationSet) -> Runner {
    Runner::new(set).with_lock_timeout(DEADLINE)
}

/// Runs `down --to to` as `runner` through the harness's migration backend.
async fn down<H: MigrationHarness>(
    h: &H,
    runner: &Runner,
    to: &str,
) -> Result<Downgraded, MigrateError> {
    let m = h.migrator().await;
    runner.down(m.as_ref(), to).await
}

/// The application's base table holds exactly these `(id, name, qty)` rows.
async fn assert_items<H: MigrationHarness>(h: &H, rows: &[(i64, &str, i64)], what: &str) {
    let total = h
        .query_i64("SELECT count(*) FROM app_items")
        .await
        .unwrap_or_else(|e| panic!("{what}: count app_items: {e}"));
    assert_eq!(total, rows.len() as i64, "{what}: app_items row count");
    for (id, name, qty) in rows {
        let found = h
            .query_i64(&format!(
                "SELECT count(*) FROM app_items WHERE id = {id} AND name = '{name}' AND qty = {qty}"
            ))
            .await
            .unwrap_or_else(|e| panic!("{what}: read app_items: {e}"));
        assert_eq!(found, 1, "{what}: row {id} of app_items is intact");
    }
}

/// D1: an older build (`v1`, which never had the revisions) runs `down` on a store the expand
/// build `v2` migrated and wrote: the stored down SQL runs newest first, the schema and the
/// stamp and lineage are exactly `v1`'s again, the rows of the old table are intact, and `v1`
/// then classifies the store at head and opens it without writing; `v2` upgrades it again.
pub async fn d1_app_older_build_runs_down_and_is_at_head<H: MigrationHarness>(h: &H) {
    let s = Subject::App;
    s.prepare(h).await;
    let v1 = s.build(vec![]);
    run(h, &v1).await.expect("v1 opens");
    h.execute_sql("INSERT INTO app_items (id, name, qty) VALUES (1, 'a', 1), (2, 'b', 2)")
        .await
        .expect("seed app_items");
    let (schema, before) = (h.schema().await, state(h, s).await);

    let v2 = runner(v2_set(s, vec![]));
    let opened = run(h, &v2).await.expect("v2 upgrades");
    assert!(matches!(opened, Opened::Upgraded { .. }), "{opened:?}");
    for sql in [
        "INSERT INTO app_items (id, name, qty, note) VALUES (3, 'c', 3, 'new')",
        "UPDATE app_items SET note = 'noted' WHERE id = 1",
        "INSERT INTO d_side (id, item, label) VALUES (1, 1, 'x')",
    ] {
        h.execute_sql(sql).await.expect("v2 writes");
    }
    assert_ne!(h.schema().await, schema, "v2 changed the schema");

    let done = down(h, &v1, &s.head()).await.expect("D1: v1 runs down");
    assert_eq!(done.from, "d_0003_labels");
    assert_eq!(done.to, s.head());
    assert_eq!(
        done.reverted,
        ["d_0003_labels", "d_0002_notes"],
        "D1: newest first"
    );
    assert_eq!(h.schema().await, schema, "D1: v1's schema exactly");
    assert_eq!(state(h, s).await, before, "D1: v1's stamp and lineage");
    assert_items(h, &[(1, "a", 1), (2, "b", 2), (3, "c", 3)], "D1").await;
    let m = h.migrator().await;
    assert_eq!(
        v1.status(m.as_ref()).await.expect("status"),
        Classification::AtHead {
            repair_lineage: false
        },
        "D1: v1 finds the store at its head"
    );
    assert_eq!(run(h, &v1).await.expect("v1 opens"), Opened::AtHead);

    // Deploy v2 again: it upgrades, stores its down SQL again, and a second down works.
    let again = run(h, &v2).await.expect("v2 upgrades again");
    assert_eq!(
        again,
        Opened::Upgraded {
            from: Some(s.head()),
            applied: vec!["d_0002_notes".into(), "d_0003_labels".into()],
        }
    );
    down(h, &v1, &s.head())
        .await
        .expect("D1: the down SQL was stored again");
    assert_eq!(h.schema().await, schema);
    // Down to the store's own revision is a no-op.
    let noop = down(h, &v1, &s.head()).await.expect("no-op down");
    assert!(noop.reverted.is_empty());
}

/// D2: `down` past a revision with no stored down SQL is refused naming it; a target outside
/// the store's history is refused; nothing changes. On cairn's own set, whose revisions carry
/// no down SQL (and `MigrationSet::with_down` refuses to attach any).
pub async fn d2_down_without_stored_sql_refused<H: MigrationHarness>(h: &H) {
    d2(h, Subject::Cairn).await;
    let err = Subject::Cairn
        .set(vec![table_rev("d2_plain", &Subject::Cairn.head())])
        .with_down("d2_plain", vec!["SELECT 1".into()], vec!["SELECT 1".into()])
        .expect_err("cairn's own set takes no down SQL");
    assert!(
        matches!(err, MigrateError::InvalidSet { ref set, .. } if set == CAIRN_SET),
        "{err}"
    );
}

/// D2 on an application's set: a revision applied without a down file has no stored down SQL.
pub async fn d2_app_down_without_stored_sql_refused<H: MigrationHarness>(h: &H) {
    d2(h, Subject::App).await;
}

async fn d2<H: MigrationHarness>(h: &H, s: Subject) {
    s.prepare(h).await;
    let build = s.build(vec![table_rev("d2_plain", &s.head())]);
    run(h, &build).await.expect("upgrade");
    let (schema, before) = (h.schema().await, state(h, s).await);
    let err = down(h, &s.build(vec![]), &s.head())
        .await
        .expect_err("D2: refused");
    assert!(
        matches!(err, MigrateError::NoDownSql { ref revision, .. } if revision == "d2_plain"),
        "{err}"
    );
    assert!(err.to_string().contains("d2_plain"), "{err}");
    let err = down(h, &build, "d2_no_such_revision")
        .await
        .expect_err("D2: unknown target");
    assert!(matches!(err, MigrateError::DownRefused { .. }), "{err}");
    assert_eq!(h.schema().await, schema, "D2: schema unchanged");
    assert_eq!(state(h, s).await, before, "D2: stamp and lineage unchanged");
}

/// D3: a down that fails — an injected failure after the stamp and lineage are rewritten, or a
/// stored statement that fails halfway — changes nothing: schema, stamp, lineage, rows and the
/// stored down SQL (a later down still works). Down SQL that would end the transaction is
/// refused when its revision is applied.
pub async fn d3_app_failed_down_changes_nothing<H: MigrationHarness>(h: &H) {
    let s = Subject::App;
    s.prepare(h).await;
    let v1 = s.build(vec![]);
    run(h, &v1).await.expect("v1 opens");
    h.execute_sql("INSERT INTO app_items (id, name, qty) VALUES (7, 'g', 7)")
        .await
        .expect("seed");
    let schema_v1 = h.schema().await;
    let broken = rev(
        "d_0004_broken",
        "d_0003_labels",
        &["CREATE TABLE d_broken (id BIGINT)"],
    );
    let v3 = runner(
        v2_set(s, vec![broken])
            .with_down(
                "d_0004_broken",
                vec!["DROP TABLE d_broken".into(), "DROP TABLE d_no_such".into()],
                vec!["DROP TABLE d_broken".into(), "DROP TABLE d_no_such".into()],
            )
            .expect("valid"),
    );
    run(h, &v3).await.expect("v3 upgrades");
    let (schema, before) = (h.schema().await, state(h, s).await);

    let err = down(h, &v1, "d_0003_labels")
        .await
        .expect_err("D3: a failing statement fails the down");
    assert!(
        matches!(err, MigrateError::DownFailed { ref revision, .. } if revision == "d_0004_broken"),
        "{err}"
    );
    assert_eq!(
        h.schema().await,
        schema,
        "D3: the first statement rolled back"
    );
    assert_eq!(state(h, s).await, before);

    // A failure after the stamp and lineage were rewritten, on a store at v2.
    let h = h.fresh().await;
    s.prepare(&h).await;
    run(&h, &v1).await.expect("v1 opens");
    h.execute_sql("INSERT INTO app_items (id, name, qty) VALUES (7, 'g', 7)")
        .await
        .expect("seed");
    run(&h, &runner(v2_set(s, vec![])))
        .await
        .expect("v2 upgrades");
    let (schema, before) = (h.schema().await, state(&h, s).await);
    let failing = s.build(vec![]).with_hooks(RunnerHooks {
        fail_after_lineage_write: true,
        ..RunnerHooks::default()
    });
    let err = down(&h, &failing, &s.head())
        .await
        .expect_err("D3: the injected failure surfaces");
    assert!(matches!(err, MigrateError::DownFailed { .. }), "{err}");
    assert_eq!(h.schema().await, schema, "D3: schema unchanged");
    assert_eq!(
        state(&h, s).await,
        before,
        "D3: stamp and lineage unchanged"
    );
    assert_items(&h, &[(7, "g", 7)], "D3").await;
    down(&h, &v1, &s.head())
        .await
        .expect("D3: the stored down SQL survived the failed attempt");
    assert_eq!(h.schema().await, schema_v1);
    assert_items(&h, &[(7, "g", 7)], "D3").await;

    // Down SQL that would end the transaction is refused before anything runs.
    let commits = runner(
        s.set(vec![table_rev("d3_commit", &s.head())])
            .with_down("d3_commit", vec!["COMMIT".into()], vec!["COMMIT".into()])
            .expect("valid set"),
    );
    let err = run(&h, &commits).await.expect_err("refused");
    assert!(
        matches!(err, MigrateError::RevisionFailed { ref revision, .. } if revision == "d3_commit"),
        "{err}"
    );
    assert_eq!(h.schema().await, schema_v1);
}

/// D4: two nodes racing — one rolls the store back to `v1` while another deploys `v3` — end in
/// one consistent state: the stamp is one of the two, the schema is that revision's, and the
/// stored down SQL matches the schema (a final down to `v1` restores `v1`'s schema exactly).
pub async fn d4_app_racing_down_and_up_end_consistent<H: MigrationHarness>(h: &H) {
    let s = Subject::App;
    let v1 = s.build(vec![]);
    let v3 = runner(with_down(
        v2_set(s, vec![table_rev("d_0004_more", "d_0003_labels")]),
        "d_0004_more",
        &["DROP TABLE d_0004_more"],
    ));
    for round in 0..3 {
        let h = h.fresh().await;
        s.prepare(&h).await;
        run(&h, &v1).await.expect("v1 opens");
        let schema_v1 = h.schema().await;
        let state_v1 = state(&h, s).await;
        run(&h, &runner(v2_set(s, vec![])))
            .await
            .expect("v2 upgrades");
        let (m1, m2) = (h.migrator().await, h.migrator().await);
        let head = s.head();
        let (downed, upped) = tokio::join!(v1.down(m1.as_ref(), &head), v3.open(m2.as_ref()));
        downed.unwrap_or_else(|e| panic!("D4 round {round}: down: {e}"));
        upped.unwrap_or_else(|e| panic!("D4 round {round}: up: {e}"));
        let now = state(&h, s).await;
        let stamp = now.stamp.clone().expect("a stamp");
        if stamp == s.head() {
            assert_eq!(now, state_v1, "D4 round {round}: v1's bookkeeping");
            assert_eq!(h.schema().await, schema_v1, "D4 round {round}: v1's schema");
        } else {
            assert_eq!(stamp, "d_0004_more", "D4 round {round}: one of the two");
            let m = h.migrator().await;
            assert_eq!(
                v3.status(m.as_ref()).await.expect("status"),
                Classification::AtHead {
                    repair_lineage: false
                }
            );
            assert!(h.schema().await.contains_key("d_0004_more"));
            down(&h, &v1, &s.head())
                .await
                .unwrap_or_else(|e| panic!("D4 round {round}: final down: {e}"));
            assert_eq!(h.schema().await, schema_v1, "D4 round {round}: v1's schema");
        }
    }
}

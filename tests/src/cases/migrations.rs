//! Migration cases (M…): the lineage-aware runner on a real store.
//!
//! Builds with different histories are modelled in one process by giving the runner different
//! revision chains: a set's base revisions followed by test revisions. Test revisions use SQL
//! both engines accept, so every case runs unchanged on SQLite and Postgres.
//!
//! Every case runs for two sets (a [`Subject`]): cairn's own (`m4_…`), and an application's
//! (`m4_app_…`): a set named `app` whose base is `tests/fixtures/app_v1`, opened on a store
//! cairn's own set already created — the way a service opens: cairn's set first, then its own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_core::schema::Dialect;
use cairn_core::{EpochDiagnostics, Error, Seq};
use cairn_migrate::additivity::{check_set, Rule};
use cairn_migrate::{
    cairn_revisions, classify, embed_migrations, Classification, MigrateError, MigrationSet,
    Opened, Revision, Runner, RunnerHooks, StoredState, CAIRN_SET,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::support::ev;
use crate::{proptest_cases, random_space, AdditivityHarness, MigrationHarness};

/// How long a case waits for something that must happen promptly (an open that takes no lock,
/// an append released by a commit). Generous: it bounds a wait, it is never slept.
pub(super) const DEADLINE: Duration = Duration::from_secs(20);

/// The application set's name in these cases.
pub(super) const APP_SET: &str = "app";

/// Build 1 of the imaginary service: the base revision `0001_items` (table `app_items`).
pub(super) const APP_V1: &[(&str, &str)] = embed_migrations!("fixtures/app_v1");
/// Build 2: the same base, then `0002_item_notes` and `0003_item_events` (per-dialect files).
const APP_V2: &[(&str, &str)] = embed_migrations!("fixtures/app_v2");
/// Another build 2, diverged after the base: `0002_item_audit`.
const APP_V2_DIVERGED: &[(&str, &str)] = embed_migrations!("fixtures/app_v2_diverged");

/// The migration set a case runs on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Subject {
    /// cairn's own set: its revisions, then test revisions.
    Cairn,
    /// An application's set (`app`): the base of `tests/fixtures/app_v1`, then test revisions,
    /// on a store cairn's own set created first.
    App,
}

impl Subject {
    pub(super) fn name(self) -> &'static str {
        match self {
            Subject::Cairn => CAIRN_SET,
            Subject::App => APP_SET,
        }
    }

    /// The set's base revisions, which every build of these cases has.
    pub(super) fn base(self) -> Vec<Revision> {
        match self {
            Subject::Cairn => cairn_revisions(),
            Subject::App => app_set(APP_V1).revisions().to_vec(),
        }
    }

    /// The last base revision, the parent of the first test revision.
    pub(super) fn head(self) -> String {
        self.base().last().expect("a set has revisions").id.clone()
    }

    /// The base revisions followed by `extra`.
    pub(super) fn set(self, extra: Vec<Revision>) -> MigrationSet {
        let mut revs = self.base();
        revs.extend(extra);
        MigrationSet::new(self.name(), revs).expect("a valid test chain")
    }

    pub(super) fn build(self, extra: Vec<Revision>) -> Runner {
        Runner::new(self.set(extra)).with_lock_timeout(DEADLINE)
    }

    /// An existing table of the set's base that the additive revision adds a column to.
    fn base_table(self) -> &'static str {
        match self {
            Subject::Cairn => "epoch_event",
            Subject::App => "app_items",
        }
    }

    /// Brings a new store location to where the set is opened: nothing for cairn's own set;
    /// cairn's own set (through the store's normal open) for an application's.
    pub(super) async fn prepare<H: MigrationHarness>(self, h: &H) {
        if self == Subject::App {
            h.open()
                .await
                .unwrap_or_else(|e| panic!("{}: cairn's own set: {e}", h.backend()));
        }
    }
}

/// An application set from embedded fixture files.
pub(super) fn app_set(files: &[(&str, &str)]) -> MigrationSet {
    MigrationSet::from_embedded(APP_SET, files).expect("the fixture set is valid")
}

/// A test revision with the same SQL on both engines.
pub(super) fn rev(id: &str, parent: &str, sql: &[&str]) -> Revision {
    let sql: Vec<String> = sql.iter().map(|s| (*s).to_owned()).collect();
    Revision {
        id: id.into(),
        parent: Some(parent.into()),
        up_sqlite: sql.clone(),
        up_postgres: sql,
        description: format!("test revision {id}"),
    }
}

/// A test revision that creates its own table, named after it.
pub(super) fn table_rev(id: &str, parent: &str) -> Revision {
    rev(
        id,
        parent,
        &[&format!(
            "CREATE TABLE {id} (id BIGINT NOT NULL PRIMARY KEY, note TEXT)"
        )],
    )
}

/// The release build N+1 of the rollback story: an additive revision on an existing table of
/// the set (for cairn's own set, the epoch log itself) plus a new table.
fn additive_next(s: Subject) -> Vec<Revision> {
    vec![rev(
        "t_0002_event_note",
        &s.head(),
        &[
            &format!("ALTER TABLE {} ADD COLUMN note TEXT", s.base_table()),
            "CREATE TABLE t_0002_side (id BIGINT NOT NULL PRIMARY KEY, note TEXT)",
            "CREATE INDEX t_0002_side_note ON t_0002_side (note)",
        ],
    )]
}

pub(super) async fn state<H: MigrationHarness>(h: &H, s: Subject) -> StoredState {
    h.migrator()
        .await
        .read_state(s.name())
        .await
        .expect("read the migration state")
}

/// Opens the epoch store as a build whose `s` set is `runner`'s: for cairn's own set through
/// the harness; for an application's, cairn's set first (the store's normal open), then the
/// application's set through the runner.
async fn try_open_as<H: MigrationHarness>(
    h: &H,
    s: Subject,
    runner: &Runner,
) -> Result<Arc<dyn EpochDiagnostics>, Error> {
    match s {
        Subject::Cairn => h.open_as(runner).await,
        Subject::App => {
            let store = h.open().await?;
            runner.open(h.migrator().await.as_ref()).await?;
            Ok(store)
        }
    }
}

async fn open_as<H: MigrationHarness>(
    h: &H,
    s: Subject,
    runner: &Runner,
) -> Arc<dyn EpochDiagnostics> {
    try_open_as(h, s, runner)
        .await
        .unwrap_or_else(|e| panic!("{}: open failed: {e}", h.backend()))
}

/// Opens the store with `runner` through the migration backend only (no epoch store).
pub(super) async fn run<H: MigrationHarness>(
    h: &H,
    runner: &Runner,
) -> Result<Opened, MigrateError> {
    let m = h.migrator().await;
    runner.open(m.as_ref()).await
}

/// Exercises the epoch log through `store`: append, read the heads and the feed, repair; and,
/// for an application's set, writes and reads its base table naming only the base columns.
async fn use_store<H: MigrationHarness>(
    h: &H,
    s: Subject,
    store: &dyn EpochDiagnostics,
    label: &str,
) {
    let space = random_space(label);
    let a = store
        .append(&space, ev(format!("{label}-1")))
        .await
        .expect("append");
    let b = store
        .append(&space, ev(format!("{label}-2")))
        .await
        .expect("second append");
    assert_eq!(b.parents, vec![a.id]);
    let heads = store.heads(&space).await.expect("heads");
    assert_eq!(heads.len(), 1);
    assert_eq!(heads[0].id, b.id);
    let page = store.events_since(&space, None, 10).await.expect("feed");
    assert_eq!(page.events.len(), 2);
    store.repair_heads(&space).await.expect("repair");
    if s == Subject::App {
        use_app_table(h, label).await;
    }
}

/// Inserts, updates and reads back one row of `app_items`, naming only the base revision's
/// columns (what build 1 of the service does).
async fn use_app_table<H: MigrationHarness>(h: &H, label: &str) {
    static NEXT_ID: AtomicI64 = AtomicI64::new(1_000);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    h.execute_sql(&format!(
        "INSERT INTO app_items (id, name, qty) VALUES ({id}, '{label}', 1)"
    ))
    .await
    .unwrap_or_else(|e| panic!("{label}: write the application's table: {e}"));
    h.execute_sql(&format!(
        "UPDATE app_items SET qty = qty + 1 WHERE id = {id}"
    ))
    .await
    .unwrap_or_else(|e| panic!("{label}: update the application's table: {e}"));
    let found = h
        .query_i64(&format!(
            "SELECT count(*) FROM app_items WHERE id = {id} AND name = '{label}' AND qty = 2"
        ))
        .await
        .unwrap_or_else(|e| panic!("{label}: read the application's table: {e}"));
    assert_eq!(found, 1, "{label}: the application's row reads back");
}

/// Declares each case twice, for cairn's own set and for the application set.
macro_rules! for_both_sets {
    ($( $(#[$doc:meta])* $cairn:ident, $app:ident => $body:ident; )*) => {
        $(
            $(#[$doc])*
            pub async fn $cairn<H: MigrationHarness>(h: &H) {
                $body(h, Subject::Cairn).await;
            }

            $(#[$doc])*
            ///
            /// On an application's set, opened after cairn's own.
            pub async fn $app<H: MigrationHarness>(h: &H) {
                $body(h, Subject::App).await;
            }
        )*
    };
}

for_both_sets! {
    /// M2: real stores match the model over random revision trees (up to three revisions on
    /// top of the set's base) and up to eight opens by any build, some of which upgrade without
    /// recording lineage. After every open: the outcome, stamp, lineage, tables and columns,
    /// and whether the open committed anything.
    m2_real_stores_match_the_model, m2_app_real_stores_match_the_model => m2;
    /// M3: builds whose heads lie on one line of history, opening in any order, never refuse
    /// each other, and the store ends at the newest head any of them brought.
    m3_one_line_of_history_never_refuses, m3_app_one_line_of_history_never_refuses => m3;
    /// M4 and the rollback story: an older build opens a store a newer build migrated — without
    /// taking the lock, while another connection holds it — and then appends, reads and
    /// repairs.
    m4_older_build_uses_newer_store_without_the_lock,
    m4_app_older_build_uses_newer_store_without_the_lock => m4;
    /// M6: a store opened by the older build keeps working across a newer build's migration;
    /// its write, blocked by the migration's transaction, completes after the commit.
    m6_live_older_connection_survives_a_migration,
    m6_app_live_older_connection_survives_a_migration => m6;
    /// M7: a diverged branch is refused without taking the lock, changes nothing, names both
    /// revisions; the common ancestor still opens.
    m7_divergence_refused_without_the_lock, m7_app_divergence_refused_without_the_lock => m7;
    /// M8: an opener that found the store behind and then waited out a newer build's migration
    /// returns ahead and runs nothing (the test holds the lock and migrates in between).
    m8_second_look_under_the_lock_returns_ahead,
    m8_app_second_look_under_the_lock_returns_ahead => m8;
    /// M9: lineage repair after a runner that records none, and the base exemption.
    m9_lineage_repair_and_base_exemption, m9_app_lineage_repair_and_base_exemption => m9;
    /// M10: an upgrade that fails after writing the lineage leaves schema, stamp and lineage as
    /// they were.
    m10_failed_upgrade_changes_nothing, m10_app_failed_upgrade_changes_nothing => m10;
    /// M9 (issue 9 item 6): a stamp row deleted while the lineage stays, and a dropped lineage
    /// table, are refused as inconsistent by every build — naming the repair command, changing
    /// nothing — until `Runner::repair` (`cairn migrate repair`) restores them.
    m9_lost_stamp_or_lineage_table_refused_until_repaired,
    m9_app_lost_stamp_or_lineage_table_refused_until_repaired => m9_lost_bookkeeping;
    /// M9: a store at this build's head (past the set's base) whose lineage is another
    /// history's gets this build's lineage, by an open and by `Runner::repair`; the schema and
    /// stamp are untouched, and the older build then finds the store ahead.
    m9_foreign_lineage_at_head_repaired, m9_app_foreign_lineage_at_head_repaired => m9_foreign;
    /// M10 (issue 9 item 5): a revision that would end the upgrade transaction (`COMMIT`,
    /// `END`, `ROLLBACK`, `BEGIN`) fails the upgrade and leaves schema, stamp and lineage
    /// exactly as they were; the backend's `execute` refuses such a statement too.
    m10_transaction_control_in_a_revision_changes_nothing,
    m10_app_transaction_control_in_a_revision_changes_nothing => m10_transaction_control;
    /// M11: the same revision id with different content is refused and named.
    m11_same_id_different_content_refused, m11_app_same_id_different_content_refused => m11;
    /// The rollback story end to end: build N+1 migrates additively and writes; build N, rolled
    /// back to, keeps working on the same store with no manual step and reads N+1's epochs;
    /// N+1 then opens again without migrating.
    m_rollback_story_end_to_end, m_app_rollback_story_end_to_end => rollback_story;
}

async fn m3<H: MigrationHarness>(h: &H, s: Subject) {
    let head = s.head();
    let line = [
        table_rev("m3_a", &head),
        table_rev("m3_b", "m3_a"),
        table_rev("m3_c", "m3_b"),
    ];
    let builds: Vec<Runner> = (0..=line.len())
        .map(|n| s.build(line[..n].to_vec()))
        .collect();
    for order in [[0, 3, 1, 2], [2, 1, 3, 0], [1, 2, 0, 3], [3, 2, 1, 0]] {
        let h = h.fresh().await;
        let mut newest = 0;
        for &b in &order {
            let store = open_as(&h, s, &builds[b]).await;
            use_store(&h, s, store.as_ref(), "m3").await;
            newest = newest.max(b);
            let stamp = state(&h, s).await.stamp;
            assert_eq!(
                stamp.as_deref(),
                Some(builds[newest].set().head().id.as_str()),
                "M3: order {order:?}"
            );
        }
    }
}

async fn m4<H: MigrationHarness>(h: &H, s: Subject) {
    let newer = s.build(additive_next(s));
    let older = s.build(vec![]);
    let n1 = open_as(h, s, &newer).await;
    use_store(h, s, n1.as_ref(), "m4-newer").await;
    let before = state(h, s).await;

    let m = h.migrator().await;
    let held = m.lock(DEADLINE).await.expect("take the migration lock");
    let opened = tokio::time::timeout(DEADLINE, run(h, &older))
        .await
        .expect("M4: an older build must not wait for the migration lock")
        .expect("M4: the older build opens the newer store");
    assert_eq!(
        opened,
        Opened::Ahead {
            stamp: newer.set().head().id.clone()
        }
    );
    held.rollback().await.expect("release the lock");

    let old = open_as(h, s, &older).await;
    use_store(h, s, old.as_ref(), "m4-older").await;
    assert_eq!(
        state(h, s).await,
        before,
        "M4: the older build left stamp and lineage alone"
    );
}

async fn m6<H: MigrationHarness>(h: &H, s: Subject) {
    let older = s.build(vec![]);
    let newer = s.build(additive_next(s));
    let live = open_as(h, s, &older).await;
    let space = random_space("m6");
    let first = live.append(&space, ev("m6-before")).await.unwrap();

    let m = h.migrator().await;
    let mut tx = m.lock(DEADLINE).await.expect("take the migration lock");
    for sql in newer.set().head().up(m.dialect()) {
        tx.execute(sql).await.expect("apply the newer revision");
    }
    tx.write_state(
        s.name(),
        &newer.set().head().id,
        Some(&newer.set().lineage(m.dialect())),
    )
    .await
    .unwrap();

    match s {
        Subject::Cairn => {
            let blocked = {
                let live = Arc::clone(&live);
                let space = space.clone();
                tokio::spawn(async move { live.append(&space, ev("m6-during")).await })
            };
            // The append must wait for the migration: it cannot finish while the transaction
            // is open.
            let mut blocked = blocked;
            assert!(
                tokio::time::timeout(Duration::from_millis(300), &mut blocked)
                    .await
                    .is_err(),
                "M6: an append finished while the migration held the lock"
            );
            tx.commit().await.expect("commit the migration");
            let during = tokio::time::timeout(DEADLINE, blocked)
                .await
                .expect("M6: the blocked append completes after the commit")
                .expect("task")
                .expect("M6: the blocked append succeeds");
            assert_eq!(during.parents, vec![first.id]);
            assert_eq!(during.seq, Seq(2));
        }
        Subject::App => {
            // The older build's write to the table the migration alters must wait for it.
            let mut blocked =
                h.execute_sql("INSERT INTO app_items (id, name, qty) VALUES (6, 'm6-during', 1)");
            assert!(
                tokio::time::timeout(Duration::from_millis(300), &mut blocked)
                    .await
                    .is_err(),
                "M6: a write to the altered table finished while the migration held the lock"
            );
            tx.commit().await.expect("commit the migration");
            tokio::time::timeout(DEADLINE, blocked)
                .await
                .expect("M6: the blocked write completes after the commit")
                .expect("M6: the blocked write succeeds");
            let n = h
                .query_i64("SELECT count(*) FROM app_items WHERE id = 6 AND note IS NULL")
                .await
                .expect("read the application's table");
            assert_eq!(
                n, 1,
                "M6: the older build's row is stored, the new column empty"
            );
        }
    }
    use_store(h, s, live.as_ref(), "m6-after").await;
    assert_eq!(
        state(h, s).await.stamp.as_deref(),
        Some(newer.set().head().id.as_str())
    );
}

async fn m7<H: MigrationHarness>(h: &H, s: Subject) {
    s.prepare(h).await;
    let head = s.head();
    let left = s.build(vec![table_rev("m7_left", &head)]);
    let right = s.build(vec![table_rev("m7_right", &head)]);
    let ancestor = s.build(vec![]);
    run(h, &left).await.expect("left migrates");
    let (schema, probe, before) = (h.schema().await, h.commit_probe().await, state(h, s).await);

    let m = h.migrator().await;
    let held = m.lock(DEADLINE).await.expect("take the migration lock");
    let err = tokio::time::timeout(DEADLINE, run(h, &right))
        .await
        .expect("M7: a refusal must not wait for the lock")
        .expect_err("M7: the diverged build is refused");
    held.rollback().await.unwrap();
    assert!(err.is_refusal(), "{err}");
    let line = err.to_string();
    assert!(
        line.contains("m7_left") && line.contains("m7_right"),
        "M7: names both revisions: {line}"
    );
    assert!(!line.contains('\n'), "M7: one line");
    let store_err = try_open_as(h, s, &right)
        .await
        .expect_err("the store open refuses too");
    assert!(
        matches!(store_err, Error::Incompatible { .. }),
        "{store_err:?}"
    );
    assert_eq!(h.schema().await, schema, "M7: nothing changed");
    assert_eq!(h.commit_probe().await, probe, "M7: nothing was committed");
    assert_eq!(state(h, s).await, before);

    let opened = run(h, &ancestor)
        .await
        .expect("M7: the common ancestor still opens");
    assert_eq!(
        opened,
        Opened::Ahead {
            stamp: "m7_left".into()
        }
    );
    use_store(h, s, open_as(h, s, &ancestor).await.as_ref(), "m7").await;
}

async fn m8<H: MigrationHarness>(h: &H, s: Subject) {
    s.prepare(h).await;
    let base = s.build(vec![]);
    run(h, &base).await.expect("base");
    let behind_set = s.set(vec![table_rev("m8_mid", &s.head())]);
    let newer = s.build(vec![
        table_rev("m8_mid", &s.head()),
        table_rev("m8_top", "m8_mid"),
    ]);

    let m = h.migrator().await;
    let mut tx = m.lock(DEADLINE).await.expect("take the migration lock");
    let looked = Arc::new(tokio::sync::Notify::new());
    let signal = Arc::clone(&looked);
    let waiting = Runner::new(behind_set.clone())
        .with_lock_timeout(DEADLINE)
        .with_hooks(RunnerHooks {
            before_lock: Some(Arc::new(move || signal.notify_one())),
            ..RunnerHooks::default()
        });
    let m2 = h.migrator().await;
    let opener = tokio::spawn(async move { waiting.open(m2.as_ref()).await });
    tokio::time::timeout(DEADLINE, looked.notified())
        .await
        .expect("M8: the opener looked, found work, and went for the lock");

    for r in &newer.set().revisions()[s.base().len()..] {
        for sql in r.up(m.dialect()) {
            tx.execute(sql).await.unwrap();
        }
    }
    tx.write_state(s.name(), "m8_top", Some(&newer.set().lineage(m.dialect())))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let opened = tokio::time::timeout(DEADLINE, opener)
        .await
        .expect("opener finishes")
        .expect("task");
    assert_eq!(
        opened.expect("M8: no error"),
        Opened::Ahead {
            stamp: "m8_top".into()
        }
    );
    let after = state(h, s).await;
    assert_eq!(after.stamp.as_deref(), Some("m8_top"));
    assert_eq!(
        after.lineage,
        Some(newer.set().lineage(m.dialect())),
        "M8: the newer build's lineage stands"
    );
    for b in [&base, &newer, &Runner::new(behind_set)] {
        assert!(run(h, b).await.is_ok(), "M8: every build opens afterwards");
    }
}

async fn m9<H: MigrationHarness>(h: &H, s: Subject) {
    let h = &h.fresh().await;
    s.prepare(h).await;
    // Base exemption: a store at the base revision with no lineage opens without the lock and
    // without a write. The build that knows only the base revision is the oldest possible.
    let base_only = Runner::new(MigrationSet::new(s.name(), s.base()[..1].to_vec()).unwrap())
        .with_lock_timeout(DEADLINE);
    let no_lineage = |r: Runner| {
        r.with_hooks(RunnerHooks {
            skip_lineage: true,
            ..RunnerHooks::default()
        })
    };
    run(h, &no_lineage(base_only.clone()))
        .await
        .expect("a lineage-less runner creates the store");
    assert_eq!(state(h, s).await.lineage, None);
    let probe = h.commit_probe().await;
    let m = h.migrator().await;
    let held = m.lock(DEADLINE).await.unwrap();
    let opened = tokio::time::timeout(DEADLINE, run(h, &base_only))
        .await
        .expect("M9: no lock taken")
        .unwrap();
    held.rollback().await.unwrap();
    assert_eq!(opened, Opened::AtHead);
    assert_eq!(
        h.commit_probe().await,
        probe,
        "M9: a base store is not written on open"
    );

    // A lineage-less runner moves the store to N+1: the older build is refused.
    let newer = s.build(additive_next(s));
    run(h, &no_lineage(newer.clone()))
        .await
        .expect("lineage-less upgrade");
    let err = run(h, &base_only)
        .await
        .expect_err("M9: refused without lineage");
    assert!(err.is_refusal());

    // A lineage-recording build at N+1 repairs it; later opens only read.
    assert_eq!(run(h, &newer).await.unwrap(), Opened::LineageRepaired);
    assert_eq!(
        state(h, s).await.lineage,
        Some(newer.set().lineage(m.dialect()))
    );
    let probe = h.commit_probe().await;
    let held = m.lock(DEADLINE).await.unwrap();
    let again = tokio::time::timeout(DEADLINE, run(h, &newer))
        .await
        .expect("M9: no lock after repair")
        .unwrap();
    held.rollback().await.unwrap();
    assert_eq!(again, Opened::AtHead);
    assert_eq!(h.commit_probe().await, probe, "M9: later opens only read");
    assert_eq!(
        run(h, &base_only).await.unwrap(),
        Opened::Ahead {
            stamp: newer.set().head().id.clone()
        }
    );

    // A store at this head carrying another history's lineage gets ours.
    let other = s.build(vec![table_rev("m9_other", &s.head())]);
    let h2 = h.fresh().await;
    s.prepare(&h2).await;
    run(&h2, &other).await.unwrap();
    let foreign_lineage = state(&h2, s).await.lineage;
    let m2 = h2.migrator().await;
    let mut tx = m2.lock(DEADLINE).await.unwrap();
    tx.write_state(s.name(), &s.head(), foreign_lineage.as_deref())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let head_build = s.build(vec![]);
    // A head that is the base is exempt: nothing is repaired.
    let expected = if s.base().len() > 1 {
        Opened::LineageRepaired
    } else {
        Opened::AtHead
    };
    assert_eq!(run(&h2, &head_build).await.unwrap(), expected);
}

async fn m10<H: MigrationHarness>(h: &H, s: Subject) {
    s.prepare(h).await;
    run(h, &s.build(vec![])).await.unwrap();
    let (schema, before) = (h.schema().await, state(h, s).await);
    let failing = s.build(additive_next(s)).with_hooks(RunnerHooks {
        fail_after_lineage_write: true,
        ..RunnerHooks::default()
    });
    let err = run(h, &failing)
        .await
        .expect_err("M10: the injected failure surfaces");
    assert!(matches!(err, MigrateError::RevisionFailed { .. }), "{err}");
    assert_eq!(h.schema().await, schema, "M10: schema unchanged");
    assert_eq!(
        state(h, s).await,
        before,
        "M10: stamp and lineage unchanged"
    );
    // A failing statement mid-revision also rolls back everything before it.
    let broken = s.build(vec![rev(
        "m10_broken",
        &s.head(),
        &[
            "CREATE TABLE m10_first (id BIGINT)",
            "ALTER TABLE no_such_table ADD COLUMN x TEXT",
        ],
    )]);
    let err = run(h, &broken)
        .await
        .expect_err("M10: a bad statement fails");
    assert!(
        matches!(err, MigrateError::RevisionFailed { ref revision, .. } if revision == "m10_broken"),
        "{err}"
    );
    assert_eq!(
        h.schema().await,
        schema,
        "M10: the first statement was rolled back"
    );
    assert_eq!(state(h, s).await, before);
}

/// The command a refusal of set `s`'s bookkeeping names.
fn repair_command(s: Subject) -> String {
    match s {
        Subject::Cairn => "cairn migrate repair".to_owned(),
        Subject::App => format!("cairn migrate --set {APP_SET} --source DIR repair"),
    }
}

/// Every build is refused on the store, in one line naming `command`, without waiting for the
/// lock, and nothing changes: schema, stamp and lineage (and, with `probe`, nothing is
/// committed at all; a Postgres harness's commit probe reads the lineage table, so it is left
/// out while that table is missing).
async fn refused_by_every_build<H: MigrationHarness>(
    h: &H,
    s: Subject,
    builds: &[&Runner],
    command: &str,
    probe: bool,
    what: &str,
) {
    let before = state(h, s).await;
    let schema = h.schema().await;
    let committed = if probe {
        Some(h.commit_probe().await)
    } else {
        None
    };
    let m = h.migrator().await;
    let held = m.lock(DEADLINE).await.expect("take the migration lock");
    for b in builds {
        let err = tokio::time::timeout(DEADLINE, run(h, b))
            .await
            .unwrap_or_else(|_| panic!("M9: {what}: a refusal must not wait for the lock"))
            .expect_err(what);
        assert!(err.is_refusal(), "M9: {what}: {err}");
        let line = err.to_string();
        assert!(
            line.contains(command),
            "M9: {what}: names `{command}`: {line}"
        );
        assert!(!line.contains('\n'), "M9: {what}: one line: {line}");
    }
    // Dropping the lock's transaction (not committing it) leaves the store as it was, even
    // the bookkeeping table the lock created.
    held.rollback().await.expect("release the lock");
    assert_eq!(h.schema().await, schema, "M9: {what}: schema unchanged");
    assert_eq!(
        state(h, s).await,
        before,
        "M9: {what}: bookkeeping unchanged"
    );
    if let Some(committed) = committed {
        assert_eq!(
            h.commit_probe().await,
            committed,
            "M9: {what}: nothing committed"
        );
    }
}

async fn m9_lost_bookkeeping<H: MigrationHarness>(h: &H, s: Subject) {
    let h = &h.fresh().await;
    s.prepare(h).await;
    let newer = s.build(additive_next(s));
    let older = s.build(vec![]);
    let newest = s.build(vec![
        additive_next(s).remove(0),
        table_rev("m9_newest", "t_0002_event_note"),
    ]);
    run(h, &newer).await.expect("the newer build migrates");
    let good = state(h, s).await;
    assert!(good.lineage.is_some());
    let command = repair_command(s);

    // The stamp row deleted by hand, the lineage left: not a new store.
    h.execute_sql(&format!(
        "DELETE FROM cairn_migration_stamp WHERE set_name = '{}'",
        s.name()
    ))
    .await
    .expect("delete the stamp row");
    let lost = state(h, s).await;
    assert_eq!(lost.stamp, None);
    refused_by_every_build(
        h,
        s,
        &[&older, &newer, &newest],
        &command,
        true,
        "stamp row missing",
    )
    .await;
    assert_eq!(
        state(h, s).await,
        lost,
        "M9: the bookkeeping is left as it was"
    );
    let err = try_open_as(h, s, &newer)
        .await
        .expect_err("the store's own open refuses too");
    assert!(matches!(err, Error::Incompatible { .. }), "{err:?}");
    assert!(err.to_string().contains(&command), "{err}");

    let m = h.migrator().await;
    let repaired = newer
        .repair(m.as_ref())
        .await
        .expect("M9: repair the stamp");
    assert_eq!(
        repaired.stamp_restored.as_deref(),
        Some("t_0002_event_note"),
        "{repaired:?}"
    );
    assert!(!repaired.lineage_table_restored && !repaired.lineage_recorded);
    assert_eq!(
        state(h, s).await,
        good,
        "M9: the stamp is back, the lineage untouched"
    );
    assert_eq!(run(h, &newer).await.unwrap(), Opened::AtHead);

    // The lineage table dropped by hand: not a store without lineage (nor a backend error).
    h.execute_sql("DROP TABLE cairn_migration_lineage")
        .await
        .expect("drop the lineage table");
    let looked = state(h, s).await;
    assert!(looked.lineage_table_missing, "{looked:?}");
    refused_by_every_build(
        h,
        s,
        &[&older, &newer, &newest],
        &command,
        false,
        "lineage table missing",
    )
    .await;
    let repaired = newer
        .repair(m.as_ref())
        .await
        .expect("M9: repair the lineage table");
    assert!(
        repaired.lineage_table_restored && repaired.lineage_recorded,
        "{repaired:?}"
    );
    assert_eq!(repaired.stamp_restored, None);
    assert_eq!(state(h, s).await, good, "M9: the lineage is back");
    let probe = h.commit_probe().await;
    let again = newer
        .repair(m.as_ref())
        .await
        .expect("M9: nothing left to repair");
    assert!(!again.changed(), "{again:?}");
    assert_eq!(
        h.commit_probe().await,
        probe,
        "M9: a repair with nothing to do writes nothing"
    );
    assert_eq!(run(h, &newer).await.unwrap(), Opened::AtHead);
    assert_eq!(
        run(h, &older).await.unwrap(),
        Opened::Ahead {
            stamp: "t_0002_event_note".into()
        }
    );
    use_store(h, s, open_as(h, s, &newer).await.as_ref(), "m9-repaired").await;
}

async fn m9_foreign<H: MigrationHarness>(h: &H, s: Subject) {
    let h = &h.fresh().await;
    s.prepare(h).await;
    // This build's head lies past the set's base, so its lineage is due for repair.
    let ours = s.build(vec![table_rev("m9_mid", &s.head())]);
    let theirs = s.build(vec![table_rev("m9_theirs", &s.head())]);
    let older = s.build(vec![]);
    run(h, &ours).await.expect("this build migrates");
    let m = h.migrator().await;
    let dialect = m.dialect();
    for repair_by_open in [true, false] {
        // Another history's lineage at this head (a restore from another store, or a build of
        // another branch that recorded its lineage here).
        let mut tx = m.lock(DEADLINE).await.unwrap();
        tx.write_state(s.name(), "m9_mid", Some(&theirs.set().lineage(dialect)))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let foreign = state(h, s).await;
        assert_ne!(foreign.lineage, Some(ours.set().lineage(dialect)));
        assert_eq!(
            ours.status(m.as_ref()).await.unwrap(),
            Classification::AtHead {
                repair_lineage: true
            }
        );
        assert!(
            run(h, &older)
                .await
                .expect_err("M9: the older build cannot tell")
                .is_refusal(),
            "the foreign lineage does not hold the store's stamp"
        );
        let schema = h.schema().await;
        if repair_by_open {
            assert_eq!(run(h, &ours).await.unwrap(), Opened::LineageRepaired);
        } else {
            let repaired = ours.repair(m.as_ref()).await.expect("M9: repair");
            assert!(
                repaired.lineage_recorded && repaired.stamp_restored.is_none(),
                "{repaired:?}"
            );
        }
        assert_eq!(
            state(h, s).await,
            StoredState {
                stamp: Some("m9_mid".into()),
                lineage: Some(ours.set().lineage(dialect)),
                ..StoredState::default()
            },
            "M9: this build's lineage replaced the foreign one"
        );
        assert_eq!(h.schema().await, schema, "M9: a repair runs no revision");
        let probe = h.commit_probe().await;
        assert_eq!(run(h, &ours).await.unwrap(), Opened::AtHead);
        assert_eq!(h.commit_probe().await, probe, "M9: later opens only read");
        assert_eq!(
            run(h, &older).await.unwrap(),
            Opened::Ahead {
                stamp: "m9_mid".into()
            }
        );
    }
}

async fn m10_transaction_control<H: MigrationHarness>(h: &H, s: Subject) {
    s.prepare(h).await;
    run(h, &s.build(vec![])).await.unwrap();
    for control in ["COMMIT", "END", "ROLLBACK", "BEGIN", "-- done\ncommit"] {
        let (schema, probe, before) = (h.schema().await, h.commit_probe().await, state(h, s).await);
        let build = s.build(vec![
            table_rev("m10_fine", &s.head()),
            rev(
                "m10_control",
                "m10_fine",
                &[
                    "CREATE TABLE m10_before (id BIGINT NOT NULL PRIMARY KEY)",
                    control,
                    "CREATE TABLE m10_after (id BIGINT NOT NULL PRIMARY KEY)",
                ],
            ),
        ]);
        let err = run(h, &build)
            .await
            .expect_err("M10: a revision that ends the transaction fails the upgrade");
        assert!(
            matches!(err, MigrateError::RevisionFailed { ref revision, .. } if revision == "m10_control"),
            "{control}: {err}"
        );
        assert_eq!(h.schema().await, schema, "M10: {control}: schema unchanged");
        assert_eq!(
            state(h, s).await,
            before,
            "M10: {control}: stamp and lineage unchanged"
        );
        assert_eq!(
            h.commit_probe().await,
            probe,
            "M10: {control}: nothing committed"
        );
    }

    // The backend refuses it too, and its transaction stays the upgrade's.
    let (schema, before) = (h.schema().await, state(h, s).await);
    let m = h.migrator().await;
    let mut tx = m.lock(DEADLINE).await.expect("take the migration lock");
    tx.execute("CREATE TABLE m10_direct (id BIGINT NOT NULL PRIMARY KEY)")
        .await
        .expect("an ordinary statement runs");
    for control in ["COMMIT", "END", "ROLLBACK"] {
        assert!(
            tx.execute(control).await.is_err(),
            "M10: LockedMigration::execute refuses {control}"
        );
    }
    tx.rollback().await.expect("roll the upgrade back");
    assert_eq!(
        h.schema().await,
        schema,
        "M10: the direct statement was rolled back"
    );
    assert_eq!(state(h, s).await, before);
    assert_eq!(run(h, &s.build(vec![])).await.unwrap(), Opened::AtHead);
}

/// M11 and issue 9 item 2: stores written by earlier builds keep their lineage. The lineage
/// rows below are what earlier builds wrote, byte for byte (revisions 0001 and 0002 hold the
/// combined checksum for good): a store at 0001 upgrades, a store at 0002 is at head, and the
/// previous build (head 0002) finds a store this build migrated past it *ahead*.
pub async fn m11_lineage_written_by_earlier_builds_still_opens<H: MigrationHarness>(h: &H) {
    const EPOCH_LOG: &str = "41b46ffe809982d11b224f7ff3b023a207d5ab585258e87ce69f7a9b4d1a94e9";
    const SPOOL: &str = "e3584e7f472252bf592d8c3fa6964b304a680ae47a32d0457af70a43d7709437";
    let this = Runner::new(MigrationSet::new(CAIRN_SET, cairn_revisions()).unwrap())
        .with_lock_timeout(DEADLINE);
    let revs = cairn_revisions();
    let at = |id: &str| {
        revs.iter()
            .position(|r| r.id == id)
            .expect("a packaged revision")
    };
    let build_to = |id: &str| {
        Runner::new(MigrationSet::new(CAIRN_SET, revs[..=at(id)].to_vec()).unwrap())
            .with_lock_timeout(DEADLINE)
    };
    let rows = |ids: &[(&str, &str)]| {
        ids.iter()
            .enumerate()
            .map(|(i, (id, sum))| format!("('{CAIRN_SET}', {i}, '{id}', '{sum}')"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (stamp, lineage) in [
        ("0001_epoch_log", vec![("0001_epoch_log", EPOCH_LOG)]),
        (
            "0002_spool",
            vec![("0001_epoch_log", EPOCH_LOG), ("0002_spool", SPOOL)],
        ),
    ] {
        let h = h.fresh().await;
        // The store as the earlier build left it: its schema, stamp and lineage rows.
        let earlier = build_to(stamp).with_hooks(RunnerHooks {
            skip_lineage: true,
            ..RunnerHooks::default()
        });
        run(&h, &earlier).await.expect("the earlier build's schema");
        h.execute_sql(&format!(
            "INSERT INTO cairn_migration_lineage (set_name, position, revision, checksum) VALUES {}",
            rows(&lineage)
        ))
        .await
        .expect("the earlier build's lineage rows");
        let opened = run(&h, &this).await.expect("M11: this build opens it");
        if at(stamp) + 1 == revs.len() {
            assert_eq!(opened, Opened::AtHead, "{stamp}");
        } else {
            assert!(
                matches!(opened, Opened::Upgraded { .. }),
                "{stamp}: {opened:?}"
            );
        }
        let dialect = h.migrator().await.dialect();
        let after = state(&h, Subject::Cairn).await;
        assert_eq!(after.lineage, Some(this.set().lineage(dialect)));
        // The stored entries of 0001 and 0002 are the earlier builds' values.
        let stored: Vec<String> = after
            .lineage
            .unwrap()
            .iter()
            .take(2)
            .map(|e| e.checksum.to_hex())
            .collect();
        assert_eq!(stored, [EPOCH_LOG, SPOOL]);
        // Every earlier build finds the store at head or ahead, never refused.
        for id in ["0001_epoch_log", "0002_spool"] {
            let got = run(&h, &build_to(id))
                .await
                .expect("M11: an earlier build opens it");
            assert!(
                matches!(got, Opened::AtHead | Opened::Ahead { .. }),
                "{id}: {got:?}"
            );
        }
        use_store(
            &h,
            Subject::Cairn,
            h.open().await.unwrap().as_ref(),
            "m11-old",
        )
        .await;
    }
}

async fn m11<H: MigrationHarness>(h: &H, s: Subject) {
    s.prepare(h).await;
    let head = s.head();
    let one = s.build(vec![table_rev("m11_x", &head)]);
    let other = s.build(vec![rev(
        "m11_x",
        &head,
        &["CREATE TABLE m11_x (id BIGINT NOT NULL PRIMARY KEY, other TEXT)"],
    )]);
    run(h, &one).await.unwrap();
    let (schema, before) = (h.schema().await, state(h, s).await);
    let err = run(h, &other).await.expect_err("M11: refused");
    assert!(
        matches!(&err, MigrateError::Refused { refusal: cairn_migrate::Refusal::ChecksumMismatch { revision, .. }, .. } if revision == "m11_x"),
        "{err}"
    );
    assert!(err.to_string().contains("m11_x"));
    assert_eq!(h.schema().await, schema);
    assert_eq!(state(h, s).await, before);
}

async fn rollback_story<H: MigrationHarness>(h: &H, s: Subject) {
    let n = s.build(vec![]);
    let n1 = s.build(additive_next(s));
    let space = random_space("rollback");
    let store_n = open_as(h, s, &n).await;
    let a = store_n.append(&space, ev("by N")).await.unwrap();
    drop(store_n);

    let store_n1 = open_as(h, s, &n1).await;
    let b = store_n1.append(&space, ev("by N+1")).await.unwrap();
    assert_eq!(b.parents, vec![a.id]);
    drop(store_n1);

    let store_n = open_as(h, s, &n).await;
    let c = store_n.append(&space, ev("by N again")).await.unwrap();
    assert_eq!(c.parents, vec![b.id], "N sees N+1's epoch as the head");
    let page = store_n.events_since(&space, None, 100).await.unwrap();
    assert_eq!(page.events.len(), 3);
    assert!(matches!(
        store_n.repair_heads(&space).await.unwrap(),
        cairn_core::RepairOutcome::Unchanged
    ));
    use_store(h, s, store_n.as_ref(), "rollback-n").await;

    assert_eq!(run(h, &n1).await.unwrap(), Opened::AtHead);
    assert_eq!(
        state(h, s).await.stamp.as_deref(),
        Some("t_0002_event_note")
    );
}

/// Two builds of a service sharing one store (the fixtures `app_v1`, `app_v2`,
/// `app_v2_diverged`, embedded with `embed_migrations!`): v2 upgrades the store v1 created;
/// v1 then classifies it ahead — without the lock — and keeps reading and writing its table,
/// next to v2's rows; a diverged v2' is refused in one line naming both revisions and changes
/// nothing; cairn's own set is untouched throughout.
pub async fn m_app_two_builds_share_one_store<H: MigrationHarness>(h: &H) {
    let runner = |files| Runner::new(app_set(files)).with_lock_timeout(DEADLINE);
    let (v1, v2, v2_diverged) = (runner(APP_V1), runner(APP_V2), runner(APP_V2_DIVERGED));
    let s = Subject::App;
    let store = open_as(h, s, &v1).await;
    use_store(h, s, store.as_ref(), "v1").await;
    let cairn_state = state(h, Subject::Cairn).await;

    let upgraded = run(h, &v2).await.expect("v2 upgrades the store");
    assert_eq!(
        upgraded,
        Opened::Upgraded {
            from: Some("0001_items".into()),
            applied: vec!["0002_item_notes".into(), "0003_item_events".into()],
        }
    );
    h.execute_sql("INSERT INTO app_items (id, name, qty, note) VALUES (2, 'by v2', 5, 'noted')")
        .await
        .expect("v2 writes its new column");
    h.execute_sql("INSERT INTO app_item_events (item_id) VALUES (2)")
        .await
        .expect("v2 writes its new table");
    let after_v2 = state(h, s).await;

    let m = h.migrator().await;
    let held = m.lock(DEADLINE).await.expect("take the migration lock");
    let status = v1
        .status(m.as_ref())
        .await
        .expect("v1 classifies the store");
    assert_eq!(
        status,
        Classification::Ahead {
            stamp: "0003_item_events".into()
        }
    );
    let opened = tokio::time::timeout(DEADLINE, run(h, &v1))
        .await
        .expect("v1 must not wait for the migration lock")
        .expect("v1 opens the store v2 migrated");
    held.rollback().await.expect("release the lock");
    assert_eq!(
        opened,
        Opened::Ahead {
            stamp: "0003_item_events".into()
        }
    );
    let store = open_as(h, s, &v1).await;
    use_store(h, s, store.as_ref(), "v1-after-v2").await;
    assert_eq!(
        h.query_i64("SELECT count(*) FROM app_items WHERE note = 'noted' AND qty = 5")
            .await
            .expect("read v2's row"),
        1,
        "v2's row is intact"
    );
    assert_eq!(state(h, s).await, after_v2, "v1 wrote no bookkeeping");

    let (schema, probe) = (h.schema().await, h.commit_probe().await);
    let err = run(h, &v2_diverged)
        .await
        .expect_err("the diverged build is refused");
    assert!(err.is_refusal(), "{err}");
    let line = err.to_string();
    assert!(
        line.contains("0003_item_events") && line.contains("0002_item_audit"),
        "names both revisions: {line}"
    );
    assert!(!line.contains('\n'), "one line: {line}");
    let store_err = try_open_as(h, s, &v2_diverged)
        .await
        .expect_err("the service's open refuses too");
    assert!(
        matches!(store_err, Error::Incompatible { .. }),
        "{store_err:?}"
    );
    assert_eq!(h.schema().await, schema, "nothing changed");
    assert_eq!(h.commit_probe().await, probe, "nothing was committed");
    assert_eq!(state(h, s).await, after_v2);

    assert_eq!(run(h, &v2).await.unwrap(), Opened::AtHead);
    assert_eq!(
        state(h, Subject::Cairn).await,
        cairn_state,
        "cairn's own stamp and lineage are untouched by the application's builds"
    );
}

// ---- M2: real stores match the model ------------------------------------------------------

#[derive(Clone, Debug)]
struct M2Case {
    /// Parent of each test node: `None` = the set's head, `Some(j)` = node j (< i).
    parents: Vec<Option<usize>>,
    /// Opens: (head node or None for the set's head, runner records lineage?).
    opens: Vec<(Option<usize>, bool)>,
}

fn m2_strategy() -> impl Strategy<Value = M2Case> {
    (1usize..=3)
        .prop_flat_map(|n| {
            let parents: Vec<BoxedStrategy<Option<usize>>> = (0..n)
                .map(|i| {
                    if i == 0 {
                        Just(None).boxed()
                    } else {
                        proptest::option::of(0..i).boxed()
                    }
                })
                .collect();
            let opens = proptest::collection::vec(
                (proptest::option::of(0..n), prop::bool::weighted(0.75)),
                1..=8,
            );
            (parents, opens)
        })
        .prop_map(|(parents, opens)| M2Case { parents, opens })
}

impl M2Case {
    fn node_id(i: usize) -> String {
        format!("m2_n{i}")
    }

    fn path(&self, head: Option<usize>) -> Vec<usize> {
        let mut out = Vec::new();
        let mut at = head;
        while let Some(i) = at {
            out.push(i);
            at = self.parents[i];
        }
        out.reverse();
        out
    }

    fn set(&self, s: Subject, head: Option<usize>) -> MigrationSet {
        let revs = self
            .path(head)
            .into_iter()
            .map(|i| {
                let parent = self.parents[i].map_or_else(|| s.head(), Self::node_id);
                table_rev(&Self::node_id(i), &parent)
            })
            .collect();
        s.set(revs)
    }
}

/// The model's prediction for one open: the expected outcome kind, whether it writes, and the
/// state afterwards.
fn m2_expect(
    set: &MigrationSet,
    dialect: Dialect,
    records: bool,
    st: &StoredState,
) -> (&'static str, bool, StoredState) {
    match classify(set, dialect, st) {
        Classification::AtHead {
            repair_lineage: false,
        } => ("at_head", false, st.clone()),
        Classification::AtHead {
            repair_lineage: true,
        } if !records => ("at_head", false, st.clone()),
        Classification::AtHead {
            repair_lineage: true,
        } => (
            "repaired",
            true,
            StoredState {
                stamp: st.stamp.clone(),
                lineage: Some(set.lineage(dialect)),
                ..StoredState::default()
            },
        ),
        Classification::Upgrade { .. } => (
            "upgraded",
            true,
            StoredState {
                stamp: Some(set.head().id.clone()),
                lineage: if records {
                    Some(set.lineage(dialect))
                } else {
                    st.lineage.clone()
                },
                ..StoredState::default()
            },
        ),
        Classification::Ahead { .. } => ("ahead", false, st.clone()),
        Classification::Refused(_) => ("refused", false, st.clone()),
    }
}

fn kind(r: &Result<Opened, MigrateError>) -> &'static str {
    match r {
        Ok(Opened::AtHead) => "at_head",
        Ok(Opened::LineageRepaired) => "repaired",
        Ok(Opened::Upgraded { .. }) => "upgraded",
        Ok(Opened::Ahead { .. }) => "ahead",
        Err(e) if e.is_refusal() => "refused",
        Err(_) => "error",
    }
}

/// Tables a store at `stamp` holds beyond the set's base: the test nodes on the stamp's path.
fn m2_tables(case: &M2Case, stamp: Option<&str>) -> BTreeSet<String> {
    let node = stamp
        .and_then(|s| s.strip_prefix("m2_n"))
        .and_then(|n| n.parse::<usize>().ok());
    case.path(node).into_iter().map(M2Case::node_id).collect()
}

async fn m2_run_case<H: MigrationHarness>(h: &H, s: Subject, case: &M2Case) -> Result<(), String> {
    let h = h.fresh().await;
    s.prepare(&h).await;
    let mut model = StoredState::default();
    let mut base_tables: Option<BTreeMap<String, Vec<String>>> = None;
    for (step, (head, records)) in case.opens.iter().enumerate() {
        let set = case.set(s, *head);
        let mut runner = Runner::new(set.clone()).with_lock_timeout(DEADLINE);
        if !records {
            runner = runner.with_hooks(RunnerHooks {
                skip_lineage: true,
                ..RunnerHooks::default()
            });
        }
        let dialect = h.migrator().await.dialect();
        let (want, writes, next) = m2_expect(&set, dialect, *records, &model);
        let probe = h.commit_probe().await;
        let got = run(&h, &runner).await;
        let ctx = format!("step {step}: build {head:?} (lineage {records}): {got:?}");
        if kind(&got) != want {
            return Err(format!("{ctx}: expected {want}"));
        }
        let wrote = h.commit_probe().await != probe;
        if wrote != writes {
            return Err(format!("{ctx}: wrote {wrote}, model says {writes}"));
        }
        model = next;
        let real = state(&h, s).await;
        if real != model {
            return Err(format!("{ctx}: state {real:?} != model {model:?}"));
        }
        let schema = h.schema().await;
        let base_now: BTreeMap<String, Vec<String>> = schema
            .iter()
            .filter(|(t, _)| !t.starts_with("m2_n"))
            .map(|(t, c)| (t.clone(), c.clone()))
            .collect();
        let test_tables: BTreeSet<String> = schema
            .keys()
            .filter(|t| t.starts_with("m2_n"))
            .cloned()
            .collect();
        if test_tables != m2_tables(case, model.stamp.as_deref()) {
            return Err(format!(
                "{ctx}: tables {test_tables:?} do not match stamp {:?}",
                model.stamp
            ));
        }
        if let Some(n) = schema.iter().find(|(t, _)| t.starts_with("m2_n")) {
            if n.1 != &["id", "note"] {
                return Err(format!("{ctx}: columns of {} are {:?}", n.0, n.1));
            }
        }
        match &base_tables {
            None if model.stamp.is_some() => base_tables = Some(base_now),
            Some(b) if *b != base_now => return Err(format!("{ctx}: the base tables changed")),
            _ => {}
        }
    }
    Ok(())
}

async fn m2<H: MigrationHarness>(h: &H, s: Subject) {
    let cases = (proptest_cases() / 2).max(8);
    tokio::task::block_in_place(|| {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let handle = tokio::runtime::Handle::current();
        let result = runner.run(&m2_strategy(), |case| {
            handle
                .block_on(m2_run_case(h, s, &case))
                .map_err(|e| TestCaseError::fail(format!("M2: {e}")))
        });
        if let Err(e) = result {
            panic!("{}: {e}", h.backend());
        }
    });
}

// ---- The additivity check on an application's set -----------------------------------------

/// The executed additivity check on an application's set: each revision is checked on a store
/// that holds cairn's own schema and then the application's history, with cairn's epoch log
/// seeded and one synthesized row in each application table. The fixture build 2 passes; a
/// revision that changes the application's rows or adds a NOT NULL column without a default to
/// its table is refused on that table for its own reason; an index on cairn's own table is
/// judged like any other (the table is there).
pub async fn a3_app_set_checked_over_cairns_schema<H: AdditivityHarness>(h: &H) {
    let engine = h.additivity();
    let backend = h.backend();
    let v2 = app_set(APP_V2);
    let reports = check_set(engine.as_ref(), &v2)
        .await
        .unwrap_or_else(|e| panic!("{backend}: check build 2: {e}"));
    let checked: Vec<&str> = reports.iter().map(|r| r.revision.as_str()).collect();
    assert_eq!(
        checked,
        ["0002_item_notes", "0003_item_events"],
        "{backend}"
    );
    for r in &reports {
        assert!(
            r.violations.is_empty(),
            "{backend}: {} is additive: {:?}",
            r.revision,
            r.violations
        );
    }

    let judged = |sql: &'static str| {
        let engine = Arc::clone(&engine);
        async move {
            let mut revs = app_set(APP_V1).revisions().to_vec();
            revs.push(rev("0002_changed", "0001_items", &[sql]));
            let set = MigrationSet::application(APP_SET, revs).expect("a valid chain");
            let reports = check_set(engine.as_ref(), &set)
                .await
                .unwrap_or_else(|e| panic!("{backend}: check {sql}: {e}"));
            reports
                .into_iter()
                .flat_map(|r| r.violations)
                .map(|v| (v.rule, v.table))
                .collect::<Vec<_>>()
        }
    };
    let on_items = Some("app_items".to_owned());
    let rows = judged("UPDATE app_items SET qty = qty + 1").await;
    assert!(
        rows.contains(&(Rule::Rows, on_items.clone())),
        "{backend}: the synthesized row of app_items changed: {rows:?}"
    );
    let column =
        judged("ALTER TABLE app_items ADD COLUMN sku TEXT NOT NULL DEFAULT 'x' CHECK (sku <> '')")
            .await;
    assert!(
        column.contains(&(Rule::NewColumn, on_items.clone())),
        "{backend}: a CHECK on a new column of app_items: {column:?}"
    );
    let index = judged("CREATE INDEX app_epoch_event_kind ON epoch_event (kind)").await;
    assert!(
        index.is_empty(),
        "{backend}: a plain index on cairn's epoch_event is additive: {index:?}"
    );
}

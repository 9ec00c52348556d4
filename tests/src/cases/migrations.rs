//! Migration cases (M…): the lineage-aware runner on a real store.
//!
//! Builds with different histories are modelled in one process by giving the runner different
//! revision chains: cairn's own revisions followed by test revisions. Test revisions use SQL
//! both engines accept, so every case runs unchanged on SQLite and Postgres.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use cairn_core::{Error, Seq};
use cairn_migrate::{
    cairn_revisions, classify, Classification, MigrateError, MigrationSet, Opened, Revision,
    Runner, RunnerHooks, StoredState, CAIRN_SET,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::ev;
use crate::{proptest_cases, random_space, MigrationHarness};

/// How long a case waits for something that must happen promptly (an open that takes no lock,
/// an append released by a commit). Generous: it bounds a wait, it is never slept.
const DEADLINE: Duration = Duration::from_secs(20);

/// A test revision with the same SQL on both engines.
fn rev(id: &str, parent: &str, sql: &[&str]) -> Revision {
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
fn table_rev(id: &str, parent: &str) -> Revision {
    rev(
        id,
        parent,
        &[&format!(
            "CREATE TABLE {id} (id BIGINT NOT NULL PRIMARY KEY, note TEXT)"
        )],
    )
}

fn cairn_head() -> String {
    cairn_revisions()
        .last()
        .expect("cairn has revisions")
        .id
        .clone()
}

/// cairn's own revisions followed by `extra`.
fn set(extra: Vec<Revision>) -> MigrationSet {
    let mut revs = cairn_revisions();
    revs.extend(extra);
    MigrationSet::new(CAIRN_SET, revs).expect("a valid test chain")
}

fn build(extra: Vec<Revision>) -> Runner {
    Runner::new(set(extra)).with_lock_timeout(DEADLINE)
}

/// The release build N+1 of the rollback story: an additive revision on the epoch log itself
/// plus a new table.
fn additive_next() -> Vec<Revision> {
    vec![rev(
        "t_0002_event_note",
        &cairn_head(),
        &[
            "ALTER TABLE epoch_event ADD COLUMN note TEXT",
            "CREATE TABLE t_0002_side (id BIGINT NOT NULL PRIMARY KEY, note TEXT)",
            "CREATE INDEX t_0002_side_note ON t_0002_side (note)",
        ],
    )]
}

async fn state<H: MigrationHarness>(h: &H) -> StoredState {
    h.migrator()
        .await
        .read_state(CAIRN_SET)
        .await
        .expect("read the migration state")
}

async fn open_as<H: MigrationHarness>(
    h: &H,
    runner: &Runner,
) -> Arc<dyn cairn_core::EpochDiagnostics> {
    h.open_as(runner)
        .await
        .unwrap_or_else(|e| panic!("{}: open failed: {e}", h.backend()))
}

/// Opens the store with `runner` through the migration backend only (no epoch store).
async fn run<H: MigrationHarness>(h: &H, runner: &Runner) -> Result<Opened, MigrateError> {
    let m = h.migrator().await;
    runner.open(m.as_ref()).await
}

/// Exercises the epoch log through `store`: append, read the heads and the feed, repair.
async fn use_store(store: &dyn cairn_core::EpochDiagnostics, label: &str) {
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
}

/// M3: builds whose heads lie on one line of history, opening in any order, never refuse each
/// other, and the store ends at the newest head any of them brought.
pub async fn m3_one_line_of_history_never_refuses<H: MigrationHarness>(h: &H) {
    let head = cairn_head();
    let line = [
        table_rev("m3_a", &head),
        table_rev("m3_b", "m3_a"),
        table_rev("m3_c", "m3_b"),
    ];
    let builds: Vec<Runner> = (0..=line.len())
        .map(|n| build(line[..n].to_vec()))
        .collect();
    for order in [[0, 3, 1, 2], [2, 1, 3, 0], [1, 2, 0, 3], [3, 2, 1, 0]] {
        let h = h.fresh().await;
        let mut newest = 0;
        for &b in &order {
            let store = open_as(&h, &builds[b]).await;
            use_store(store.as_ref(), "m3").await;
            newest = newest.max(b);
            let stamp = state(&h).await.stamp;
            assert_eq!(
                stamp.as_deref(),
                Some(builds[newest].set().head().id.as_str()),
                "M3: order {order:?}"
            );
        }
    }
}

/// M4 and the rollback story: an older build opens a store a newer build migrated — without
/// taking the lock, while another connection holds it — and then appends, reads and repairs.
pub async fn m4_older_build_uses_newer_store_without_the_lock<H: MigrationHarness>(h: &H) {
    let newer = build(additive_next());
    let older = build(vec![]);
    let n1 = open_as(h, &newer).await;
    use_store(n1.as_ref(), "m4-newer").await;
    let before = state(h).await;

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

    let old = open_as(h, &older).await;
    use_store(old.as_ref(), "m4-older").await;
    assert_eq!(
        state(h).await,
        before,
        "M4: the older build left stamp and lineage alone"
    );
}

/// M6: a store instance opened by the older build keeps working across a newer build's
/// migration; its append, blocked by the migration's transaction, completes after the commit.
pub async fn m6_live_older_connection_survives_a_migration<H: MigrationHarness>(h: &H) {
    let older = build(vec![]);
    let newer = build(additive_next());
    let live = open_as(h, &older).await;
    let space = random_space("m6");
    let first = live.append(&space, ev("m6-before")).await.unwrap();

    let m = h.migrator().await;
    let mut tx = m.lock(DEADLINE).await.expect("take the migration lock");
    for sql in newer.set().head().up(m.dialect()) {
        tx.execute(sql).await.expect("apply the newer revision");
    }
    tx.write_state(
        CAIRN_SET,
        &newer.set().head().id,
        Some(&newer.set().lineage()),
    )
    .await
    .unwrap();

    let blocked = {
        let live = Arc::clone(&live);
        let space = space.clone();
        tokio::spawn(async move { live.append(&space, ev("m6-during")).await })
    };
    // The append must wait for the migration: it cannot finish while the transaction is open.
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
    use_store(live.as_ref(), "m6-after").await;
    assert_eq!(
        state(h).await.stamp.as_deref(),
        Some(newer.set().head().id.as_str())
    );
}

/// M7: a diverged branch is refused without taking the lock, changes nothing, names both
/// revisions; the common ancestor still opens.
pub async fn m7_divergence_refused_without_the_lock<H: MigrationHarness>(h: &H) {
    let head = cairn_head();
    let left = build(vec![table_rev("m7_left", &head)]);
    let right = build(vec![table_rev("m7_right", &head)]);
    let ancestor = build(vec![]);
    run(h, &left).await.expect("left migrates");
    let (schema, probe, before) = (h.schema().await, h.commit_probe().await, state(h).await);

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
    let store_err = h
        .open_as(&right)
        .await
        .expect_err("the store open refuses too");
    assert!(
        matches!(store_err, Error::Incompatible { .. }),
        "{store_err:?}"
    );
    assert_eq!(h.schema().await, schema, "M7: nothing changed");
    assert_eq!(h.commit_probe().await, probe, "M7: nothing was committed");
    assert_eq!(state(h).await, before);

    let opened = run(h, &ancestor)
        .await
        .expect("M7: the common ancestor still opens");
    assert_eq!(
        opened,
        Opened::Ahead {
            stamp: "m7_left".into()
        }
    );
    use_store(open_as(h, &ancestor).await.as_ref(), "m7").await;
}

/// M8: an opener that found the store behind and then waited out a newer build's migration
/// returns ahead and runs nothing (the test holds the lock and migrates in between).
pub async fn m8_second_look_under_the_lock_returns_ahead<H: MigrationHarness>(h: &H) {
    let base = build(vec![]);
    run(h, &base).await.expect("base");
    let behind_set = set(vec![table_rev("m8_mid", &cairn_head())]);
    let newer = build(vec![
        table_rev("m8_mid", &cairn_head()),
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

    for r in &newer.set().revisions()[cairn_revisions().len()..] {
        for sql in r.up(m.dialect()) {
            tx.execute(sql).await.unwrap();
        }
    }
    tx.write_state(CAIRN_SET, "m8_top", Some(&newer.set().lineage()))
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
    let after = state(h).await;
    assert_eq!(after.stamp.as_deref(), Some("m8_top"));
    assert_eq!(
        after.lineage,
        Some(newer.set().lineage()),
        "M8: the newer build's lineage stands"
    );
    for b in [&base, &newer, &Runner::new(behind_set)] {
        assert!(run(h, b).await.is_ok(), "M8: every build opens afterwards");
    }
}

/// M9: lineage repair after a runner that records none, and the base exemption.
pub async fn m9_lineage_repair_and_base_exemption<H: MigrationHarness>(h: &H) {
    let h = &h.fresh().await;
    // Base exemption: a store at the base revision with no lineage opens without the lock and
    // without a write.
    let base_only = Runner::new(MigrationSet::new(CAIRN_SET, cairn_revisions()).unwrap())
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
    assert_eq!(state(h).await.lineage, None);
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
    let newer = build(additive_next());
    run(h, &no_lineage(newer.clone()))
        .await
        .expect("lineage-less upgrade");
    let err = run(h, &base_only)
        .await
        .expect_err("M9: refused without lineage");
    assert!(err.is_refusal());

    // A lineage-recording build at N+1 repairs it; later opens only read.
    assert_eq!(run(h, &newer).await.unwrap(), Opened::LineageRepaired);
    assert_eq!(state(h).await.lineage, Some(newer.set().lineage()));
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
    let other = build(vec![table_rev("m9_other", &cairn_head())]);
    let h2 = h.fresh().await;
    run(&h2, &other).await.unwrap();
    let foreign_lineage = state(&h2).await.lineage;
    let m2 = h2.migrator().await;
    let mut tx = m2.lock(DEADLINE).await.unwrap();
    tx.write_state(CAIRN_SET, &cairn_head(), foreign_lineage.as_deref())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let head_build = Runner::new(set(vec![])).with_lock_timeout(DEADLINE);
    // cairn's own head is the base today: exempt, so nothing is repaired.
    let expected = if cairn_revisions().len() > 1 {
        Opened::LineageRepaired
    } else {
        Opened::AtHead
    };
    assert_eq!(run(&h2, &head_build).await.unwrap(), expected);
}

/// M10: an upgrade that fails after writing the lineage leaves schema, stamp and lineage as they
/// were.
pub async fn m10_failed_upgrade_changes_nothing<H: MigrationHarness>(h: &H) {
    run(h, &build(vec![])).await.unwrap();
    let (schema, before) = (h.schema().await, state(h).await);
    let failing = build(additive_next()).with_hooks(RunnerHooks {
        fail_after_lineage_write: true,
        ..RunnerHooks::default()
    });
    let err = run(h, &failing)
        .await
        .expect_err("M10: the injected failure surfaces");
    assert!(matches!(err, MigrateError::RevisionFailed { .. }), "{err}");
    assert_eq!(h.schema().await, schema, "M10: schema unchanged");
    assert_eq!(state(h).await, before, "M10: stamp and lineage unchanged");
    // A failing statement mid-revision also rolls back everything before it.
    let broken = build(vec![rev(
        "m10_broken",
        &cairn_head(),
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
    assert_eq!(state(h).await, before);
}

/// M11: the same revision id with different content is refused and named.
pub async fn m11_same_id_different_content_refused<H: MigrationHarness>(h: &H) {
    let head = cairn_head();
    let one = build(vec![table_rev("m11_x", &head)]);
    let other = build(vec![rev(
        "m11_x",
        &head,
        &["CREATE TABLE m11_x (id BIGINT NOT NULL PRIMARY KEY, other TEXT)"],
    )]);
    run(h, &one).await.unwrap();
    let (schema, before) = (h.schema().await, state(h).await);
    let err = run(h, &other).await.expect_err("M11: refused");
    assert!(
        matches!(&err, MigrateError::Refused { refusal: cairn_migrate::Refusal::ChecksumMismatch { revision, .. }, .. } if revision == "m11_x"),
        "{err}"
    );
    assert!(err.to_string().contains("m11_x"));
    assert_eq!(h.schema().await, schema);
    assert_eq!(state(h).await, before);
}

/// The rollback story end to end: build N+1 migrates additively and writes; build N, rolled
/// back to, keeps working on the same store with no manual step and reads N+1's epochs; N+1
/// then opens again without migrating.
pub async fn m_rollback_story_end_to_end<H: MigrationHarness>(h: &H) {
    let n = build(vec![]);
    let n1 = build(additive_next());
    let space = random_space("rollback");
    let store_n = open_as(h, &n).await;
    let a = store_n.append(&space, ev("by N")).await.unwrap();
    drop(store_n);

    let store_n1 = open_as(h, &n1).await;
    let b = store_n1.append(&space, ev("by N+1")).await.unwrap();
    assert_eq!(b.parents, vec![a.id]);
    drop(store_n1);

    let store_n = open_as(h, &n).await;
    let c = store_n.append(&space, ev("by N again")).await.unwrap();
    assert_eq!(c.parents, vec![b.id], "N sees N+1's epoch as the head");
    let page = store_n.events_since(&space, None, 100).await.unwrap();
    assert_eq!(page.events.len(), 3);
    assert!(matches!(
        store_n.repair_heads(&space).await.unwrap(),
        cairn_core::RepairOutcome::Unchanged
    ));

    assert_eq!(run(h, &n1).await.unwrap(), Opened::AtHead);
    assert_eq!(state(h).await.stamp.as_deref(), Some("t_0002_event_note"));
}

// ---- M2: real stores match the model ------------------------------------------------------

#[derive(Clone, Debug)]
struct M2Case {
    /// Parent of each test node: `None` = cairn's head, `Some(j)` = node j (< i).
    parents: Vec<Option<usize>>,
    /// Opens: (head node or None for cairn's head, runner records lineage?).
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

    fn set(&self, head: Option<usize>) -> MigrationSet {
        let revs = self
            .path(head)
            .into_iter()
            .map(|i| {
                let parent = self.parents[i].map_or_else(cairn_head, Self::node_id);
                table_rev(&Self::node_id(i), &parent)
            })
            .collect();
        set(revs)
    }
}

/// The model's prediction for one open: the expected outcome kind, whether it writes, and the
/// state afterwards.
fn m2_expect(
    set: &MigrationSet,
    records: bool,
    st: &StoredState,
) -> (&'static str, bool, StoredState) {
    match classify(set, st) {
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
                lineage: Some(set.lineage()),
            },
        ),
        Classification::Upgrade { .. } => (
            "upgraded",
            true,
            StoredState {
                stamp: Some(set.head().id.clone()),
                lineage: if records {
                    Some(set.lineage())
                } else {
                    st.lineage.clone()
                },
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

/// Tables a store at `stamp` holds beyond cairn's own: the test nodes on the stamp's path.
fn m2_tables(case: &M2Case, stamp: Option<&str>) -> BTreeSet<String> {
    let node = stamp
        .and_then(|s| s.strip_prefix("m2_n"))
        .and_then(|n| n.parse::<usize>().ok());
    case.path(node).into_iter().map(M2Case::node_id).collect()
}

async fn m2_run_case<H: MigrationHarness>(h: &H, case: &M2Case) -> Result<(), String> {
    let h = h.fresh().await;
    let mut model = StoredState::default();
    let mut base_tables: Option<BTreeMap<String, Vec<String>>> = None;
    for (step, (head, records)) in case.opens.iter().enumerate() {
        let set = case.set(*head);
        let mut runner = Runner::new(set.clone()).with_lock_timeout(DEADLINE);
        if !records {
            runner = runner.with_hooks(RunnerHooks {
                skip_lineage: true,
                ..RunnerHooks::default()
            });
        }
        let (want, writes, next) = m2_expect(&set, *records, &model);
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
        let real = state(&h).await;
        if real != model {
            return Err(format!("{ctx}: state {real:?} != model {model:?}"));
        }
        let schema = h.schema().await;
        let cairn_tables: BTreeMap<String, Vec<String>> = schema
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
            None if model.stamp.is_some() => base_tables = Some(cairn_tables),
            Some(b) if *b != cairn_tables => return Err(format!("{ctx}: cairn's tables changed")),
            _ => {}
        }
    }
    Ok(())
}

/// M2: real stores match the model over random revision trees (up to three revisions on top of
/// cairn's history) and up to eight opens by any build, some of which upgrade without
/// recording lineage. After every open: the outcome, stamp, lineage, tables and columns, and
/// whether the open committed anything.
pub async fn m2_real_stores_match_the_model<H: MigrationHarness>(h: &H) {
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
                .block_on(m2_run_case(h, &case))
                .map_err(|e| TestCaseError::fail(format!("M2: {e}")))
        });
        if let Err(e) = result {
            panic!("{}: {e}", h.backend());
        }
    });
}

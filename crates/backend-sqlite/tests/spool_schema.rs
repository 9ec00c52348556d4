//! The spool's revisions of cairn's own migration set (`0002_spool`, `0003_spool_import`) on
//! SQLite: it passes the executed additivity check, a store created by the previous build (at
//! `0001_epoch_log`) upgrades to them with its epoch log intact, and the previous build opens a
//! store ahead of it as *ahead* and keeps using its epoch log — until the contract revision
//! `0008_spool_ready_contract` is applied, which refuses it.

use cairn_core::{EpochStore, Event, SpaceId};
use cairn_migrate::additivity::check_set;
use cairn_migrate::{cairn_revisions, cairn_set, MigrationSet, Opened, Runner, CAIRN_SET};
use cairn_sqlite::{SqliteAdditivity, SqliteOptions, SqliteStore};

/// The runner of a build at `0007_spool_ready`: a store it opens is where a rollout of this
/// release leaves it while older builds are live (the contract revision 0008 deferred).
fn expand_build() -> Runner {
    Runner::new(
        cairn_set()
            .up_to("0007_spool_ready")
            .expect("a revision of the set"),
    )
}

/// The runner of the build before the spool: cairn's set as it was, `[0001_epoch_log]`.
fn previous_build() -> Runner {
    let base = cairn_revisions().into_iter().take(1).collect();
    Runner::new(MigrationSet::new(CAIRN_SET, base).expect("the base revision alone is a set"))
}

fn space() -> SpaceId {
    SpaceId::new(b"spool-schema".to_vec()).unwrap()
}

fn event(n: u32) -> Vec<Event> {
    vec![Event::new("schema.test", format!("event-{n}").into_bytes())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_revisions_pass_the_additivity_check_on_sqlite() {
    let set = cairn_set();
    let ids: Vec<&str> = set.revisions().iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "0001_epoch_log",
            "0002_spool",
            "0003_spool_import",
            "0004_fleet",
            "0005_spool_claim_jitter",
            "0006_spool_run_close",
            "0007_spool_ready",
            "0008_spool_ready_contract",
            "0009_spool_flow",
            "0010_epoch_sync",
            "0011_spool_room",
        ]
    );
    let reports = check_set(&SqliteAdditivity::new(), &set)
        .await
        .expect("the check runs");
    assert_eq!(reports.len(), set.revisions().len() - 1);
    for r in reports {
        assert!(
            r.violations.is_empty(),
            "{} is not additive on SQLite: {:?}",
            r.revision,
            r.violations
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_at_0001_upgrades_to_the_spool_with_its_epoch_log_intact() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cairn.db");
    let (old, opened) =
        SqliteStore::open_migrated(&db, SqliteOptions::default(), &previous_build())
            .await
            .unwrap();
    assert!(
        matches!(opened, Opened::Upgraded { ref applied, .. } if applied == &["0001_epoch_log"]),
        "{opened:?}"
    );
    let mut appended = Vec::new();
    for n in 0..3 {
        appended.push(old.append(&space(), event(n)).await.unwrap());
    }
    drop(old);

    let store = SqliteStore::open(&db).await.unwrap();
    assert_eq!(
        store.opened(),
        &Opened::Upgraded {
            from: Some("0001_epoch_log".into()),
            applied: vec![
                "0002_spool".into(),
                "0003_spool_import".into(),
                "0004_fleet".into(),
                "0005_spool_claim_jitter".into(),
                "0006_spool_run_close".into(),
                "0007_spool_ready".into(),
                "0008_spool_ready_contract".into(),
                "0009_spool_flow".into(),
                "0010_epoch_sync".into(),
                "0011_spool_room".into(),
            ],
        }
    );
    let last = appended.last().unwrap();
    assert_eq!(store.heads(&space()).await.unwrap(), vec![last.head()]);
    let feed = store.events_since(&space(), None, 100).await.unwrap();
    assert_eq!(feed.events.len(), 3, "the epoch log keeps every event");
    let next = store.append(&space(), event(3)).await.unwrap();
    assert_eq!(next.parents, vec![last.id]);

    drop(store);
    let again = SqliteStore::open(&db).await.unwrap();
    assert_eq!(again.opened(), &Opened::AtHead);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_build_opens_a_spool_store_ahead_and_keeps_using_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cairn.db");
    let (current, _) = SqliteStore::open_migrated(&db, SqliteOptions::default(), &expand_build())
        .await
        .unwrap();
    let first = current.append(&space(), event(0)).await.unwrap();

    let (previous, opened) =
        SqliteStore::open_migrated(&db, SqliteOptions::default(), &previous_build())
            .await
            .unwrap();
    assert_eq!(
        opened,
        Opened::Ahead {
            stamp: "0007_spool_ready".into()
        }
    );
    assert_eq!(previous.heads(&space()).await.unwrap(), vec![first.head()]);
    let second = previous.append(&space(), event(1)).await.unwrap();
    assert_eq!(second.parents, vec![first.id]);
    // Both builds see one history.
    assert_eq!(current.heads(&space()).await.unwrap(), vec![second.head()]);
    let third = current.append(&space(), event(2)).await.unwrap();
    assert_eq!(previous.heads(&space()).await.unwrap(), vec![third.head()]);
    drop((current, previous));

    // Once the contract revision is applied, the previous build is refused: it would use what
    // a contract revision may have removed.
    let head = SqliteStore::open(&db).await.unwrap();
    drop(head);
    let refused = SqliteStore::open_migrated(&db, SqliteOptions::default(), &previous_build())
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        refused.to_string().contains("0008_spool_ready_contract"),
        "{refused}"
    );
}

/// A spool over a store that has no spool tables (opened only by the build before the spool)
/// is refused with `Corrupt`, naming the missing revision, instead of failing on first use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_over_a_store_without_spool_tables_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cairn.db");
    let (old, _) = SqliteStore::open_migrated(&db, SqliteOptions::default(), &previous_build())
        .await
        .unwrap();
    let clock = std::sync::Arc::new(cairn_core::ManualClock::default());
    match cairn_sqlite::SqliteSpool::from_store(&old, clock, Default::default()).await {
        Err(cairn_core::Error::Corrupt { detail, .. }) => {
            assert!(detail.contains("0002_spool"), "{detail}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

/// Revision `0011_spool_room` on SQLite is one read (the fill factors are Postgres's): a build
/// whose head is `0010_epoch_sync` opens a store this build migrated to 0011 as *ahead* and
/// keeps appending beside this build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_release_at_0010_opens_a_store_at_0011_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("room.db");
    let current = SqliteStore::open(&db).await.unwrap();
    let first = current.append(&space(), event(0)).await.unwrap();
    let previous_runner = Runner::new(cairn_set().up_to("0010_epoch_sync").unwrap());
    let (previous, opened) =
        SqliteStore::open_migrated(&db, SqliteOptions::default(), &previous_runner)
            .await
            .unwrap();
    assert_eq!(
        opened,
        Opened::Ahead {
            stamp: "0011_spool_room".into()
        }
    );
    let second = previous.append(&space(), event(1)).await.unwrap();
    assert_eq!(second.parents, vec![first.id]);
    assert_eq!(current.heads(&space()).await.unwrap(), vec![second.head()]);
}

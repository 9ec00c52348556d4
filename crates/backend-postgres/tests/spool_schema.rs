//! The spool's revisions of cairn's own migration set (`0002_spool`, `0003_spool_import`) on
//! Postgres: it passes the executed additivity check, a store created by the previous build (at
//! `0001_epoch_log`) upgrades to them with its epoch log intact, and the previous build opens a
//! store ahead of it as *ahead* and keeps using its epoch log — until the contract revision
//! `0008_spool_ready_contract` is applied, which refuses it.

use std::str::FromStr;

use cairn_core::{EpochStore, Event, SpaceId};
use cairn_migrate::additivity::check_set;
use cairn_migrate::{cairn_revisions, cairn_set, MigrationSet, Opened, Runner, CAIRN_SET};
use cairn_postgres::testkit::{harness, test_server_url, PgHarness};
use cairn_postgres::{PgAdditivity, PgOptions, PgStore};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

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

async fn url() -> String {
    test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"))
}

/// A schema of its own next to the harness's (which the harness already migrated to this
/// build's head), created by whichever build connects first; dropped by [`drop_schema`].
fn own_schema(h: &PgHarness) -> PgOptions {
    h.options().schema(format!("{}_own", h.schema()))
}

async fn drop_schema(opts: &PgOptions) {
    let conn_opts = PgConnectOptions::from_str(&url().await).expect("test server URL");
    let mut conn = PgConnection::connect_with(&conn_opts)
        .await
        .expect("connect to the test server");
    sqlx::query(&format!(
        "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
        opts.schema_name()
    ))
    .execute(&mut conn)
    .await
    .expect("drop the test schema");
    let _ = conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_revisions_pass_the_additivity_check_on_postgres() {
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
    let reports = check_set(&PgAdditivity::new(url().await), &set)
        .await
        .expect("the check runs");
    assert_eq!(reports.len(), set.revisions().len() - 1);
    for r in reports {
        if set.is_contract(&r.revision) {
            // Gated by the fleet registry instead; flagged by the check, hence the mark.
            assert!(!r.violations.is_empty(), "{}", r.revision);
            continue;
        }
        assert!(
            r.violations.is_empty(),
            "{} is not additive on Postgres: {:?}",
            r.revision,
            r.violations
        );
    }
}

/// Revision `0011_spool_room` leaves half of each `spool_ready` page free and 60 % of each
/// `spool_run` page (a claim's new row versions then stay on their pages): both storage
/// parameters are set on a store at this build's head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spool_tables_leave_room_on_their_pages() {
    let h = harness().await;
    let conn_opts = PgConnectOptions::from_str(&url().await).expect("test server URL");
    let mut conn = PgConnection::connect_with(&conn_opts)
        .await
        .expect("connect to the test server");
    for (table, fillfactor) in [
        ("spool_ready", "fillfactor=50"),
        ("spool_run", "fillfactor=40"),
    ] {
        let options: Option<Vec<String>> = sqlx::query_scalar(
            "SELECT c.reloptions FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2",
        )
        .bind(h.schema())
        .bind(table)
        .fetch_one(&mut conn)
        .await
        .expect("the table exists");
        assert_eq!(
            options,
            Some(vec![fillfactor.to_owned()]),
            "{table}'s storage parameters"
        );
    }
    let _ = conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_at_0001_upgrades_to_the_spool_with_its_epoch_log_intact() {
    let h = harness().await;
    let opts = own_schema(&h);
    let (old, opened) = PgStore::open_migrated(opts.clone(), &previous_build())
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

    let store = PgStore::open_with(opts.clone()).await.unwrap();
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

    let again = PgStore::open_with(opts.clone()).await.unwrap();
    assert_eq!(again.opened(), &Opened::AtHead);
    drop(again);
    drop_schema(&opts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_build_opens_a_spool_store_ahead_and_keeps_using_it() {
    let h = harness().await;
    // A schema of its own: the harness's store is at this build's head already.
    let opts = own_schema(&h);
    let (current, _) = PgStore::open_migrated(opts.clone(), &expand_build())
        .await
        .unwrap();
    let first = current.append(&space(), event(0)).await.unwrap();

    let (previous, opened) = PgStore::open_migrated(opts.clone(), &previous_build())
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
    assert_eq!(current.heads(&space()).await.unwrap(), vec![second.head()]);
    let third = current.append(&space(), event(2)).await.unwrap();
    assert_eq!(previous.heads(&space()).await.unwrap(), vec![third.head()]);
    drop((current, previous));

    // Once the contract revision is applied, the previous build is refused: it would use what
    // a contract revision may have removed.
    drop(PgStore::open_with(opts.clone()).await.unwrap());
    let refused = PgStore::open_migrated(opts.clone(), &previous_build())
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        refused.to_string().contains("0008_spool_ready_contract"),
        "{refused}"
    );
    drop_schema(&opts).await;
}

/// Revision `0011_spool_room` (additive) and the build before it: a build whose head is
/// `0010_epoch_sync` opens a store this build migrated to 0011 as *ahead*, and both share its
/// spool — each enqueues (a dedup key maps to one run id across the two), each claims what the
/// other enqueued, and every run succeeds exactly once. The build at 0010 runs the spool
/// statements this build runs (0011 changes storage parameters only, no statement), so its code
/// here is this crate's spool behind the older runner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_release_at_0010_shares_the_spool_of_a_store_at_0011() {
    use std::sync::Arc;
    use std::time::Duration;

    use cairn_core::spool::{
        ConsumerId, DedupKey, EnqueueOptions, QueueName, RunState, Spool, SpoolConfig, SystemClock,
    };
    use cairn_postgres::PgSpool;

    let h = harness().await;
    let opts = h.options().schema(format!("{}_room", h.schema()));
    let (current, opened) = PgStore::open_migrated(opts.clone(), &Runner::new(cairn_set()))
        .await
        .unwrap();
    assert!(matches!(opened, Opened::Upgraded { .. }), "{opened:?}");
    let previous_runner = Runner::new(cairn_set().up_to("0010_epoch_sync").unwrap());
    let (previous, opened) = PgStore::open_migrated(opts.clone(), &previous_runner)
        .await
        .unwrap();
    assert_eq!(
        opened,
        Opened::Ahead {
            stamp: "0011_spool_room".into()
        }
    );
    let spool = |s: &PgStore| {
        PgSpool::from_store(s, Arc::new(SystemClock), SpoolConfig::default()).expect("spool")
    };
    let (new, old) = (spool(&current), spool(&previous));
    let q = QueueName::new("room").unwrap();
    let key = |n: u32| DedupKey::from_parts([format!("k{n}").as_str()]).unwrap();
    let mut ids = std::collections::BTreeMap::new();
    for n in 0..40 {
        let (first, second) = if n % 2 == 0 {
            (&new, &old)
        } else {
            (&old, &new)
        };
        let a = first
            .enqueue(&q, &key(n), vec![n as u8], EnqueueOptions::default())
            .await
            .unwrap();
        let b = second
            .enqueue(&q, &key(n), vec![n as u8], EnqueueOptions::default())
            .await
            .unwrap();
        assert!(a.created && !b.created, "key {n}");
        assert_eq!(
            a.run_id, b.run_id,
            "key {n} maps to one run id across builds"
        );
        ids.insert(a.run_id, n);
    }
    let lease = Duration::from_secs(60);
    let mut done = std::collections::BTreeSet::new();
    for round in 0.. {
        let (who, me) = if round % 2 == 0 {
            (&new, "new")
        } else {
            (&old, "old")
        };
        let got = who
            .claim(&q, &ConsumerId::new(me).unwrap(), lease, 7)
            .await
            .unwrap();
        if got.is_empty() {
            break;
        }
        for c in got {
            // Each build acks half of what either claimed.
            let acker = if done.len() % 2 == 0 { &new } else { &old };
            acker.ack(c.run_id, c.token).await.unwrap();
            assert!(done.insert(c.run_id), "{} handed out twice", c.run_id);
        }
    }
    assert_eq!(done.len(), ids.len(), "every run was claimed once");
    for id in ids.keys() {
        let run = old.run(*id).await.unwrap().expect("the run");
        assert_eq!(run.state, RunState::Succeeded, "{id}");
    }
    new.close().await;
    old.close().await;
    drop((current, previous));
    drop_schema(&opts).await;
}

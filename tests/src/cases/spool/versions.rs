//! Builds with different migration histories sharing one spool (S14).
//!
//! As in the migration cases, a build is modelled by the runner it opens the store with:
//! cairn's own revisions ("this build") or those followed by one additive test revision (the
//! next release, one revision ahead).

use std::time::Duration;

use cairn_core::spool::{FactOutcome, RunFilter, RunState};
use cairn_core::{EnqueueOptions, Error, FactName, NackKind, RunEventId, Spool};
use cairn_migrate::{cairn_revisions, MigrationSet, Revision, Runner, CAIRN_SET};

use super::support::{consumer, info, key, max_backoff, within, LEASE};
use crate::{random_queue, SpoolHarness};

/// How long a build may wait for the migration lock.
const LOCK_TIMEOUT: Duration = Duration::from_secs(20);

/// The next release: cairn's revisions plus one additive revision that touches every spool
/// table the way a later release might (nullable columns, a new table, a new index).
fn next_release() -> Runner {
    let mut revs = cairn_revisions();
    let parent = revs.last().expect("cairn has revisions").id.clone();
    let sql: Vec<String> = [
        "ALTER TABLE spool_run ADD COLUMN t_origin TEXT",
        "ALTER TABLE spool_event ADD COLUMN t_note TEXT",
        "ALTER TABLE spool_fact ADD COLUMN t_source TEXT",
        "CREATE INDEX t_spool_run_origin ON spool_run (t_origin)",
        "CREATE TABLE t_spool_audit (id BIGINT NOT NULL PRIMARY KEY, note TEXT)",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    revs.push(Revision {
        id: "t_0003_spool_next".into(),
        parent: Some(parent),
        up_sqlite: sql.clone(),
        up_postgres: sql,
        description: "test revision: the next release's additive spool change".into(),
    });
    Runner::new(MigrationSet::new(CAIRN_SET, revs).expect("a valid test chain"))
        .with_lock_timeout(LOCK_TIMEOUT)
}

/// This build: cairn's own revisions.
fn this_build() -> Runner {
    Runner::new(MigrationSet::new(CAIRN_SET, cairn_revisions()).expect("cairn's set is valid"))
        .with_lock_timeout(LOCK_TIMEOUT)
}

/// S14: the next release migrates the store one additive revision ahead; this build opens the
/// store (ahead, so it migrates nothing) and the two work the same queue: each deduplicates the
/// other's keys, claims, heartbeats, acks, nacks and cancels the other's runs, reads and
/// acknowledges the other's events, sees the other's facts (first writer wins across builds),
/// and wakes for the other's enqueues. Both read every run identically.
pub async fn s14_builds_one_additive_revision_apart_share_runs<H: SpoolHarness>(h: &H) {
    let newer = h
        .open_spool_as(&next_release())
        .await
        .unwrap_or_else(|e| panic!("S14: the next release opens the store: {e}"));
    let older = h
        .open_spool_as(&this_build())
        .await
        .unwrap_or_else(|e| panic!("S14: this build opens a store one revision ahead: {e}"));
    let q = random_queue("s14");
    let builds: [(&str, &dyn Spool); 2] = [("newer", newer.as_ref()), ("older", older.as_ref())];

    // Each build enqueues; each finds the other's key.
    let mut wake = older.subscribe(&q).await.unwrap();
    let a = newer
        .enqueue(
            &q,
            &key(&["s14", "a"]),
            b"from the newer build".to_vec(),
            EnqueueOptions::default().priority(5),
        )
        .await
        .unwrap();
    within(
        "S14: this build wakes for the newer build's enqueue",
        wake.wait(),
    )
    .await
    .unwrap();
    let b = older
        .enqueue(
            &q,
            &key(&["s14", "b"]),
            b"from this build".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    assert!(a.created && b.created);
    for (name, s) in builds {
        for (k, want) in [("a", a.run_id), ("b", b.run_id)] {
            let again = s
                .enqueue(&q, &key(&["s14", k]), Vec::new(), EnqueueOptions::default())
                .await
                .unwrap();
            assert!(
                !again.created && again.run_id == want,
                "S14: the {name} build deduplicates key {k}"
            );
        }
    }

    // This build claims the newer build's run (priority first), reports on it and acks it.
    let got = older.claim(&q, &consumer("older"), LEASE, 1).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].run_id, got[0].payload.as_slice()),
        (a.run_id, &b"from the newer build"[..])
    );
    let hb = older
        .heartbeat(a.run_id, got[0].token, LEASE)
        .await
        .unwrap();
    assert!(!hb.cancel_requested);
    let ev1 = RunEventId::new(b"older-1".to_vec()).unwrap();
    let ev2 = RunEventId::new(b"newer-2".to_vec()).unwrap();
    assert_eq!(
        older
            .append_event(a.run_id, &ev1, b"built".to_vec())
            .await
            .unwrap()
            .seq,
        1
    );
    assert_eq!(
        newer
            .append_event(a.run_id, &ev2, b"tested".to_vec())
            .await
            .unwrap()
            .seq,
        2
    );
    let stage = FactName::new("stage.build").unwrap();
    let review = FactName::new("review").unwrap();
    assert_eq!(
        older
            .set_fact(a.run_id, &stage, b"passed".to_vec())
            .await
            .unwrap(),
        FactOutcome::Set
    );
    assert_eq!(
        newer
            .set_fact(a.run_id, &review, b"approve".to_vec())
            .await
            .unwrap(),
        FactOutcome::Set
    );
    match older.set_fact(a.run_id, &review, b"reject".to_vec()).await {
        Err(Error::FactConflict { existing, .. }) => assert_eq!(existing, b"approve"),
        other => panic!("S14: the newer build's fact wins: {other:?}"),
    }
    older.ack(a.run_id, got[0].token).await.unwrap();
    for (name, s) in builds {
        let events = s.events(a.run_id, 0, 10).await.unwrap();
        let seen: Vec<(u64, &[u8])> = events
            .iter()
            .map(|e| (e.seq, e.event_id.as_bytes()))
            .collect();
        assert_eq!(
            seen,
            vec![(1, &b"older-1"[..]), (2, &b"newer-2"[..])],
            "S14: the {name} build reads both builds' events"
        );
        let facts = s.facts(a.run_id).await.unwrap();
        assert_eq!(facts.len(), 2, "S14: the {name} build reads both facts");
        assert_eq!(info(s, a.run_id).await.state, RunState::Succeeded);
    }
    assert_eq!(
        newer
            .acknowledge_events(a.run_id, &[ev1.clone(), ev2.clone()])
            .await
            .unwrap(),
        2
    );
    assert!(older.events(a.run_id, 0, 10).await.unwrap().is_empty());

    // The newer build claims this build's run and retries it; this build parks it.
    let got = newer.claim(&q, &consumer("newer"), LEASE, 5).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].run_id, b.run_id);
    let nacked = newer
        .nack(b.run_id, got[0].token, NackKind::Retryable, "flaky")
        .await
        .unwrap();
    assert_eq!(nacked.state, RunState::Queued);
    h.clock().advance(max_backoff(1) + Duration::from_secs(1));
    let again = older.claim(&q, &consumer("older"), LEASE, 5).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].run_id, again[0].attempt), (b.run_id, 2));
    assert!(
        newer.ack(b.run_id, got[0].token).await.is_err(),
        "S14: the first attempt's token is stale in every build"
    );
    older
        .nack(b.run_id, again[0].token, NackKind::Permanent, "bad input")
        .await
        .unwrap();

    // Cancel across builds: queued, then claimed (the holder sees it on heartbeat).
    let c = older
        .enqueue(
            &q,
            &key(&["s14", "c"]),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let d = newer
        .enqueue(
            &q,
            &key(&["s14", "d"]),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    newer.cancel(c.run_id).await.unwrap();
    let held = older.claim(&q, &consumer("older"), LEASE, 5).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].run_id, d.run_id);
    newer.cancel(d.run_id).await.unwrap();
    let hb = older
        .heartbeat(d.run_id, held[0].token, LEASE)
        .await
        .unwrap();
    assert!(
        hb.cancel_requested,
        "S14: a cancel from the newer build reaches the holder"
    );
    older
        .nack(d.run_id, held[0].token, NackKind::Retryable, "stopping")
        .await
        .unwrap();

    // Both builds read every run the same way.
    let filter = RunFilter {
        queue: Some(q.clone()),
        ..RunFilter::default()
    };
    let from_newer = newer.runs(&filter, 100).await.unwrap();
    let from_older = older.runs(&filter, 100).await.unwrap();
    assert_eq!(
        from_newer, from_older,
        "S14: both builds list the same runs"
    );
    let states: Vec<(cairn_core::RunId, RunState)> =
        from_older.iter().map(|r| (r.run_id, r.state)).collect();
    let mut want = vec![
        (a.run_id, RunState::Succeeded),
        (b.run_id, RunState::Parked),
        (c.run_id, RunState::Canceled),
        (d.run_id, RunState::Canceled),
    ];
    want.sort();
    assert_eq!(states, want);
}

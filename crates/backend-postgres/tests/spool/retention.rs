//! S11 on Postgres with failures: a retention pass cut short after every batch, and one whose
//! batch fails on a lock timeout, leave a consistent store, and later passes end where one
//! uninterrupted pass on the model ends.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use cairn_conformance::random_queue;
use cairn_core::spool::{RetentionBudget, RetentionPolicy, RunFilter, SpoolStats};
use cairn_core::{
    ConsumerId, DedupKey, EnqueueOptions, Error, MemorySpool, QueueName, RunEventId, Spool,
};
use cairn_postgres::spool::testkit::spool_harness;
use cairn_postgres::testkit::test_server_url;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// The same history on any spool: 12 runs with 5 events each, two thirds of them finished.
async fn fill(s: &dyn Spool, q: &QueueName) {
    let me = ConsumerId::new("retention").unwrap();
    for i in 0..12u8 {
        let k = DedupKey::from_parts([format!("r{i}")]).unwrap();
        let run = s
            .enqueue(q, &k, vec![i], EnqueueOptions::default())
            .await
            .unwrap()
            .run_id;
        for e in 0..5u8 {
            let id = RunEventId::new(vec![e]).unwrap();
            s.append_event(run, &id, vec![e; 100]).await.unwrap();
        }
        if i % 3 != 0 {
            let c = s.claim(q, &me, Duration::from_secs(30), 1).await.unwrap();
            s.ack(c[0].run_id, c[0].token).await.unwrap();
        }
    }
}

/// What must hold after any committed batch: the stats agree with the runs' own counts.
async fn assert_consistent(s: &dyn Spool, q: &QueueName, ctx: &str) -> SpoolStats {
    let stats = s.stats().await.unwrap();
    let runs = s
        .runs(
            &RunFilter {
                queue: Some(q.clone()),
                ..RunFilter::default()
            },
            1000,
        )
        .await
        .unwrap();
    let listed: u64 = runs.iter().map(|r| r.events).sum();
    assert_eq!(
        stats.events, listed,
        "{ctx}: stats count every run's events"
    );
    assert_eq!(
        stats.runs.values().sum::<u64>(),
        runs.len() as u64,
        "{ctx}: stats count every run"
    );
    let mut bytes = 0;
    for r in &runs {
        let events = s.events(r.run_id, 0, 1000).await.unwrap();
        assert_eq!(events.len() as u64, r.events, "{ctx}: events readable");
        assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
        bytes += events.iter().map(|e| e.payload.len() as u64).sum::<u64>();
    }
    assert_eq!(
        stats.event_bytes, bytes,
        "{ctx}: stats count the payload bytes"
    );
    stats
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11_retention_cut_after_every_batch_or_failing_stays_consistent() {
    let h = spool_harness().await;
    let clock = cairn_conformance::SpoolHarness::clock(&h).clone();
    let spool = h
        .spool_with(h.options().lock_timeout(Duration::from_millis(200)))
        .await
        .unwrap();
    let model = MemorySpool::new(Arc::new(clock.clone()));
    let q = random_queue("s11-fail");
    fill(&spool, &q).await;
    fill(&model, &q).await;
    clock.advance(DAY * 2);
    let policy = RetentionPolicy {
        max_age: DAY,
        max_bytes: 2_000,
    };
    let budget = |max_batches| RetentionBudget {
        batch_size: 7,
        max_batches,
        max_duration: Duration::from_secs(3600),
    };

    // A real failure: the first batch waits on a lock past the timeout.
    let url = test_server_url().await.unwrap();
    let mut conn = PgConnection::connect_with(&PgConnectOptions::from_str(&url).unwrap())
        .await
        .unwrap();
    sqlx::query("SELECT set_config('search_path', $1, false)")
        .bind(h.pg().schema())
        .execute(&mut conn)
        .await
        .unwrap();
    let before = assert_consistent(&spool, &q, "before").await;
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    sqlx::query("LOCK TABLE spool_event IN ACCESS EXCLUSIVE MODE")
        .execute(&mut conn)
        .await
        .unwrap();
    let failed = spool.retention_pass(&policy, &budget(1000)).await;
    assert!(
        matches!(failed, Err(Error::Retryable { .. })),
        "S11: the failed batch is an error: {failed:?}"
    );
    sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
    assert_eq!(
        assert_consistent(&spool, &q, "after the failure").await,
        before,
        "S11: the failed batch removed nothing"
    );

    // Cut after every batch: a pass of one batch stops as a crash between batches would leave
    // it. A pass starts with the event phase, so once the events are done a pass needs two
    // batches (the empty event batch, then a run batch) to make progress.
    let mut passes = 0;
    let mut max_batches = 1;
    loop {
        let report = spool
            .retention_pass(&policy, &budget(max_batches))
            .await
            .unwrap();
        passes += 1;
        assert_consistent(&spool, &q, &format!("after pass {passes}")).await;
        if report.complete {
            break;
        }
        if report.events_expired + report.events_over_cap + report.runs_removed == 0 {
            max_batches = 2;
        }
        assert!(passes < 100, "retention ends");
    }
    assert!(passes > 2, "the history takes several batches");
    let want = model
        .retention_pass(&policy, &RetentionBudget::default())
        .await
        .unwrap();
    assert!(want.complete);
    assert_eq!(
        spool.stats().await.unwrap(),
        model.stats().await.unwrap(),
        "S11: the cut passes end where one uninterrupted pass ends"
    );
    spool.close().await;
}

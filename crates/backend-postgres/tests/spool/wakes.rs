//! Wake-ups the spool contract promises besides an enqueue's.

use std::time::{Duration, Instant};

use cairn_conformance::random_queue;
use cairn_core::spool::{ImportSource, NackKind, RunImportOutcome, RunState, SpoolConfig};
use cairn_core::{ConsumerId, DedupKey, EnqueueOptions, ManualClock, RunId, Spool, Wakeup};
use cairn_postgres::spool::testkit::spool_harness;
use cairn_postgres::testkit::test_server_url;
use cairn_postgres::{PgOptions, PgSpool, PgStore};
use sqlx::{Connection, PgConnection};

const DEADLINE: Duration = Duration::from_secs(20);

/// A retryable nack puts the run back in its queue and wakes the queue's subscribers (the
/// `Spool::nack` contract) by `NOTIFY`: with the fallback poll an hour away, only the nack can
/// wake the subscriber in time. Kills `wake = to == RunState::Queued` → `!=` in `nack`
/// (mutation testing of `spool/settle.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_nack_wakes_the_queues_subscribers() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    spool.set_wake_poll(Duration::from_secs(3600));
    let q = random_queue("nack-wake");
    spool
        .enqueue(
            &q,
            &DedupKey::from_parts(["nack-wake"]).unwrap(),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let me = ConsumerId::new("nack-wake").unwrap();
    let claimed = spool
        .claim(&q, &me, Duration::from_secs(30), 1)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let mut wake = spool.subscribe(&q).await.unwrap();
    let nacked = spool
        .nack(
            claimed[0].run_id,
            claimed[0].token,
            NackKind::Retryable,
            "again",
        )
        .await
        .unwrap();
    assert_eq!(nacked.state, RunState::Queued);
    tokio::time::timeout(Duration::from_secs(20), wake.wait())
        .await
        .expect("a retryable nack must wake the queue's subscriber without waiting for a poll")
        .unwrap();
    spool.close().await;
}

/// The server connections whose `application_name` is `app`, and the last statement of each.
async fn connections_of(admin: &mut PgConnection, app: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT query FROM pg_catalog.pg_stat_activity WHERE application_name = $1 ORDER BY pid",
    )
    .bind(app)
    .fetch_all(admin)
    .await
    .unwrap()
}

/// Waits until `what` holds of the store's connections.
async fn until_connections(
    admin: &mut PgConnection,
    app: &str,
    what: &str,
    holds: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let started = Instant::now();
    loop {
        let now = connections_of(admin, app).await;
        if holds(&now) {
            return now;
        }
        assert!(started.elapsed() < DEADLINE, "{what}: {now:?}");
        tokio::task::yield_now().await;
    }
}

/// Subscriptions to many queues (two to one of them) share one listening connection: the spool
/// holds exactly one connection more than its pool once anyone subscribes, however many
/// queues are subscribed to. Each queue's enqueue wakes its subscribers by `NOTIFY` (the
/// fallback poll is an hour away); when the last subscription of a queue goes, its channel is
/// unlistened, and the other queues still wake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_to_every_queue_share_one_listening_connection() {
    let h = spool_harness().await;
    let app = cairn_core::scratch_name("cairn_listen");
    let server = test_server_url().await.expect("the test server");
    let sep = if server.contains('?') { '&' } else { '?' };
    let opts = PgOptions::new(format!("{server}{sep}application_name={app}"))
        .schema(h.pg().schema())
        .max_connections(2);
    let store = PgStore::open_with(opts).await.unwrap();
    let spool = PgSpool::from_store(
        &store,
        std::sync::Arc::new(ManualClock::default()),
        SpoolConfig::default(),
    )
    .unwrap();
    spool.set_wake_poll(Duration::from_secs(3600));
    let mut admin = PgConnection::connect(&server).await.unwrap();
    let queues: Vec<_> = (0..6).map(|_| random_queue("shared")).collect();
    // Open the pool's connections (two statements at once); nothing else runs on it until the
    // count below, so only the listener can add a connection.
    let (a, b) = tokio::join!(spool.stats(), spool.stats());
    a.unwrap();
    b.unwrap();
    let pooled = connections_of(&mut admin, &app).await.len();
    assert!(
        (1..=2).contains(&pooled),
        "the pool's connections: {pooled}"
    );

    let mut wakes: Vec<Box<dyn Wakeup>> = Vec::new();
    for q in &queues {
        wakes.push(spool.subscribe(q).await.unwrap());
    }
    let mut second = spool.subscribe(&queues[0]).await.unwrap();
    assert_eq!(
        connections_of(&mut admin, &app).await.len(),
        pooled + 1,
        "every subscription shares one listening connection"
    );

    for (i, q) in queues.iter().enumerate() {
        spool
            .enqueue(
                q,
                &DedupKey::from_parts([format!("k{i}")]).unwrap(),
                Vec::new(),
                EnqueueOptions::default(),
            )
            .await
            .unwrap();
    }
    for (i, wake) in wakes.iter_mut().enumerate() {
        tokio::time::timeout(DEADLINE, wake.wait())
            .await
            .unwrap_or_else(|_| panic!("queue {i}: no wake-up by NOTIFY"))
            .unwrap();
    }
    tokio::time::timeout(DEADLINE, second.wait())
        .await
        .expect("the queue's second subscriber is woken too")
        .unwrap();

    // The last subscription of queue 0 goes: its channel is unlistened on the listener.
    drop(second);
    drop(wakes.remove(0));
    let unlisten = format!("UNLISTEN \"{}\"", spool.wake_channel(&queues[0]));
    until_connections(&mut admin, &app, "queue 0 unlistened", |now| {
        now.iter().any(|q| q.contains(&unlisten))
    })
    .await;
    spool
        .enqueue(
            &queues[1],
            &DedupKey::from_parts(["again"]).unwrap(),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    tokio::time::timeout(DEADLINE, wakes[0].wait())
        .await
        .expect("queue 1 still wakes")
        .unwrap();

    spool.close().await;
}

/// `set_wake_poll` sets how often an idle subscription returns without a `NOTIFY`: set to an
/// hour, a subscription to an idle queue stays pending for twice the default poll (so neither
/// the default nor a poll rounded to nothing would pass); set to 20 ms, one returns with
/// nothing enqueued. Kills `millis` -> 0 or 1 and `set_wake_poll` ->
/// () (mutation testing of `spool/mod.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_poll_is_the_one_set() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let q = random_queue("poll");

    spool.set_wake_poll(Duration::from_secs(3600));
    let mut idle = spool.subscribe(&q).await.unwrap();
    assert!(
        tokio::time::timeout(2 * cairn_postgres::spool::WAKE_POLL, idle.wait())
            .await
            .is_err(),
        "an idle subscription returned long before its hour-long poll"
    );

    spool.set_wake_poll(Duration::from_millis(20));
    let mut polled = spool.subscribe(&q).await.unwrap();
    tokio::time::timeout(DEADLINE, polled.wait())
        .await
        .expect("a subscription with a 20 ms poll returns with nothing enqueued")
        .unwrap();
    spool.close().await;
}

/// An import wakes, by `NOTIFY`, the subscribers of each queue it gave a queued run (with the
/// fallback poll an hour away, only the import can wake them in time), and none of a queue
/// that received only finished runs. Kills `import_runs_tx`'s `r.state == RunState::Queued`
/// → `!=` (postgres-spool shard 2/4 survivor at `b06aef2`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_wakes_the_queues_it_gave_a_queued_run() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    spool.set_wake_poll(Duration::from_secs(3600));
    let (due, done) = (random_queue("import-due"), random_queue("import-done"));
    let mut wake_due = spool.subscribe(&due).await.unwrap();
    let mut wake_done = spool.subscribe(&done).await.unwrap();
    let now = spool.clock().now();
    let run = |queue: &cairn_core::QueueName, key: &str, state: RunState| {
        crate::import::imported(queue, key, state, RunId::generate(now), now)
    };
    let source = ImportSource {
        fingerprint: *blake3::hash(due.as_str().as_bytes()).as_bytes(),
        description: "a test source".into(),
    };
    let runs = vec![
        run(&done, "succeeded", RunState::Succeeded),
        run(&due, "queued", RunState::Queued),
        run(&done, "failed", RunState::Failed),
    ];
    let outcome = spool.import_runs(&source, runs).await.unwrap();
    assert!(
        matches!(&outcome, RunImportOutcome::Imported { created, .. } if created.len() == 3),
        "{outcome:?}"
    );
    tokio::time::timeout(DEADLINE, wake_due.wait())
        .await
        .expect("an import of a queued run must wake its queue's subscriber by NOTIFY")
        .unwrap();
    // A window for a wake that must not come: the NOTIFY for `due` has arrived, and the
    // fallback poll is an hour away.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), wake_done.wait())
            .await
            .is_err(),
        "an import of finished runs only must not wake that queue's subscribers"
    );
    spool.close().await;
}

/// An operator's retry of a parked run wakes its queue's subscribers by `NOTIFY` (its run is
/// due), and a discard wakes no one (as `Spool::retry_parked` and `Spool::discard` promise).
/// Kills `unpark_tx`'s `to == RunState::Queued` → `!=` (postgres-spool shard 3/4 survivor at
/// `b06aef2`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_parked_run_wakes_its_queue_and_a_discarded_one_does_not() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    spool.set_wake_poll(Duration::from_secs(3600));
    let q = random_queue("unpark-wake");
    let me = ConsumerId::new("unpark-wake").unwrap();
    let mut parked = Vec::new();
    for k in ["discard", "retry"] {
        let run = spool
            .enqueue(
                &q,
                &DedupKey::from_parts([k]).unwrap(),
                Vec::new(),
                EnqueueOptions::default(),
            )
            .await
            .unwrap()
            .run_id;
        let claimed = spool
            .claim(&q, &me, Duration::from_secs(30), 1)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        let nacked = spool
            .nack(run, claimed[0].token, NackKind::Permanent, "parked")
            .await
            .unwrap();
        assert_eq!(nacked.state, RunState::Parked);
        parked.push(run);
    }
    let mut wake = spool.subscribe(&q).await.unwrap();
    assert_eq!(
        spool.discard(parked[0], "op").await.unwrap().state,
        RunState::Canceled
    );
    // A window for a wake that must not come: a retry's NOTIFY arrives at once (below), and
    // the fallback poll is an hour away.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), wake.wait())
            .await
            .is_err(),
        "a discard must wake no one"
    );
    assert_eq!(
        spool.retry_parked(parked[1], "op").await.unwrap().state,
        RunState::Queued
    );
    tokio::time::timeout(DEADLINE, wake.wait())
        .await
        .expect("a retry of a parked run must wake its queue's subscriber by NOTIFY")
        .unwrap();
    spool.close().await;
}

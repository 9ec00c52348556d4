//! One Postgres store, one pool: a facade store opened with `pool_size(8)` holds at most 9
//! server connections — its pool (epoch log, spool, migrator, fleet heartbeat) and one
//! listening connection for every queue's wake-ups — with consumers on 4 queues, enqueues,
//! acks, epoch-log appends and fleet heartbeats under load included. (Before the store had one
//! pool, the same load held 20: the store's pool, the spool's own pool of 8 and one listening
//! connection per subscription.) The store's connections are the ones carrying the
//! `application_name` its URL sets, counted in `pg_stat_activity`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::{ConsumerId, DedupKey, EnqueueOptions, Event, QueueName, SpaceId, Spool, Store};
use sqlx::Connection;

/// The pool size the store is opened with.
const POOL: u32 = 8;
/// The connections the store may hold: its pool and the one listening connection.
const MOST: i64 = POOL as i64 + 1;
const QUEUES: usize = 4;
/// Runs enqueued per queue.
const RUNS: usize = 150;
/// Concurrent enqueuers per queue.
const ENQUEUERS: usize = 6;
/// Concurrent appenders to the epoch log, and appends each.
const APPENDERS: usize = 8;
const APPENDS: usize = 20;

/// The server connections whose `application_name` is `app` (client backends only: a parallel
/// query's workers carry their leader's `application_name` but are not connections).
async fn connections_of(admin: &mut sqlx::PgConnection, app: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_catalog.pg_stat_activity \
         WHERE application_name = $1 AND backend_type = 'client backend'",
    )
    .bind(app)
    .fetch_one(admin)
    .await
    .expect("pg_stat_activity is readable")
}

/// Claims and acks runs of `queue` until `stop`, waiting for wake-ups when none is due.
async fn consume(
    spool: Arc<dyn Spool>,
    queue: QueueName,
    acked: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) {
    let consumer = ConsumerId::new(format!("c-{}", queue.as_str())).unwrap();
    let mut wake = spool.subscribe(&queue).await.expect("subscribe");
    while !stop.load(Ordering::Relaxed) {
        let claimed = spool
            .claim(&queue, &consumer, Duration::from_secs(60), 8)
            .await
            .expect("claim");
        if claimed.is_empty() {
            wake.wait().await.expect("wait");
            continue;
        }
        // Acks of one claim go out together, so the ack batching runs too.
        let acks: Vec<_> = claimed
            .iter()
            .map(|c| {
                let spool = spool.clone();
                let (run, token) = (c.run_id, c.token);
                tokio::spawn(async move { spool.ack(run, token).await })
            })
            .collect();
        for done in acks {
            done.await.unwrap().expect("ack");
            acked.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_with_pool_size_8_and_4_consumers_holds_at_most_9_connections() {
    let server = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|why| panic!("no Postgres server for the connection test: {why}"));
    let schema = cairn::testkit::scratch_name("cairn_conn");
    let app = schema.clone();
    let sep = if server.contains('?') { '&' } else { '?' };
    let url = format!("{server}{sep}cairn_schema={schema}&application_name={app}");
    let mut admin = sqlx::PgConnection::connect(&server)
        .await
        .expect("the test server");

    let store = Store::builder(url)
        .pool_size(POOL)
        // Fleet heartbeats during the load too: each takes a pooled connection.
        .heartbeat_interval(Duration::from_millis(50))
        .open()
        .await
        .expect("the store opens");
    let spool = store.spool();

    // Sample the store's connections for the whole run.
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        let app = app.clone();
        let server = server.clone();
        tokio::spawn(async move {
            let mut conn = sqlx::PgConnection::connect(&server).await.unwrap();
            let mut most = 0;
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            while sampling.load(Ordering::Relaxed) {
                tick.tick().await;
                most = most.max(connections_of(&mut conn, &app).await);
            }
            most
        })
    };

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let queues: Vec<QueueName> = (0..QUEUES)
        .map(|i| QueueName::new(format!("q{i}")).unwrap())
        .collect();
    let consumers: Vec<_> = queues
        .iter()
        .map(|q| {
            tokio::spawn(consume(
                spool.clone(),
                q.clone(),
                acked.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let mut enqueuers = Vec::new();
    for q in &queues {
        for e in 0..ENQUEUERS {
            let spool = spool.clone();
            let q = q.clone();
            enqueuers.push(tokio::spawn(async move {
                for i in (e..RUNS).step_by(ENQUEUERS) {
                    let key = DedupKey::from_parts([format!("k{i}")]).unwrap();
                    spool
                        .enqueue(&q, &key, vec![0; 32], EnqueueOptions::default())
                        .await
                        .expect("enqueue");
                }
            }));
        }
    }
    for a in 0..APPENDERS {
        let epochs = store.epochs();
        enqueuers.push(tokio::spawn(async move {
            let space = SpaceId::new(format!("s{a}")).unwrap();
            for i in 0..APPENDS {
                epochs
                    .append(&space, vec![Event::new("k", format!("v{i}"))])
                    .await
                    .expect("append");
            }
        }));
    }
    for e in enqueuers {
        e.await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.load(Ordering::Relaxed) < QUEUES * RUNS {
        assert!(
            Instant::now() < deadline,
            "only {} of {} runs acked within 60 s",
            acked.load(Ordering::Relaxed),
            QUEUES * RUNS
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let now = connections_of(&mut admin, &app).await;
    sampling.store(false, Ordering::Relaxed);
    let most = sampler.await.unwrap();
    stop.store(true, Ordering::Relaxed);

    assert!(
        most >= 2,
        "the store's connections were not found (application_name {app}): {most}"
    );
    assert!(
        most <= MOST && now <= MOST,
        "a store with pool_size({POOL}) held {most} connections at most ({now} at the end); \
         expected at most {MOST}: its pool and one listening connection"
    );
    println!("connections of a pool_size({POOL}) store with {QUEUES} consumers: at most {most}");

    for c in consumers {
        c.abort();
    }
    drop(spool);
    store.close().await.expect("close");
    sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .execute(&mut admin)
        .await
        .expect("drop the test schema");
}

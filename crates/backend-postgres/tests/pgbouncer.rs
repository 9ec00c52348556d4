//! cairn behind PgBouncer 1.18 in transaction mode (issue 44 item 2): the whole shared
//! conformance suite — epoch log with the migration and multi-node cases, spool, transactions —
//! on stores opened through a private PgBouncer (`pool_mode = transaction`,
//! `ignore_startup_parameters = extra_float_digits`, [`PGBOUNCER_POOL_SIZE`] server connections
//! for stores of 8), declared with `?cairn_pooler=transaction`; plus what the pooler itself
//! could break: named statements, session settings, the migration lock, wake-ups, two nodes.
//!
//! The tests fail (never skip) when `pgbouncer` is missing: `apt-get install pgbouncer`.

mod epoch_log {
    cairn_conformance::suite!(
        cairn_postgres::testkit::pgbouncer_harness(),
        migrations,
        multi_node
    );
}

mod spool {
    cairn_conformance::spool_suite!(cairn_postgres::spool::testkit::pgbouncer_spool_harness());
}

mod tx {
    cairn_conformance::tx_suite!(cairn_postgres::spool::testkit::pgbouncer_spool_harness());
}

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_conformance::random_queue;
use cairn_core::spool::SpoolConfig;
use cairn_core::{
    ConsumerId, DedupKey, EnqueueOptions, EpochStore, Event, ManualClock, SpaceId, Spool,
};
use cairn_postgres::testkit::{
    pgbouncer_harness, pgbouncer_url, pgbouncer_url_apart, PGBOUNCER_POOL_SIZE,
};
use cairn_postgres::{PgOptions, PgSpool, PgStore};
use sqlx::{Connection, Executor, PgConnection, Row};

fn space(s: &str) -> SpaceId {
    SpaceId::new(s.as_bytes().to_vec()).unwrap()
}

fn event(i: usize) -> Event {
    Event {
        kind: "k".into(),
        key: None,
        payload: format!("p{i}").into_bytes(),
    }
}

/// Eight appenders on two stores ("nodes") through one PgBouncer, on one space: every append
/// succeeds, the seqs are exactly 1..=N (commit order, no gaps, no duplicates), and the space
/// ends with one head, the cache agreeing with the anti-join.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_eight_appenders_on_one_space_end_with_one_head_and_unique_seqs() {
    let h = pgbouncer_harness().await;
    let a = h.store().await.unwrap();
    let b = h.store().await.unwrap();
    let s = space("shared");
    const EACH: usize = 15;
    let mut tasks = Vec::new();
    for writer in 0..8 {
        let store = if writer % 2 == 0 {
            a.clone()
        } else {
            b.clone()
        };
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..EACH {
                let appended = store
                    .append(&s, vec![event(writer * 1000 + i)])
                    .await
                    .unwrap_or_else(|e| panic!("writer {writer} append {i}: {e}"));
                seqs.push(appended.seq.0);
            }
            seqs
        }));
    }
    let mut seqs = Vec::new();
    for t in tasks {
        seqs.extend(t.await.unwrap());
    }
    let unique: BTreeSet<u64> = seqs.iter().copied().collect();
    assert_eq!(unique.len(), seqs.len(), "a seq was handed out twice");
    let expected: BTreeSet<u64> = (1..=(8 * EACH) as u64).collect();
    assert_eq!(unique, expected, "seqs are not 1..=N");
    let heads = a.heads(&s).await.unwrap();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert_eq!(heads[0].seq.0, (8 * EACH) as u64);
    use cairn_core::EpochDiagnostics;
    assert_eq!(b.computed_heads(&s).await.unwrap(), heads);
    assert_eq!(b.cached_heads(&s).await.unwrap(), heads);
}

/// Through the pooler the stores' transactions really share server sessions: a pool of 8
/// clients on each of two stores is served by at most [`PGBOUNCER_POOL_SIZE`] server
/// connections, and the server sees more than one backend serve one store. And cairn leaves no
/// session setting behind: a plain client of the same PgBouncer, after a burst of cairn's
/// operations, sees the server's defaults for `search_path`, `lock_timeout` and
/// `enable_bitmapscan` on whatever server connection it gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_move_between_server_connections_and_keep_no_setting() {
    let h = pgbouncer_harness().await;
    let a = h.store().await.unwrap();
    let b = h.store().await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let s = space(&format!("s{i}"));
            for j in 0..5 {
                store.append(&s, vec![event(j)]).await.unwrap();
                store.heads(&s).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }

    let url = pgbouncer_url().await.unwrap();
    let mut plain = PgConnection::connect(&url).await.unwrap();
    let mut pids = BTreeSet::new();
    for _ in 0..(4 * PGBOUNCER_POOL_SIZE) {
        // Simple queries: one message, so PgBouncer runs each on one server connection.
        let rows = plain
            .fetch_all(sqlx::raw_sql(
                "SELECT pg_catalog.pg_backend_pid(), \
                 pg_catalog.current_setting('search_path'), \
                 pg_catalog.current_setting('lock_timeout'), \
                 pg_catalog.current_setting('enable_bitmapscan')",
            ))
            .await
            .unwrap();
        let row = &rows[0];
        pids.insert(row.get::<i32, _>(0));
        let settings: (String, String, String) = (row.get(1), row.get(2), row.get(3));
        assert_eq!(
            settings,
            ("\"$user\", public".into(), "0".into(), "on".into()),
            "a session setting of cairn's was left on a pooled server connection"
        );
    }
    plain.close().await.unwrap();
    assert!(
        pids.len() as u32 <= PGBOUNCER_POOL_SIZE,
        "more server connections than the pool holds: {pids:?}"
    );
}

/// Wake-ups through the pooler: a subscription on one node, an enqueue on another; with no
/// `LISTEN` possible, the subscriber returns within its poll bound and finds the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_finds_another_nodes_enqueue_within_the_poll_bound() {
    let h = pgbouncer_harness().await;
    let clock = Arc::new(ManualClock::default());
    let open = |store: PgStore| {
        PgSpool::from_store(&store, clock.clone(), SpoolConfig::default()).unwrap()
    };
    let consumer = open(h.store().await.unwrap());
    let producer = open(h.store().await.unwrap());
    let poll = Duration::from_millis(100);
    consumer.set_wake_poll(poll);
    let queue = random_queue("wake");
    let mut wake = consumer.subscribe(&queue).await.unwrap();
    producer
        .enqueue(
            &queue,
            &DedupKey::from_parts(["k"]).unwrap(),
            b"payload".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let me = ConsumerId::new("worker").unwrap();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(10);
    loop {
        wake.wait().await.unwrap();
        let claimed = consumer
            .claim(&queue, &me, Duration::from_secs(30), 1)
            .await
            .unwrap();
        if let Some(run) = claimed.first() {
            assert_eq!(run.payload, b"payload");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run was not found within 10 s"
        );
    }
    // One poll, give or take scheduling: far below the deadline.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Without the declaration, a store behind a transaction-mode pooler failed with what issue
/// 44 reported (`42P05 prepared statement "sqlx_s_1" already exists`, `26000 … does not
/// exist`, pool timeouts): now its open finds two connections served by one server session and
/// refuses with what to do (declare the pooler), and the prepared-statement errors say the
/// same should they come first. On a PgBouncer of its own: such a store leaves session state
/// on the server connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_transaction_pooler_is_refused_with_what_to_do() {
    let h = pgbouncer_harness().await;
    let url = pgbouncer_url_apart().await.unwrap();
    let opened =
        PgStore::open_with(PgOptions::new(url).schema(h.schema()).max_connections(8)).await;
    let err = match opened {
        Err(e) => e,
        Ok(store) => {
            let s = space("undeclared");
            let mut tasks = Vec::new();
            for i in 0..8 {
                let store = store.clone();
                let s = s.clone();
                tasks.push(tokio::spawn(async move {
                    for j in 0..5 {
                        store.append(&s, vec![event(i * 10 + j)]).await?;
                        store.heads(&s).await?;
                    }
                    Ok::<_, cairn_core::Error>(())
                }));
            }
            let mut first = None;
            for t in tasks {
                if let Err(e) = t.await.unwrap() {
                    first.get_or_insert(e);
                }
            }
            first.expect("every operation succeeded through an undeclared pooler")
        }
    };
    let text = err.to_string();
    assert!(text.contains("cairn_pooler=transaction"), "{text} {err:?}");
}

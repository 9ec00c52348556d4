//! S12 on PostgreSQL: a write that fails — a lock wait past the timeout, the connection
//! terminated by the server mid-operation — returns an error, nothing claims success, nothing
//! was written, and the spool works afterwards. And the wake-up listener survives the loss of
//! its connection.

use std::str::FromStr;
use std::time::{Duration, Instant};

use cairn_conformance::random_queue;
use cairn_core::spool::RunState;
use cairn_core::{ConsumerId, DedupKey, EnqueueOptions, Error, QueueName, Spool};
use cairn_postgres::spool::testkit::{spool_harness, PgSpoolHarness};
use cairn_postgres::testkit::test_server_url;
use cairn_postgres::PgSpool;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

const LEASE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(20);

fn key(k: &str) -> DedupKey {
    DedupKey::from_parts([k]).unwrap()
}

fn me() -> ConsumerId {
    ConsumerId::new("s12").unwrap()
}

/// A connection of the test's own, in the harness's schema.
pub(crate) async fn admin(h: &PgSpoolHarness) -> PgConnection {
    let url = test_server_url().await.expect("the test server");
    let mut conn = PgConnection::connect_with(&PgConnectOptions::from_str(&url).unwrap())
        .await
        .expect("connect");
    sqlx::query("SELECT set_config('search_path', $1, false)")
        .bind(h.pg().schema())
        .execute(&mut conn)
        .await
        .unwrap();
    conn
}

/// Opens a transaction on `conn` holding `spool_run` exclusively: every spool statement waits.
pub(crate) async fn lock_runs(conn: &mut PgConnection) {
    sqlx::query("BEGIN").execute(&mut *conn).await.unwrap();
    sqlx::query("LOCK TABLE spool_run IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *conn)
        .await
        .unwrap();
}

pub(crate) async fn unlock(conn: &mut PgConnection) {
    sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
}

/// One look: the backend whose statement starts with `statement` and is blocked by the lock
/// of `mine` (`conn`'s backend), if any.
pub(crate) async fn blocked_by(conn: &mut PgConnection, mine: i32, statement: &str) -> Option<i32> {
    // A transaction reads pg_stat_activity once and keeps that snapshot; the lock holder is
    // inside one, so clear it for a fresh look.
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity \
         WHERE $1 = ANY(pg_blocking_pids(pid)) AND starts_with(query, $2) LIMIT 1",
    )
    .bind(mine)
    .bind(statement)
    .fetch_optional(&mut *conn)
    .await
    .unwrap()
}

/// Waits (with a deadline) until `op`'s statement — the one starting with `statement` — is
/// blocked by `conn`'s lock, terminates its backend, and returns `op`'s result.
async fn terminate_while_blocked<T: std::fmt::Debug>(
    conn: &mut PgConnection,
    op: tokio::task::JoinHandle<T>,
    statement: &str,
) -> T {
    let mine: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        if let Some(pid) = blocked_by(conn, mine, statement).await {
            let done: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
                .bind(pid)
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            assert!(done, "the blocked backend is terminated");
            return op.await.expect("the operation panicked");
        }
        if op.is_finished() {
            panic!(
                "the operation ended before it blocked on the lock: {:?}",
                op.await
            );
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no spool statement blocked on the lock within {DEADLINE:?}"
        );
        tokio::task::yield_now().await;
    }
}

#[track_caller]
fn assert_failed_without_success<T: std::fmt::Debug>(r: cairn_core::Result<T>, what: &str) {
    match r {
        Err(Error::Retryable { .. } | Error::Unavailable { .. }) => {}
        other => panic!("S12: {what}: expected Retryable or Unavailable, got {other:?}"),
    }
}

/// S12: with every spool statement waiting on a lock past the lock timeout, enqueue, claim,
/// ack, event appends and facts fail with `Retryable`; afterwards nothing of them is stored and
/// the same calls succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12_lock_timeout_fails_retryable_and_writes_nothing() {
    let h = spool_harness().await;
    let spool = h
        .spool_with(h.options().lock_timeout(Duration::from_millis(200)))
        .await
        .unwrap();
    let q = random_queue("s12-timeout");
    let held = spool
        .enqueue(&q, &key("held"), Vec::new(), EnqueueOptions::default())
        .await
        .unwrap()
        .run_id;
    let c = spool.claim(&q, &me(), LEASE, 1).await.unwrap();
    let before = spool.stats().await.unwrap();

    let mut conn = admin(&h).await;
    lock_runs(&mut conn).await;
    assert_failed_without_success(
        spool
            .enqueue(&q, &key("new"), Vec::new(), EnqueueOptions::default())
            .await,
        "enqueue",
    );
    assert_failed_without_success(spool.claim(&q, &me(), LEASE, 10).await, "claim");
    assert_failed_without_success(spool.ack(held, c[0].token).await, "ack");
    let ev = cairn_core::RunEventId::new("e").unwrap();
    // The lock timeout itself (SQLSTATE 55P03), not retried as a lost race of the same event
    // id: kills `append_event_on`'s match guard `e.is_conflict()` → `true` (postgres-spool
    // shard 1/4 survivor at `b06aef2`), which ran 32 rounds and answered "changed too often".
    let appended = spool.append_event(held, &ev, vec![1]).await;
    assert!(
        matches!(&appended, Err(Error::Retryable { detail, .. }) if detail.contains("55P03")),
        "S12: append: the lock timeout comes back as it is: {appended:?}"
    );
    let fact = cairn_core::FactName::new("f").unwrap();
    assert_failed_without_success(spool.set_fact(held, &fact, vec![1]).await, "set_fact");
    unlock(&mut conn).await;

    assert_eq!(
        spool.stats().await.unwrap(),
        before,
        "S12: nothing was written"
    );
    let info = spool.run(held).await.unwrap().unwrap();
    assert_eq!((info.state, info.events), (RunState::Claimed, 0));
    assert!(
        spool
            .enqueue(&q, &key("new"), Vec::new(), EnqueueOptions::default())
            .await
            .unwrap()
            .created
    );
    // The append first: a finished run takes no more events.
    assert_eq!(spool.append_event(held, &ev, vec![1]).await.unwrap().seq, 1);
    spool.ack(held, c[0].token).await.unwrap();
    spool.set_fact(held, &fact, vec![1]).await.unwrap();
    assert_eq!(spool.claim(&q, &me(), LEASE, 10).await.unwrap().len(), 1);
    spool.close().await;
}

/// S12: the server terminates the connection of an enqueue, and of a claim, while it waits on
/// a lock: each returns an error, neither wrote anything, and the spool works afterwards on
/// fresh connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12_connection_terminated_mid_operation_writes_nothing() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let q = random_queue("s12-terminate");
    let queued = spool
        .enqueue(&q, &key("queued"), Vec::new(), EnqueueOptions::default())
        .await
        .unwrap()
        .run_id;
    let mut conn = admin(&h).await;

    lock_runs(&mut conn).await;
    let enqueue = {
        let (spool, q) = (spool.clone(), q.clone());
        tokio::spawn(async move {
            spool
                .enqueue(&q, &key("doomed"), Vec::new(), EnqueueOptions::default())
                .await
        })
    };
    let r = terminate_while_blocked(&mut conn, enqueue, "WITH ins AS").await;
    assert_failed_without_success(r, "terminated enqueue");
    unlock(&mut conn).await;

    lock_runs(&mut conn).await;
    let claim = {
        let (spool, q) = (spool.clone(), q.clone());
        tokio::spawn(async move { spool.claim(&q, &me(), LEASE, 10).await })
    };
    let r = terminate_while_blocked(&mut conn, claim, "WITH p AS").await;
    assert_failed_without_success(r, "terminated one-statement claim");
    unlock(&mut conn).await;
    let info = spool.run(queued).await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.attempts, info.lease),
        (RunState::Queued, 0, None),
        "S12: the terminated one-statement claim took nothing"
    );

    // The claim transaction: its pick is blocked and terminated. (With the table locked, the
    // one-statement claim that comes first would block instead: switch it off.)
    spool.testkit_one_statement_claims(false);
    lock_runs(&mut conn).await;
    let claim = {
        let (spool, q) = (spool.clone(), q.clone());
        tokio::spawn(async move { spool.claim(&q, &me(), LEASE, 10).await })
    };
    let r = terminate_while_blocked(&mut conn, claim, "WITH e AS").await;
    assert_failed_without_success(r, "terminated claim transaction");
    unlock(&mut conn).await;
    let info = spool.run(queued).await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.attempts, info.lease),
        (RunState::Queued, 0, None),
        "S12: the terminated claim transaction took nothing"
    );
    let again = spool
        .enqueue(&q, &key("doomed"), Vec::new(), EnqueueOptions::default())
        .await
        .unwrap();
    assert!(again.created, "S12: the terminated enqueue stored nothing");
    spool.testkit_one_statement_claims(true);
    let got = spool.claim(&q, &me(), LEASE, 10).await.unwrap();
    assert_eq!(got.len(), 2, "S12: the spool works afterwards");
    assert!(got.iter().all(|c| c.attempt == 1));
    spool.close().await;
}

/// Waits for a wake-up within the deadline.
async fn woken(wake: &mut Box<dyn cairn_core::Wakeup>, what: &str) {
    tokio::time::timeout(DEADLINE, wake.wait())
        .await
        .unwrap_or_else(|_| panic!("{what}: no wake-up within {DEADLINE:?}"))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// The pid of the backend listening on `channel`, once it is listening.
async fn listener_pid(conn: &mut PgConnection, channel: &str) -> i32 {
    let started = Instant::now();
    loop {
        let pid: Option<i32> =
            // `LISTEN "channel"` when subscribing; `LISTEN "channel";` after a reconnect.
            sqlx::query_scalar(
                "SELECT pid FROM pg_stat_activity \
                 WHERE query LIKE 'LISTEN %' AND strpos(query, $1) > 0 LIMIT 1",
            )
            .bind(format!("\"{channel}\""))
                .fetch_optional(&mut *conn)
                .await
                .unwrap();
        if let Some(pid) = pid {
            return pid;
        }
        assert!(started.elapsed() < DEADLINE, "no listener on {channel}");
        tokio::task::yield_now().await;
    }
}

/// The subscriber's listening connection is terminated by the server: its next wait returns
/// (notifications may have been lost, so the consumer looks), the run enqueued meanwhile is
/// found, and later enqueues wake it by `NOTIFY` again (the fallback poll is set far beyond
/// the deadline). Closing the spool ends its subscriptions with `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_reconnects_after_its_connection_is_terminated() {
    let h = spool_harness().await;
    let consumer = h.spool().await.unwrap();
    let producer = h.spool().await.unwrap();
    consumer.set_wake_poll(Duration::from_secs(3600));
    let q: QueueName = random_queue("listener");
    let mut wake = consumer.subscribe(&q).await.unwrap();
    let mut conn = admin(&h).await;
    let pid = listener_pid(&mut conn, &consumer.wake_channel(&q)).await;
    let _: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let lost = producer
        .enqueue(
            &q,
            &key("while-lost"),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap()
        .run_id;
    woken(&mut wake, "after the listener's connection was lost").await;
    let got = consumer.claim(&q, &me(), LEASE, 10).await.unwrap();
    assert_eq!(got.iter().map(|c| c.run_id).collect::<Vec<_>>(), vec![lost]);

    let after = producer
        .enqueue(&q, &key("after"), Vec::new(), EnqueueOptions::default())
        .await
        .unwrap()
        .run_id;
    woken(&mut wake, "NOTIFY after reconnecting").await;
    let got = consumer.claim(&q, &me(), LEASE, 10).await.unwrap();
    assert_eq!(
        got.iter().map(|c| c.run_id).collect::<Vec<_>>(),
        vec![after]
    );
    assert_ne!(
        listener_pid(&mut conn, &consumer.wake_channel(&q)).await,
        pid,
        "a new connection listens"
    );

    close_ends_subscriptions(consumer, wake).await;
    producer.close().await;
}

/// Losing the listening connection wakes every subscriber of every queue at once, with no
/// run enqueued: notifications sent while it was down are gone, so each looks for work itself
/// rather than sleeping until its fallback poll (an hour here). Kills `Listening::wake_all` →
/// `()` (postgres-spool shard 3/4 survivor at `b06aef2`): the subscribers then slept on, and
/// the test above passed only because its enqueue came after the reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listener_wakes_every_subscriber_without_a_notification() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    spool.set_wake_poll(Duration::from_secs(3600));
    let (a, b): (QueueName, QueueName) = (random_queue("lost-a"), random_queue("lost-b"));
    let mut first = spool.subscribe(&a).await.unwrap();
    let mut second = spool.subscribe(&a).await.unwrap();
    let mut other = spool.subscribe(&b).await.unwrap();
    let mut conn = admin(&h).await;
    // `b` was listened on last, so the listening connection's last statement names it.
    let pid = listener_pid(&mut conn, &spool.wake_channel(&b)).await;
    let _: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    woken(
        &mut first,
        "a's first subscriber, after the listener was lost",
    )
    .await;
    woken(
        &mut second,
        "a's second subscriber, after the listener was lost",
    )
    .await;
    woken(&mut other, "b's subscriber, after the listener was lost").await;
    spool.close().await;
}

async fn close_ends_subscriptions(spool: PgSpool, mut wake: Box<dyn cairn_core::Wakeup>) {
    tokio::time::timeout(DEADLINE, spool.close())
        .await
        .expect("close does not wait for subscription handles");
    let r = tokio::time::timeout(DEADLINE, wake.wait())
        .await
        .expect("a wait on a closed spool returns");
    assert!(
        matches!(r, Err(Error::Unavailable { .. })),
        "a closed spool's subscription is Unavailable: {r:?}"
    );
}

/// An enqueue with a supersede group (the unbatched path): its attempts take these ids first.
fn grouped() -> EnqueueOptions {
    EnqueueOptions::default()
        .supersede(cairn_core::spool::SupersedeGroup::from_parts(["collide"]).unwrap())
}

/// An enqueue whose new run id is already stored (under another key) wrote nothing and is
/// tried again with a fresh id: the caller gets a created run, never the collision. Kills the
/// retry guard `e.is_conflict()` → `false` (mutation testing, `spool/ops.rs`, now `spool/enqueue.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_whose_new_id_is_taken_retries_with_a_fresh_id() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let q = random_queue("collide");
    let taken = spool
        .enqueue(&q, &key("first"), Vec::new(), EnqueueOptions::default())
        .await
        .unwrap()
        .run_id;
    spool.testkit_force_next_run_ids([taken, taken]);
    let second = spool
        .enqueue(&q, &key("second"), vec![2], grouped())
        .await
        .expect("a taken id is retried with a fresh one");
    assert!(second.created);
    assert_ne!(second.run_id, taken);
    assert_eq!(
        spool.testkit_forced_ids_left(),
        0,
        "both forced ids were tried"
    );
    let first = spool.run(taken).await.unwrap().unwrap();
    assert_eq!(first.dedup_key, key("first"), "the stored run is untouched");
    assert_eq!(
        spool.run(second.run_id).await.unwrap().unwrap().dedup_key,
        key("second")
    );
    spool.close().await;
}

/// Only a taken id is retried: an attempt that fails otherwise (here a lock timeout) returns
/// its error at once, after one attempt. Kills the retry guard `e.is_conflict()` → `true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_that_fails_otherwise_is_not_retried() {
    let h = spool_harness().await;
    let spool = h
        .spool_with(h.options().lock_timeout(Duration::from_millis(200)))
        .await
        .unwrap();
    let q = random_queue("no-retry");
    let ids: Vec<_> = (0..3)
        .map(|_| cairn_core::RunId::generate(spool.clock().now()))
        .collect();
    spool.testkit_force_next_run_ids(ids);
    let mut conn = admin(&h).await;
    lock_runs(&mut conn).await;
    let r = spool
        .enqueue(&q, &key("blocked"), Vec::new(), grouped())
        .await;
    unlock(&mut conn).await;
    assert!(
        matches!(r, Err(Error::Retryable { .. })),
        "a lock timeout is Retryable: {r:?}"
    );
    assert_eq!(
        spool.testkit_forced_ids_left(),
        2,
        "a failure that is not a taken id must not be tried again"
    );
    spool.close().await;
}

/// A new id that keeps colliding is tried three times, no more: the third collision is
/// returned as the conflict it is, having written nothing, and the next forced id is left
/// untaken. Kills `enqueue_tx`'s `collisions += 1` → `-=` and → `*=` (postgres-spool shard
/// 1/8 survivors at `bb2d9c0`), which retried for as long as ids collided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_gives_up_after_three_taken_ids() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let q = random_queue("collide-thrice");
    let taken = spool
        .enqueue(&q, &key("first"), Vec::new(), EnqueueOptions::default())
        .await
        .unwrap()
        .run_id;
    spool.testkit_force_next_run_ids([taken; 4]);
    let r = spool.enqueue(&q, &key("second"), vec![2], grouped()).await;
    assert!(
        matches!(r, Err(Error::Conflict { .. })),
        "three taken ids in a row end as a Conflict: {r:?}"
    );
    assert_eq!(
        spool.testkit_forced_ids_left(),
        1,
        "exactly three attempts were made"
    );
    assert_eq!(
        spool
            .runs(
                &cairn_core::spool::RunFilter {
                    queue: Some(q.clone()),
                    ..Default::default()
                },
                10
            )
            .await
            .unwrap()
            .len(),
        1,
        "the refused enqueue wrote nothing"
    );
    spool.close().await;
}

//! Transactions on PostgreSQL: the conformance transaction cases (T1–T5), and cairn's writes
//! inside a transaction of the application's own pool (`PgSpool::enqueue_in` and its
//! siblings) at each isolation level.

cairn_conformance::tx_suite!(cairn_postgres::spool::testkit::spool_harness());

use std::time::Duration;

use cairn_core::spool::{CancelOutcome, EnqueueItem, RunEventId, Spool};
use cairn_core::{DedupKey, EnqueueOptions, EpochStore, Error, Event, QueueName, SpaceId};
use cairn_postgres::spool::testkit::{spool_harness, PgSpoolHarness};
use cairn_postgres::{PgSpool, PgStore};
use sqlx::{Connection, PgConnection, PgPool};

/// The application's own pool on the test server, and a table of its own in `public`-less
/// terms: `app_tx_order` in the harness's schema, named with the schema.
async fn app(h: &PgSpoolHarness) -> (PgPool, String) {
    let url = cairn_postgres::testkit::test_server_url().await.unwrap();
    let pool = PgPool::connect(&url).await.unwrap();
    let schema = h.pg().schema().to_owned();
    // The store's schema exists once a store was opened over it.
    drop(h.spool().await.unwrap());
    let table = format!("\"{schema}\".app_tx_order");
    sqlx::raw_sql(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (id TEXT PRIMARY KEY)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    (pool, table)
}

async fn stores(h: &PgSpoolHarness) -> (PgStore, PgSpool) {
    let store = PgStore::open_with(h.options()).await.unwrap();
    let spool = PgSpool::from_store(
        &store,
        std::sync::Arc::new(cairn_core::SystemClock),
        Default::default(),
    )
    .unwrap();
    (store, spool)
}

fn key(k: &str) -> DedupKey {
    DedupKey::from_parts(["order", k]).unwrap()
}

async fn search_path(conn: &mut PgConnection) -> String {
    sqlx::query_scalar("SELECT pg_catalog.current_setting('search_path')")
        .fetch_one(conn)
        .await
        .unwrap()
}

async fn rows(pool: &PgPool, table: &str, id: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table} WHERE id = $1"))
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// River's model: the application's transaction holds its row and cairn's enqueue, bulk
/// enqueue, cancel, run event and epoch append; all commit with it, or none does; the
/// application's `search_path` is what it was after each call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_inside_the_applications_transaction_commit_or_roll_back_with_it() {
    let h = spool_harness().await;
    let (pool, table) = app(&h).await;
    let (store, spool) = stores(&h).await;
    let q = QueueName::new("receipts").unwrap();
    let space = SpaceId::new("orders").unwrap();
    let standing = spool
        .enqueue(
            &q,
            &key("standing"),
            b"s".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();

    for commit in [false, true] {
        let id = if commit { "kept" } else { "dropped" };
        let mut tx = pool.begin().await.unwrap();
        let before = search_path(&mut tx).await;
        sqlx::query(&format!("INSERT INTO {table} (id) VALUES ($1)"))
            .bind(id)
            .execute(&mut *tx)
            .await
            .unwrap();
        let run = spool
            .enqueue_in(
                &mut tx,
                &q,
                &key(id),
                id.as_bytes().to_vec(),
                EnqueueOptions::default(),
            )
            .await
            .unwrap();
        assert!(run.created);
        let many = spool
            .enqueue_many_in(
                &mut tx,
                &q,
                vec![
                    EnqueueItem::new(key(id), "same"),
                    EnqueueItem::new(key(&format!("{id}-2")), "two"),
                ],
            )
            .await
            .unwrap();
        assert_eq!(
            many[0].run_id, run.run_id,
            "the transaction sees its own run"
        );
        assert!(!many[0].created && many[1].created);
        let event = RunEventId::new(format!("e-{id}")).unwrap();
        spool
            .append_event_in(&mut tx, standing.run_id, &event, b"e".to_vec())
            .await
            .unwrap();
        assert_eq!(
            spool.cancel_in(&mut tx, many[1].run_id).await.unwrap(),
            CancelOutcome::Canceled
        );
        store
            .append_in(&mut tx, &space, vec![Event::new("order", id)])
            .await
            .unwrap();
        assert_eq!(
            search_path(&mut tx).await,
            before,
            "the application's search_path is back"
        );
        // Nothing is visible outside yet.
        assert!(spool.run(run.run_id).await.unwrap().is_none());
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        assert_eq!(rows(&pool, &table, id).await, i64::from(commit));
        assert_eq!(
            spool.run(run.run_id).await.unwrap().is_some(),
            commit,
            "{id}: the run"
        );
        assert_eq!(spool.run(many[1].run_id).await.unwrap().is_some(), commit);
        let events = spool.events(standing.run_id, 0, 10).await.unwrap();
        assert_eq!(
            events.iter().any(|e| e.event_id == event),
            commit,
            "{id}: the run event"
        );
    }
    let heads = store.heads(&space).await.unwrap();
    assert_eq!(heads.len(), 1, "one committed epoch");
}

/// A connection outside a transaction is refused before anything runs: cairn's statements
/// would commit on their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_outside_a_transaction_is_refused() {
    let h = spool_harness().await;
    let (pool, _) = app(&h).await;
    let (_, spool) = stores(&h).await;
    let mut conn = pool.acquire().await.unwrap();
    let r = spool
        .enqueue_in(
            &mut conn,
            &QueueName::new("q").unwrap(),
            &key("none"),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await;
    assert!(matches!(r, Err(Error::InvalidInput { .. })), "{r:?}");
    let all = spool.runs(&Default::default(), 10).await.unwrap();
    assert!(all.is_empty(), "nothing was written");
}

/// REPEATABLE READ and SERIALIZABLE: a key committed by another transaction after this one's
/// snapshot makes the enqueue fail with `Retryable` (a serialization failure), never answer
/// an id the transaction cannot see nor create a second run; a key committed before the
/// snapshot is answered as usual; READ COMMITTED answers the committed id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_levels_answer_the_committed_id_or_a_retryable_error() {
    let h = spool_harness().await;
    let (pool, _) = app(&h).await;
    let (_, spool) = stores(&h).await;
    let q = QueueName::new("iso").unwrap();
    for level in ["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"] {
        let before = key(&format!("{level}-before"));
        let after = key(&format!("{level}-after"));
        let committed_before = spool
            .enqueue(&q, &before, Vec::new(), EnqueueOptions::default())
            .await
            .unwrap();
        let mut conn = pool.acquire().await.unwrap();
        let mut tx = conn
            .begin_with(format!("BEGIN ISOLATION LEVEL {level}"))
            .await
            .unwrap();
        // Take the snapshot.
        sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
        let seen = spool
            .enqueue_in(&mut tx, &q, &before, Vec::new(), EnqueueOptions::default())
            .await
            .unwrap();
        assert_eq!(
            seen.run_id, committed_before.run_id,
            "{level}: a key from before"
        );
        assert!(!seen.created);
        let outside = spool
            .enqueue(&q, &after, Vec::new(), EnqueueOptions::default())
            .await
            .unwrap();
        let inside = spool
            .enqueue_in(&mut tx, &q, &after, Vec::new(), EnqueueOptions::default())
            .await;
        match (level, inside) {
            ("READ COMMITTED", Ok(e)) => {
                assert_eq!(e.run_id, outside.run_id, "{level}: the committed id");
                assert!(!e.created);
                tx.commit().await.unwrap();
            }
            ("READ COMMITTED", Err(e)) => panic!("{level}: {e}"),
            (_, Err(e)) => {
                assert!(e.is_retryable(), "{level}: a serialization failure: {e}");
                tx.rollback().await.unwrap();
            }
            (_, Ok(e)) => panic!("{level}: answered {e:?} for a key it cannot see"),
        }
        let runs = spool
            .runs(
                &cairn_core::spool::RunFilter {
                    queue: Some(q.clone()),
                    ..Default::default()
                },
                100,
            )
            .await
            .unwrap();
        assert_eq!(
            runs.iter().filter(|r| r.dedup_key == after).count(),
            1,
            "{level}: one run for the key"
        );
    }
}

/// The outside enqueue of a key an application transaction holds waits for it; after the
/// application commits it answers the committed id (T3 across pools).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outside_enqueue_waits_for_the_applications_commit() {
    let h = spool_harness().await;
    let (pool, _) = app(&h).await;
    let (_, spool) = stores(&h).await;
    let q = QueueName::new("wait").unwrap();
    let mut tx = pool.begin().await.unwrap();
    let inside = spool
        .enqueue_in(
            &mut tx,
            &q,
            &key("w"),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let (s, q2) = (spool.clone(), q.clone());
    let outside = tokio::spawn(async move {
        s.enqueue(&q2, &key("w"), Vec::new(), EnqueueOptions::default())
            .await
    });
    // Wait until the outside enqueue is blocked on the application's transaction.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND datname = current_database()",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the outside enqueue never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tx.commit().await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), outside)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(answer.run_id, inside.run_id);
    assert!(!answer.created);
}

/// Concurrent bulk enqueues of overlapping keys in opposite orders never deadlock (an outside
/// tester saw Postgres break such deadlocks with SQLSTATE 40P01): the rows go in key order.
/// Every key ends as one run, and the claim order within a batch is still its input order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_bulk_enqueues_of_overlapping_keys_do_not_deadlock() {
    let h = spool_harness().await;
    let (_, a) = stores(&h).await;
    let (_, b) = stores(&h).await;
    let q = QueueName::new("overlap").unwrap();
    for round in 0..6 {
        let keys: Vec<DedupKey> = (0..400)
            .map(|i| DedupKey::from_parts([format!("r{round}"), format!("{i:03}")]).unwrap())
            .collect();
        let forward: Vec<EnqueueItem> = keys
            .iter()
            .map(|k| EnqueueItem::new(k.clone(), "f"))
            .collect();
        let backward: Vec<EnqueueItem> = forward.iter().rev().cloned().collect();
        let (qa, qb) = (q.clone(), q.clone());
        let (x, y) = tokio::join!(a.enqueue_many(&qa, forward), b.enqueue_many(&qb, backward));
        let (x, y) = (x.unwrap(), y.unwrap());
        for (i, e) in x.iter().enumerate() {
            assert_eq!(
                e.run_id,
                y[399 - i].run_id,
                "round {round}: key {i} is one run"
            );
            assert!(
                e.created ^ y[399 - i].created,
                "round {round}: key {i} created once"
            );
        }
    }
    // Input order is the claim order: a batch written in reversed key order is claimed so.
    let q = QueueName::new("order").unwrap();
    let items: Vec<EnqueueItem> = (0..50)
        .rev()
        .map(|i| EnqueueItem::new(DedupKey::from_parts([format!("{i:02}")]).unwrap(), "x"))
        .collect();
    let done = a.enqueue_many(&q, items).await.unwrap();
    let me = cairn_core::ConsumerId::new("order").unwrap();
    let claimed = a.claim(&q, &me, Duration::from_secs(30), 50).await.unwrap();
    let ids: Vec<_> = claimed.iter().map(|c| c.run_id).collect();
    let want: Vec<_> = done.iter().map(|e| e.run_id).collect();
    assert_eq!(ids, want, "claimed in the batch's input order");
}

/// A bulk enqueue with a supersede-group item takes the group's lock before it writes: while
/// an application's transaction holds an enqueue into that group, the batch waits for it, then
/// supersedes the committed run, so the group ends with one queued run. Kills
/// `enqueue_many_on`'s `source[*i] == *i` → `!=` (postgres-spool shard 1/4 survivor at
/// `b06aef2`): the batch then took no group lock and wrote beside the uncommitted run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_enqueue_waits_for_its_supersede_groups_lock() {
    let h = spool_harness().await;
    let (pool, _) = app(&h).await;
    let (_, spool) = stores(&h).await;
    let q = QueueName::new("group-lock").unwrap();
    let mut tx = pool.begin().await.unwrap();
    let app_pid = backend_pid(&mut tx).await;
    let inside = spool
        .enqueue_in(&mut tx, &q, &key("inside"), Vec::new(), grouped("g"))
        .await
        .unwrap();
    let (s, q2) = (spool.clone(), q.clone());
    let items = vec![EnqueueItem::new(key("bulk"), "b").with_options(grouped("g"))];
    let outside = tokio::spawn(async move { s.enqueue_many(&q2, items).await });
    until_blocked_by(&pool, app_pid, "the bulk enqueue").await;
    tx.commit().await.unwrap();
    let bulk = tokio::time::timeout(Duration::from_secs(10), outside)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(bulk[0].created);
    let state = |id| {
        let spool = spool.clone();
        async move { spool.run(id).await.unwrap().unwrap().state }
    };
    assert_eq!(
        state(inside.run_id).await,
        cairn_core::RunState::Superseded,
        "the batch superseded the committed run of its group"
    );
    assert_eq!(state(bulk[0].run_id).await, cairn_core::RunState::Queued);
    spool.close().await;
}

/// An enqueue whose key's run keeps changing under its statement gives up after 16 rounds
/// with a retryable error rather than running again forever. Each round here: the enqueue (in
/// supersede group `g`) waits for the group's lock, held by an application transaction; the
/// key's run is deleted and written again, uncommitted, by another application transaction;
/// the lock is let go, the enqueue's statement takes its snapshot and waits for that run; the
/// next round's lock is asked for (so it queues ahead of the enqueue's next round); the run
/// commits — after the statement's snapshot, so the statement returns no row. Kills
/// `enqueue_tx`'s `races += 1` → `*=` (postgres-spool survivor at `b06aef2`): the enqueue then
/// ran a 17th round and answered the committed run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_whose_keys_run_keeps_changing_gives_up_after_sixteen_rounds() {
    /// The spool's bound (`ENQUEUE_RACES`).
    const ROUNDS: usize = 16;
    let h = spool_harness().await;
    let (pool, _) = app(&h).await;
    let (_, spool) = stores(&h).await;
    let q = QueueName::new("races").unwrap();
    let table = format!("\"{}\".spool_run", h.pg().schema());
    // Asks for the group's lock in a new application transaction: its server process at once,
    // and the transaction once the lock is held.
    let hold = |n: usize| {
        let (pool, spool, q) = (pool.clone(), spool.clone(), q.clone());
        async move {
            let mut tx = pool.begin().await.unwrap();
            let pid = backend_pid(&mut tx).await;
            let held = tokio::spawn(async move {
                let k = key(&format!("lock-{n}"));
                spool
                    .enqueue_in(&mut tx, &q, &k, Vec::new(), grouped("g"))
                    .await
                    .unwrap();
                tx
            });
            (pid, held)
        }
    };
    let (mut lock_pid, held) = hold(0).await;
    let mut lock = held.await.unwrap();
    let (s, q2) = (spool.clone(), q.clone());
    let raced = tokio::spawn(async move {
        s.enqueue(&q2, &key("raced"), Vec::new(), grouped("g"))
            .await
    });
    until_blocked_by(&pool, lock_pid, "the enqueue, on the group's lock").await;
    for round in 1..=ROUNDS {
        sqlx::query(&format!(
            "DELETE FROM {table} WHERE queue = $1 AND supersede_group IS NULL"
        ))
        .bind(q.as_str())
        .execute(&pool)
        .await
        .unwrap();
        let mut writer = pool.begin().await.unwrap();
        let writer_pid = backend_pid(&mut writer).await;
        spool
            .enqueue_in(
                &mut writer,
                &q,
                &key("raced"),
                Vec::new(),
                EnqueueOptions::default(),
            )
            .await
            .unwrap();
        lock.commit().await.unwrap();
        until_blocked_by(&pool, writer_pid, "the enqueue's statement, on the new run").await;
        let (next_pid, next) = hold(round).await;
        until_waiting(&pool, next_pid, "the next round's lock").await;
        writer.commit().await.unwrap();
        lock = tokio::time::timeout(Duration::from_secs(10), next)
            .await
            .expect("the next round's lock is granted once the enqueue's round ends")
            .unwrap();
        lock_pid = next_pid;
        if round < ROUNDS {
            until_blocked_by(&pool, lock_pid, "the enqueue's next round").await;
            assert!(
                !raced.is_finished(),
                "round {round}: the enqueue runs again"
            );
        }
    }
    lock.commit().await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), raced)
        .await
        .expect("the enqueue returns")
        .unwrap();
    match answer {
        Err(e) if e.is_retryable() => {}
        other => panic!("after {ROUNDS} rounds the enqueue gives up (retryable): {other:?}"),
    }
    spool.close().await;
}

/// Options of an enqueue into supersede group `g`.
fn grouped(g: &str) -> EnqueueOptions {
    EnqueueOptions::default().supersede(cairn_core::spool::SupersedeGroup::from_parts([g]).unwrap())
}

/// Polls `check` every 10 ms until it holds; fails, saying `what` did not happen, after 10 s.
async fn poll_until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (with a deadline) until server process `pid` waits for a lock someone holds.
async fn until_waiting(pool: &PgPool, pid: i32, what: &str) {
    poll_until(&format!("{what} waits for a lock"), async || {
        sqlx::query_scalar("SELECT pg_catalog.cardinality(pg_catalog.pg_blocking_pids($1)) > 0")
            .bind(pid)
            .fetch_one(pool)
            .await
            .unwrap()
    })
    .await;
}

/// The server process of the application's transaction `tx`.
async fn backend_pid(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>) -> i32 {
    sqlx::query_scalar("SELECT pg_catalog.pg_backend_pid()")
        .fetch_one(&mut **tx)
        .await
        .unwrap()
}

/// Whether some server process waits for a lock `holder` holds.
async fn blocked_by(pool: &PgPool, holder: i32) -> bool {
    let waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_catalog.pg_stat_activity \
         WHERE $1 = ANY(pg_catalog.pg_blocking_pids(pid))",
    )
    .bind(holder)
    .fetch_one(pool)
    .await
    .unwrap();
    waiting > 0
}

/// Waits (with a deadline) until some server process waits for a lock `holder` holds.
async fn until_blocked_by(pool: &PgPool, holder: i32, what: &str) {
    poll_until(&format!("{what} waits for a lock"), async || {
        blocked_by(pool, holder).await
    })
    .await;
}

/// A spool on the harness's schema whose connections look for a deadlock only after 2 s of
/// waiting for a lock (the server's `deadlock_timeout`, 1 s by default), and the
/// application's transaction `tx` set never to look first (an hour). A test that closes a
/// lock cycle within those 2 s (under any load) makes the spool's waiting round the one that
/// finds the cycle, and so the victim: a server aborts the process whose check found it.
async fn deadlock_victim_spool(
    h: &PgSpoolHarness,
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
) -> PgSpool {
    sqlx::query("SET LOCAL deadlock_timeout = '1h'")
        .execute(&mut **tx)
        .await
        .unwrap();
    let url = cairn_postgres::testkit::test_server_url().await.unwrap();
    let sep = if url.contains('?') { '&' } else { '?' };
    let opts = cairn_postgres::PgOptions::new(format!("{url}{sep}options[deadlock_timeout]=2s"))
        .schema(h.pg().schema());
    let store = PgStore::open_with(opts).await.unwrap();
    PgSpool::from_store(
        &store,
        std::sync::Arc::new(cairn_core::SystemClock),
        Default::default(),
    )
    .unwrap()
}

/// A deadlock test's start: the application's transaction `tx` (server process `app_pid`)
/// holding key `a` of queue `deadlock-NAME`, and a bulk enqueue on a spool from
/// [`deadlock_victim_spool`] of `b` (an item of supersede group NAME, so written first, on its
/// own) then `a`, spawned: it writes `b`, then waits for `a`.
struct Deadlock {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    app_pid: i32,
    spool: PgSpool,
    batch: tokio::task::JoinHandle<cairn_core::Result<Vec<cairn_core::spool::Enqueued>>>,
}

/// Starts the [`Deadlock`] test `name`.
async fn deadlock(h: &PgSpoolHarness, pool: &PgPool, name: &str) -> Deadlock {
    let q = QueueName::new(format!("deadlock-{name}")).unwrap();
    let mut tx = pool.begin().await.unwrap();
    let app_pid = backend_pid(&mut tx).await;
    let spool = deadlock_victim_spool(h, &mut tx).await;
    spool
        .enqueue_in(
            &mut tx,
            &q,
            &key("a"),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let items = vec![
        EnqueueItem::new(key("b"), "b").with_options(grouped(name)),
        EnqueueItem::new(key("a"), "a"),
    ];
    let s = spool.clone();
    let batch = tokio::spawn(async move { s.enqueue_many(&q, items).await });
    Deadlock {
        tx,
        app_pid,
        spool,
        batch,
    }
}

/// Waits (with a deadline) until the batch of [`deadlock`] waits for a lock of the
/// application's transaction (server process `app_pid`); when the batch has ended instead,
/// fails with its outcome, so a failure says which of the two it was.
async fn until_the_batch_waits(
    pool: &PgPool,
    app_pid: i32,
    batch: &mut tokio::task::JoinHandle<cairn_core::Result<Vec<cairn_core::spool::Enqueued>>>,
    round: usize,
) {
    let what = format!("round {round}: the batch, still running, waits for a lock");
    poll_until(&what, async || {
        if blocked_by(pool, app_pid).await {
            return true;
        }
        if batch.is_finished() {
            let outcome = (&mut *batch).await;
            panic!("round {round}: the batch ended before it waited: {outcome:?}");
        }
        false
    })
    .await;
}

/// Waits (with a deadline) until the batch of [`deadlock`] either waits for a lock of the
/// application's transaction (server process `app_pid`): `true`, or has ended: `false`.
async fn the_batch_waits_or_ends(
    pool: &PgPool,
    app_pid: i32,
    batch: &tokio::task::JoinHandle<cairn_core::Result<Vec<cairn_core::spool::Enqueued>>>,
    round: usize,
) -> bool {
    let mut waits = false;
    poll_until(
        &format!("round {round}: the batch waits for a lock or ends"),
        async || {
            if blocked_by(pool, app_pid).await {
                waits = true;
                return true;
            }
            batch.is_finished()
        },
    )
    .await;
    waits
}

/// Closes the cycle of [`deadlock`] `name` (the batch waits for `a`): the application enqueues
/// `b`, which returns once the server has broken the cycle by aborting the batch's round.
async fn close_the_cycle(
    spool: &PgSpool,
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    name: &str,
    round: usize,
) {
    let q = QueueName::new(format!("deadlock-{name}")).unwrap();
    tokio::time::timeout(
        Duration::from_secs(20),
        spool.enqueue_in(tx, &q, &key("b"), Vec::new(), EnqueueOptions::default()),
    )
    .await
    .unwrap_or_else(|_| panic!("round {round}: the server did not break the cycle"))
    .unwrap_or_else(|e| panic!("round {round}: the application was the victim: {e}"));
}

/// A bulk enqueue the server picks as a deadlock's victim (SQLSTATE 40P01) wrote nothing, so
/// it runs again and succeeds. Here the application's transaction holds key `a` while the
/// batch, having written `b` (its supersede-group item, first in input order), waits for `a`;
/// the application then enqueues `b`, closing the cycle; the batch, the only side that looks
/// for deadlocks in time ([`deadlock_victim_spool`]), is the victim, runs again once the
/// application rolls back, and creates both. Kills `enqueue_many_tx`'s retry guard `round <
/// BULK_DEADLOCK_ROUNDS && is_deadlock(&e)` → `false` and its `<` → `==` (postgres-spool shard
/// 1/4 survivors at `b06aef2`): the caller then got the deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_enqueue_chosen_as_a_deadlock_victim_runs_again() {
    let h = spool_harness().await;
    let (pool, _) = app(&h).await;
    let Deadlock {
        mut tx,
        app_pid,
        spool,
        mut batch,
    } = deadlock(&h, &pool, "victim").await;
    until_the_batch_waits(&pool, app_pid, &mut batch, 1).await;
    close_the_cycle(&spool, &mut tx, "victim", 1).await;
    tx.rollback().await.unwrap();
    let done = tokio::time::timeout(Duration::from_secs(20), batch)
        .await
        .expect("the batch finished after the application rolled back")
        .unwrap()
        .expect("a deadlock's victim runs again instead of failing");
    assert!(done.iter().all(|e| e.created), "{done:?}");
    spool.close().await;
}

/// A bulk enqueue that fails otherwise (here a lock timeout) is not run again: its error comes
/// back after one round, which drew the batch's run numbers from the sequence once. Kills
/// `enqueue_many_tx`'s `&&` → `||` in its retry guard (postgres-spool shard 1/4 survivor at
/// `b06aef2`), which ran any failing batch three times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_enqueue_that_fails_otherwise_runs_once() {
    let h = spool_harness().await;
    let (pool, _) = app(&h).await;
    let store = PgStore::open_with(h.options().lock_timeout(Duration::from_millis(200)))
        .await
        .unwrap();
    let spool = PgSpool::from_store(
        &store,
        std::sync::Arc::new(cairn_core::SystemClock),
        Default::default(),
    )
    .unwrap();
    let q = QueueName::new("fails-once").unwrap();
    let drawn = || async {
        sqlx::query_scalar::<_, i64>(&format!(
            "SELECT last_value FROM \"{}\".spool_run_run_no_seq",
            h.pg().schema()
        ))
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    spool
        .enqueue(&q, &key("first"), Vec::new(), EnqueueOptions::default())
        .await
        .unwrap();
    let before = drawn().await;
    let mut tx = pool.begin().await.unwrap();
    spool
        .enqueue_in(
            &mut tx,
            &q,
            &key("held"),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let items: Vec<EnqueueItem> = ["x", "held", "y"]
        .iter()
        .map(|k| EnqueueItem::new(key(k), "p"))
        .collect();
    let r = spool.enqueue_many(&q, items).await;
    tx.rollback().await.unwrap();
    assert!(
        matches!(&r, Err(Error::Retryable { detail, .. }) if !detail.contains("40P01")),
        "a lock timeout comes back Retryable: {r:?}"
    );
    assert_eq!(
        drawn().await - before,
        1 + 3,
        "the application's enqueue drew 1 number and the batch's one round 3"
    );
}

/// A bulk enqueue runs at most three rounds: chosen as a deadlock's victim three times in a
/// row, it returns the deadlock (`Retryable`, SQLSTATE 40P01) rather than trying again. The
/// application's transaction makes each cycle: it holds key `a`, which the batch waits for
/// after writing `b`; it then enqueues `b` under a savepoint, and the batch, the only side
/// that looks for deadlocks in time, is the victim. Rolling back to that savepoint frees `b`
/// for the batch's next round, which waits for `a` again. Kills `enqueue_many_tx`'s `round <
/// BULK_DEADLOCK_ROUNDS` → `<=` and `round += 1` → `-=` and → `*=` (postgres-spool shard 1/4
/// survivors at `b06aef2`), which ran a fourth round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_enqueue_gives_up_after_three_deadlocks() {
    let h = spool_harness().await;
    let (pool, _) = app(&h).await;
    let Deadlock {
        mut tx,
        app_pid,
        spool,
        batch,
    } = deadlock(&h, &pool, "thrice").await;
    // Each cycle the application closes costs the batch one round, or now and then two: the
    // batch's next round can write `b` before the application's insert of `b`, which was
    // waiting for the aborted round, resumes — the application then waits for that round's `b`
    // while it waits for `a`, a second cycle. So the test closes cycles until the batch ends,
    // and no more than three: with a fourth round the batch would still wait after three.
    let mut closed = 0;
    while the_batch_waits_or_ends(&pool, app_pid, &batch, closed + 1).await {
        assert!(
            closed < 3,
            "the batch gave up after three deadlocks: it still waits after {closed} cycles"
        );
        closed += 1;
        sqlx::query("SAVEPOINT holds_b")
            .execute(&mut *tx)
            .await
            .unwrap();
        close_the_cycle(&spool, &mut tx, "thrice", closed).await;
        sqlx::query("ROLLBACK TO SAVEPOINT holds_b")
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    // The batch ended while the application still held `a`: only deadlocks ended it.
    let r = batch.await.unwrap();
    tx.rollback().await.unwrap();
    assert!(
        matches!(&r, Err(Error::Retryable { detail, .. }) if detail.contains("40P01")),
        "the third deadlock in a row comes back to the caller: {r:?}"
    );
    spool.close().await;
}

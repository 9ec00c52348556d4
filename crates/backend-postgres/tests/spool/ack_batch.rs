//! Batched acks on Postgres (`spool::ack_batch`): concurrent acks of one instance share one
//! statement and one commit, and
//! - each ack is answered only after that statement committed, and writes exactly what a lone
//!   ack writes;
//! - an ack the statement did not apply (stale token, run already acked or ended, unknown run,
//!   the second of two acks of one run) gets the result a lone ack gets;
//! - a batch statement that fails — injected, or a real lock timeout — writes nothing and hands
//!   every ack back to the unbatched path;
//! - a lone ack sends no batch statement.
//!
//! Each test holds the ack lane while it queues, so the acks are certain to form one batch,
//! and waits (with a deadline) until all are queued before releasing it.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_conformance::{random_queue, SpoolHarness};
use cairn_core::spool::{CancelOutcome, Claimed, Clock, RunInfo, RunState};
use cairn_core::{
    ConsumerId, DedupKey, EnqueueOptions, Error, LeaseToken, NackKind, QueueName, RunId, Spool,
};
use cairn_postgres::spool::testkit::{spool_harness, PgSpoolHarness};
use cairn_postgres::testkit::test_server_url;
use cairn_postgres::PgSpool;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

const LONG: Duration = Duration::from_secs(24 * 3600);
const DEADLINE: Duration = Duration::from_secs(30);

fn me() -> ConsumerId {
    ConsumerId::new("ack-batch").unwrap()
}

/// Enqueues `n` runs on `q` and claims them all with `lease`.
async fn claimed(spool: &PgSpool, q: &QueueName, n: usize, lease: Duration) -> Vec<Claimed> {
    for i in 0..n {
        spool
            .enqueue(
                q,
                &DedupKey::from_parts([format!("k{i}")]).unwrap(),
                b"{}".to_vec(),
                EnqueueOptions::default(),
            )
            .await
            .unwrap();
    }
    let runs = spool.claim(q, &me(), lease, n).await.unwrap();
    assert_eq!(runs.len(), n);
    runs
}

async fn wait_queued(spool: &PgSpool, n: usize) {
    let deadline = Instant::now() + DEADLINE;
    while spool.testkit_pending_acks() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} acks were queued within {DEADLINE:?}",
            spool.testkit_pending_acks()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn ack(
    spool: &Arc<PgSpool>,
    run: RunId,
    token: LeaseToken,
) -> tokio::task::JoinHandle<cairn_core::Result<()>> {
    let spool = spool.clone();
    tokio::spawn(async move { spool.ack(run, token).await })
}

/// Everything an ack writes to a run, without the run's identity.
fn written(r: &RunInfo) -> impl PartialEq + std::fmt::Debug {
    (
        r.state,
        r.attempts,
        r.updated_at,
        r.due_at,
        r.finished_at,
        r.lease.clone(),
        r.cancel_requested,
        r.reason.clone(),
    )
}

/// A connection of the test's own, in the harness's schema.
async fn admin(h: &PgSpoolHarness) -> PgConnection {
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

/// Opens a transaction on `conn` that holds `run`'s row lock: a statement writing it waits.
async fn lock_run(conn: &mut PgConnection, run: RunId) {
    sqlx::query("BEGIN").execute(&mut *conn).await.unwrap();
    sqlx::query("SELECT 1 FROM spool_run WHERE run_id = $1 FOR UPDATE")
        .bind(run.as_bytes().as_slice())
        .fetch_one(&mut *conn)
        .await
        .unwrap();
}

/// Waits (with a deadline) until a statement starting with `statement` is blocked by `conn`'s
/// lock.
async fn wait_blocked(conn: &mut PgConnection, statement: &str) {
    let mine: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        let blocked = super::failures::blocked_by(conn, mine, statement).await;
        if blocked.is_some() {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no statement {statement:?} blocked on the lock within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The first words of the batch statement (`sql::ACK_MANY`).
const ACK_MANY: &str = "WITH u AS ( UPDATE spool_run SET state = $4";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_acks_share_one_statement_and_write_what_a_lone_ack_writes() {
    let h = spool_harness().await;
    let spool = Arc::new(h.spool().await.unwrap());
    let q = random_queue("ack-batch");
    let runs = claimed(&spool, &q, 9, LONG).await;
    // A cancel request does not stop an ack; the ack clears it (as a lone ack does).
    assert_eq!(
        spool.cancel(runs[1].run_id).await.unwrap(),
        CancelOutcome::Requested
    );
    assert_eq!(
        spool.cancel(runs[8].run_id).await.unwrap(),
        CancelOutcome::Requested
    );

    // The lone ack: one statement, no batch. Its run's cancel request is cleared too.
    spool.ack(runs[8].run_id, runs[8].token).await.unwrap();
    assert_eq!(
        spool.testkit_ack_batch_stats(),
        (0, 0),
        "a lone ack sent a batch statement"
    );

    let lane = spool.testkit_hold_ack_lane().await;
    let tasks: Vec<_> = runs[..8]
        .iter()
        .map(|c| ack(&spool, c.run_id, c.token))
        .collect();
    wait_queued(&spool, 8).await;
    drop(lane);
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(
        spool.testkit_ack_batch_stats(),
        (1, 0),
        "the 8 acks were not one committed batch"
    );

    let other = h.spool().await.unwrap();
    let lone = other.run(runs[8].run_id).await.unwrap().unwrap();
    assert_eq!(lone.state, RunState::Succeeded);
    assert!(!lone.cancel_requested && lone.lease.is_none() && lone.due_at.is_none());
    for c in &runs[..8] {
        let run = other.run(c.run_id).await.unwrap().unwrap();
        assert_eq!(
            written(&run),
            written(&lone),
            "a batched ack wrote what a lone ack did not"
        );
    }
    // Acked again, alone, with its own token: Ok, as without batching.
    spool.ack(runs[0].run_id, runs[0].token).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_ack_is_answered_only_after_its_statement_commits() {
    let h = spool_harness().await;
    let spool = Arc::new(h.spool().await.unwrap());
    let q = random_queue("ack-batch-commit");
    let runs = claimed(&spool, &q, 3, LONG).await;
    let mut conn = admin(&h).await;
    lock_run(&mut conn, runs[0].run_id).await;

    let lane = spool.testkit_hold_ack_lane().await;
    let tasks: Vec<_> = runs
        .iter()
        .map(|c| ack(&spool, c.run_id, c.token))
        .collect();
    wait_queued(&spool, 3).await;
    drop(lane);
    // The batch statement has written runs 1 and 2 but waits for run 0's lock: not committed,
    // so nobody may be answered yet, and another instance still sees every run claimed.
    wait_blocked(&mut conn, ACK_MANY).await;
    assert!(
        tasks.iter().all(|t| !t.is_finished()),
        "an ack was answered before its batch statement committed"
    );
    let other = h.spool().await.unwrap();
    for c in &runs {
        assert_eq!(
            other.run(c.run_id).await.unwrap().unwrap().state,
            RunState::Claimed
        );
    }
    sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(spool.testkit_ack_batch_stats(), (1, 0));
    for c in &runs {
        assert_eq!(
            other.run(c.run_id).await.unwrap().unwrap().state,
            RunState::Succeeded,
            "an answered ack is durable"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_the_batch_did_not_apply_get_what_a_lone_ack_gets() {
    let h = spool_harness().await;
    let spool = Arc::new(h.spool().await.unwrap());
    let short = Duration::from_secs(1);

    // A stale token: the lease ran out and another claim took the run.
    let qs = random_queue("ack-batch-stale");
    let stale = claimed(&spool, &qs, 1, short).await.remove(0);
    // A lease lost to a cancel: requested while claimed, settled as canceled by the next claim
    // after the lease ran out.
    let qc = random_queue("ack-batch-canceled");
    let canceled = claimed(&spool, &qc, 1, short).await.remove(0);
    assert_eq!(
        spool.cancel(canceled.run_id).await.unwrap(),
        CancelOutcome::Requested
    );
    h.clock().advance(Duration::from_secs(3600));
    let again = spool.claim(&qs, &me(), LONG, 1).await.unwrap();
    assert_eq!(again.len(), 1, "the expired run was claimed again");
    assert!(spool.claim(&qc, &me(), LONG, 1).await.unwrap().is_empty());
    assert_eq!(
        spool.run(canceled.run_id).await.unwrap().unwrap().state,
        RunState::Canceled
    );

    let q = random_queue("ack-batch-mixed");
    let runs = claimed(&spool, &q, 4, LONG).await;
    let (good, twin, done, parked) = (&runs[0], &runs[1], &runs[2], &runs[3]);
    spool.ack(done.run_id, done.token).await.unwrap();
    spool
        .nack(parked.run_id, parked.token, NackKind::Permanent, "broken")
        .await
        .unwrap();
    let unknown = RunId::generate(h.clock().now());

    let cases = [
        ("good", good.run_id, good.token),
        ("twin", twin.run_id, twin.token),
        ("twin again", twin.run_id, twin.token),
        ("acked before", done.run_id, done.token),
        ("stale token", stale.run_id, stale.token),
        ("canceled", canceled.run_id, canceled.token),
        ("parked", parked.run_id, parked.token),
        ("unknown", unknown, good.token),
    ];
    let (batches_before, _) = spool.testkit_ack_batch_stats();
    let lane = spool.testkit_hold_ack_lane().await;
    let tasks: Vec<_> = cases.iter().map(|&(_, r, t)| ack(&spool, r, t)).collect();
    wait_queued(&spool, cases.len()).await;
    drop(lane);
    let mut batched = Vec::new();
    for t in tasks {
        batched.push(t.await.unwrap());
    }
    let (batches, fallbacks) = spool.testkit_ack_batch_stats();
    assert_eq!((batches - batches_before, fallbacks), (1, 0));

    assert!(batched[0].is_ok() && batched[1].is_ok() && batched[2].is_ok());
    assert!(
        batched[3].is_ok(),
        "a repeated ack with its own token is Ok"
    );
    assert!(
        matches!(batched[4], Err(Error::LeaseLost { run }) if run == stale.run_id),
        "stale token: {:?}",
        batched[4]
    );
    assert!(
        matches!(batched[7], Err(Error::UnknownRun { run }) if run == unknown),
        "unknown run: {:?}",
        batched[7]
    );
    // Each ack again, now alone (the unbatched path): the same result, case by case.
    for (&(what, r, t), got) in cases.iter().zip(&batched) {
        let lone = spool.ack(r, t).await;
        assert_eq!(
            format!("{got:?}"),
            format!("{lone:?}"),
            "{what}: the batched ack's result differs from a lone ack's"
        );
    }
    assert_eq!(
        spool.testkit_ack_batch_stats(),
        (batches, 0),
        "the lone acks sent a batch statement"
    );
    assert_eq!(
        spool.run(twin.run_id).await.unwrap().unwrap().state,
        RunState::Succeeded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_batch_failure_runs_each_ack_alone() {
    let h = spool_harness().await;
    let spool = Arc::new(h.spool().await.unwrap());
    let q = random_queue("ack-batch-fail");
    let runs = claimed(&spool, &q, 5, LONG).await;
    spool.testkit_fail_next_ack_batch();
    let lane = spool.testkit_hold_ack_lane().await;
    let tasks: Vec<_> = runs
        .iter()
        .map(|c| ack(&spool, c.run_id, c.token))
        .collect();
    wait_queued(&spool, 5).await;
    drop(lane);
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(
        spool.testkit_ack_batch_stats(),
        (0, 1),
        "the injected failure was not hit"
    );
    let other = h.spool().await.unwrap();
    for c in &runs {
        assert_eq!(
            other.run(c.run_id).await.unwrap().unwrap().state,
            RunState::Succeeded
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_times_out_writes_nothing_and_each_ack_runs_alone() {
    let h = spool_harness().await;
    let spool = Arc::new(
        h.spool_with(h.options().lock_timeout(Duration::from_millis(300)))
            .await
            .unwrap(),
    );
    let q = random_queue("ack-batch-timeout");
    let runs = claimed(&spool, &q, 4, LONG).await;
    let mut conn = admin(&h).await;
    lock_run(&mut conn, runs[0].run_id).await;

    let lane = spool.testkit_hold_ack_lane().await;
    let mut tasks: Vec<_> = runs
        .iter()
        .map(|c| ack(&spool, c.run_id, c.token))
        .collect();
    wait_queued(&spool, 4).await;
    drop(lane);
    // The batch times out on run 0's lock and writes nothing; alone, runs 1–3 are acked while
    // run 0 is still locked, and run 0's own ack times out as a lone ack does.
    let locked = tasks.remove(0);
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let lone = locked.await.unwrap();
    assert!(
        matches!(lone, Err(Error::Retryable { .. })),
        "the locked run's ack: {lone:?}"
    );
    assert_eq!(
        spool.testkit_ack_batch_stats(),
        (0, 1),
        "the batch statement did not fail"
    );
    sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
    let other = h.spool().await.unwrap();
    let held = other.run(runs[0].run_id).await.unwrap().unwrap();
    assert_eq!(
        held.state,
        RunState::Claimed,
        "the failed batch wrote run 0"
    );
    for c in &runs[1..] {
        assert_eq!(
            other.run(c.run_id).await.unwrap().unwrap().state,
            RunState::Succeeded
        );
    }
    spool.ack(runs[0].run_id, runs[0].token).await.unwrap();
}

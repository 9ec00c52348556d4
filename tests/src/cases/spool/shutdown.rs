//! Shutdown races (S6): the consumer loop stopping while enqueues keep arriving.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_core::spool::{ConsumerBuilder, Job, Outcome, RunState};
use cairn_core::{EnqueueOptions, RunId};

use super::support::{consumer, info, key, max_backoff, open_spool, within, LEASE};
use crate::{random_queue, SpoolHarness};

/// S6: producers on one spool instance keep enqueueing while a consumer loop on another
/// instance handles runs — some acked, some stopped politely on shutdown, some stuck past the
/// shutdown deadline — and is shut down in the middle of it. After every instance is dropped
/// and the store reopened, every run a producer was told about exists; exactly the runs whose
/// handler finished with `Done` are `succeeded`; and once leases and backoff have run out,
/// every other run is claimable, each exactly once.
pub async fn s6_shutdown_while_enqueues_arrive_strands_nothing<H: SpoolHarness>(h: &H) {
    let q = random_queue("s6");
    let producer_side = open_spool(h).await;
    let consumer_side = open_spool(h).await;

    let done: Arc<Mutex<BTreeSet<RunId>>> = Arc::default();
    // Handlers of each blocking kind running now: [polite, stuck].
    let blocked: Arc<[AtomicUsize; 2]> = Arc::default();
    let (d, b) = (done.clone(), blocked.clone());
    let worker = ConsumerBuilder::new(consumer_side.clone(), q.clone(), consumer("s6-worker"))
        .concurrency(8)
        .lease(LEASE)
        .poll_interval(Duration::from_millis(5))
        .spawn(move |job: Job| {
            let (d, b) = (d.clone(), b.clone());
            async move {
                let n: usize = String::from_utf8_lossy(job.payload())
                    .parse()
                    .expect("the payload is the run's number");
                match n % 3 {
                    0 => {
                        d.lock().unwrap().insert(job.run_id());
                        Outcome::Done
                    }
                    // Stops when asked: its run goes back to the queue.
                    1 => {
                        b[0].fetch_add(1, Ordering::SeqCst);
                        Outcome::Retry(job.stop().stopped().await.to_string())
                    }
                    // Ignores the shutdown: the deadline drops it.
                    _ => {
                        b[1].fetch_add(1, Ordering::SeqCst);
                        std::future::pending().await
                    }
                }
            }
        })
        .await
        .unwrap_or_else(|e| panic!("S6: start the consumer: {e}"));

    let stop = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for p in 0..2 {
        let (spool, q, stop) = (producer_side.clone(), q.clone(), stop.clone());
        producers.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut after_stop = 0;
            for i in 0usize.. {
                // Enqueues arrive before, during and after the shutdown.
                if stop.load(Ordering::SeqCst) {
                    if after_stop == 5 {
                        break;
                    }
                    after_stop += 1;
                }
                let n = i * 2 + p;
                let e = spool
                    .enqueue(
                        &q,
                        &key(&["s6", &n.to_string()]),
                        n.to_string().into_bytes(),
                        EnqueueOptions::default(),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("S6: enqueue {n}: {e}"));
                assert!(e.created);
                ids.push(e.run_id);
                // Paces the producers so the store holds hundreds of runs, not millions.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            ids
        }));
    }

    within("S6: the consumer gets going", async {
        // Each producer's runs alternate kinds, so eight slots never fill with blocked
        // handlers before two runs are done and both blocking kinds run.
        while done.lock().unwrap().len() < 2
            || blocked[0].load(Ordering::SeqCst) == 0
            || blocked[1].load(Ordering::SeqCst) == 0
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    let report = within(
        "S6: shutdown keeps its bound",
        worker.shutdown_within(Duration::from_millis(200)),
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    let mut enqueued = BTreeSet::new();
    for p in producers {
        enqueued.extend(p.await.expect("producer panicked"));
    }
    let done = done.lock().unwrap().clone();
    assert!(
        !report.abandoned.is_empty(),
        "S6: the stuck handlers outlived the deadline"
    );
    drop(producer_side);
    drop(consumer_side);

    // Restart. A run whose handler finished and that the report does not call abandoned was
    // acked before the deadline. One the report calls abandoned had its handler or its ack cut
    // off by the deadline: its ack may still have committed (a write that raced the deadline,
    // as `ShutdownReport::abandoned` says), or not, and then it is pending like the rest.
    let spool = open_spool(h).await;
    let abandoned: BTreeSet<RunId> = report.abandoned.iter().copied().collect();
    let mut pending = BTreeSet::new();
    for id in &enqueued {
        let i = info(spool.as_ref(), *id).await;
        let finished = done.contains(id);
        if finished && !abandoned.contains(id) {
            assert_eq!(i.state, RunState::Succeeded, "S6: an acked run stays acked");
        } else if finished && i.state == RunState::Succeeded {
            // Abandoned with its ack in flight, and the ack committed.
        } else {
            assert!(
                matches!(i.state, RunState::Queued | RunState::Claimed),
                "S6: run {id} is {} though it was never acked",
                i.state
            );
            pending.insert(*id);
        }
    }
    for id in &abandoned {
        assert!(
            pending.contains(id) || done.contains(id),
            "S6: abandoned run {id} is neither pending nor one whose handler finished"
        );
    }
    assert!(
        abandoned.iter().any(|id| pending.contains(id)),
        "S6: no stuck handler's run is left pending"
    );

    h.clock()
        .advance(LEASE + max_backoff(1) + Duration::from_secs(1));
    let me = consumer("s6-after-restart");
    let mut claimed = BTreeSet::new();
    loop {
        let got = spool.claim(&q, &me, LEASE, 100).await.unwrap();
        if got.is_empty() {
            break;
        }
        for c in got {
            assert!(
                claimed.insert(c.run_id),
                "S6: run {} handed out twice",
                c.run_id
            );
        }
    }
    assert_eq!(
        claimed, pending,
        "S6: every unacknowledged run is claimable after restart, and nothing else"
    );
}

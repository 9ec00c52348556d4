//! Trace context (Q8): a run carries its enqueuer's W3C `traceparent`, so the consumer that
//! handles it continues the enqueuer's trace. Stored by every enqueue path (single, batched
//! concurrently, with a supersede group, bulk, in a transaction), shown by `run` and `runs`,
//! and handed to every claim of the run — the first, one after a retryable nack, one that takes
//! back an expired lease, and one of a limited queue — while a duplicate enqueue of the key
//! changes nothing and a run enqueued without one claims with `None`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{
    EnqueueItem, NackKind, QueueLimits, RunFilter, RunState, SupersedeGroup, TraceParent,
};
use cairn_core::{Claimed, EnqueueOptions, QueueName, RunId, Spool};

use super::support::{consumer, enqueue_with, info, key, max_backoff, open_spool, within, LEASE};
use crate::{random_queue, SpoolHarness};

/// A valid `traceparent` whose trace id ends in `n` (sampled).
fn tp(n: u8) -> TraceParent {
    TraceParent::parse(&format!(
        "00-4bf92f3577b34da6a3ce929d0e0e47{n:02x}-00f067aa0ba902b7-01"
    ))
    .expect("a valid traceparent")
}

fn traced(n: u8) -> EnqueueOptions {
    EnqueueOptions::default().traceparent(tp(n))
}

/// The claimed runs' trace contexts, by run.
fn traces_of(claimed: &[Claimed]) -> BTreeMap<RunId, Option<TraceParent>> {
    claimed
        .iter()
        .map(|c| (c.run_id, c.traceparent.clone()))
        .collect()
}

/// Claims every due run of `q` (at most 10) and checks each one's trace context against
/// `want` (by the run's key), then acks them.
async fn claim_all(
    spool: &dyn Spool,
    q: &QueueName,
    want: &[(RunId, Option<TraceParent>)],
    ctx: &str,
) {
    let got = spool.claim(q, &consumer("q8"), LEASE, 10).await.unwrap();
    assert_eq!(got.len(), want.len(), "{ctx}: every due run is claimed");
    for c in &got {
        let (_, tp) = want
            .iter()
            .find(|(id, _)| *id == c.run_id)
            .unwrap_or_else(|| panic!("{ctx}: an unexpected run {}", c.run_id));
        assert_eq!(
            &c.traceparent, tp,
            "{ctx}: the claim hands out the run's own"
        );
        spool.ack(c.run_id, c.token).await.unwrap();
    }
}

/// Q8: a run carries its enqueuer's trace context through every enqueue and claim path.
pub async fn q8_a_run_carries_its_enqueuers_trace_context<H: SpoolHarness>(h: &H) {
    let a = open_spool(h).await;
    let b = open_spool(h).await;
    let clock = h.clock();
    let q = random_queue("q8");

    // A single enqueue stores it; a duplicate of the key with another one changes nothing.
    let traced_run = enqueue_with(a.as_ref(), &q, "q8-traced", traced(1)).await;
    let plain_run = enqueue_with(a.as_ref(), &q, "q8-plain", EnqueueOptions::default()).await;
    let again = b
        .enqueue(&q, &key(&["q8-traced"]), b"other".to_vec(), traced(2))
        .await
        .unwrap();
    assert_eq!(
        (again.run_id, again.created),
        (traced_run, false),
        "Q8: a duplicate enqueue answers the stored run"
    );
    assert_eq!(
        info(b.as_ref(), traced_run).await.traceparent,
        Some(tp(1)),
        "Q8: run() shows the first enqueuer's trace context, not the duplicate's"
    );
    assert_eq!(info(b.as_ref(), plain_run).await.traceparent, None);
    let listed: BTreeMap<RunId, Option<TraceParent>> = b
        .runs(
            &RunFilter {
                queue: Some(q.clone()),
                ..RunFilter::default()
            },
            10,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.run_id, r.traceparent))
        .collect();
    assert_eq!(
        listed,
        BTreeMap::from([(traced_run, Some(tp(1))), (plain_run, None)]),
        "Q8: runs() shows each run's"
    );

    // The first claim hands it out; a run enqueued without one claims with None.
    let first = b.claim(&q, &consumer("q8-b"), LEASE, 10).await.unwrap();
    assert_eq!(
        traces_of(&first),
        BTreeMap::from([(traced_run, Some(tp(1))), (plain_run, None)]),
        "Q8: the claim returns each run's trace context"
    );
    let held = first.iter().find(|c| c.run_id == traced_run).unwrap();
    let plain = first.iter().find(|c| c.run_id == plain_run).unwrap();
    b.ack(plain.run_id, plain.token).await.unwrap();

    // A retryable nack, then the retry's claim: still the enqueuer's.
    let nacked = b
        .nack(traced_run, held.token, NackKind::Retryable, "q8 retry")
        .await
        .unwrap();
    assert_eq!(nacked.state, RunState::Queued);
    clock.set(nacked.retry_at.expect("a retry time"));
    let retry = a.claim(&q, &consumer("q8-a"), LEASE, 10).await.unwrap();
    assert_eq!(retry.len(), 1);
    assert_eq!(
        (retry[0].attempt, &retry[0].traceparent),
        (2, &Some(tp(1))),
        "Q8: the claim after a retryable nack returns it"
    );

    // The lease runs out; the claim that takes the run back returns it too.
    clock.advance(LEASE + max_backoff(2) + Duration::from_secs(1));
    let reclaimed = b.claim(&q, &consumer("q8-b"), LEASE, 10).await.unwrap();
    assert_eq!(reclaimed.len(), 1, "Q8: the expired lease is taken back");
    assert_eq!(
        (reclaimed[0].attempt, &reclaimed[0].traceparent),
        (3, &Some(tp(1))),
        "Q8: the claim of an expired lease returns it"
    );
    b.ack(traced_run, reclaimed[0].token).await.unwrap();
    assert_eq!(
        info(a.as_ref(), traced_run).await.traceparent,
        Some(tp(1)),
        "Q8: a finished run keeps it"
    );

    // Concurrent enqueues (batched where the backend batches), with and without one.
    let mut tasks = Vec::new();
    for n in 0..8u8 {
        let spool = Arc::clone(if n % 2 == 0 { &a } else { &b });
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let options = if n % 3 == 0 {
                EnqueueOptions::default()
            } else {
                traced(10 + n)
            };
            let tp = options.traceparent.clone();
            let k = key(&["q8-concurrent", &n.to_string()]);
            let e = spool.enqueue(&q, &k, vec![n], options).await.unwrap();
            assert!(e.created);
            (e.run_id, tp)
        }));
    }
    let mut concurrent = Vec::new();
    for t in tasks {
        concurrent.push(within("Q8: concurrent enqueue", t).await.unwrap());
    }
    for (id, tp) in &concurrent {
        assert_eq!(&info(a.as_ref(), *id).await.traceparent, tp);
    }
    claim_all(b.as_ref(), &q, &concurrent, "Q8: concurrent enqueues").await;

    // A supersede group's enqueue stores its own.
    let group = SupersedeGroup::from_parts(["q8-group"]).unwrap();
    let grouped = enqueue_with(
        a.as_ref(),
        &q,
        "q8-grouped",
        traced(30).supersede(group.clone()),
    )
    .await;
    assert_eq!(info(b.as_ref(), grouped).await.traceparent, Some(tp(30)));
    claim_all(
        b.as_ref(),
        &q,
        &[(grouped, Some(tp(30)))],
        "Q8: a grouped enqueue",
    )
    .await;

    // enqueue_many: each item stores its own (none for an item without one); a key repeated
    // in the batch answers its first item's run, whose trace context stays.
    let items = vec![
        EnqueueItem::new(key(&["q8-bulk-1"]), b"1".to_vec()).with_options(traced(40)),
        EnqueueItem::new(key(&["q8-bulk-2"]), b"2".to_vec()),
        EnqueueItem::new(key(&["q8-bulk-3"]), b"3".to_vec()).with_options(traced(42)),
        EnqueueItem::new(key(&["q8-bulk-1"]), b"1 again".to_vec()).with_options(traced(43)),
    ];
    let bulk = a.enqueue_many(&q, items).await.unwrap();
    assert_eq!(bulk[3].run_id, bulk[0].run_id);
    let want = [
        (bulk[0].run_id, Some(tp(40))),
        (bulk[1].run_id, None),
        (bulk[2].run_id, Some(tp(42))),
    ];
    for (id, tp) in &want {
        assert_eq!(
            &info(b.as_ref(), *id).await.traceparent,
            tp,
            "Q8: enqueue_many stores each item's"
        );
    }
    // A bulk enqueue with a supersede group writes its items another way.
    let grouped_items = vec![
        EnqueueItem::new(key(&["q8-bulk-g"]), b"g".to_vec())
            .with_options(traced(44).supersede(group.clone())),
        EnqueueItem::new(key(&["q8-bulk-4"]), b"4".to_vec()).with_options(traced(45)),
    ];
    let grouped_bulk = b.enqueue_many(&q, grouped_items).await.unwrap();
    let mut all = want.to_vec();
    all.push((grouped_bulk[0].run_id, Some(tp(44))));
    all.push((grouped_bulk[1].run_id, Some(tp(45))));

    // A limited queue's claim takes its own path; it hands them out too.
    let limits = QueueLimits {
        max_claimed: Some(10),
        ..QueueLimits::default()
    };
    a.set_queue_limits(&q, &limits).await.unwrap();
    claim_all(b.as_ref(), &q, &all, "Q8: a limited queue's claim").await;
}

/// Q8: a transaction's enqueues (single and bulk) store the trace context with the run, and
/// the claim after the commit returns it.
pub async fn q8_trace_context_commits_with_a_transaction<H: crate::TxHarness>(h: &H) {
    let backend = h.open_tx().await.expect("a transactional store");
    let outside = open_spool(h).await;
    let q = random_queue("q8-tx");
    let mut tx = backend.begin().await.expect("begin");
    let one = tx
        .enqueue(&q, &key(&["q8-tx-1"]), Vec::new(), traced(50))
        .await
        .unwrap();
    let many = tx
        .enqueue_many(
            &q,
            vec![
                EnqueueItem::new(key(&["q8-tx-2"]), Vec::new()).with_options(traced(51)),
                EnqueueItem::new(key(&["q8-tx-3"]), Vec::new()),
            ],
        )
        .await
        .unwrap();
    within("Q8: commit", tx.commit()).await.unwrap();
    let want = [
        (one.run_id, Some(tp(50))),
        (many[0].run_id, Some(tp(51))),
        (many[1].run_id, None),
    ];
    for (id, tp) in &want {
        assert_eq!(
            &info(outside.as_ref(), *id).await.traceparent,
            tp,
            "Q8: a transaction's enqueue stores the trace context"
        );
    }
    claim_all(outside.as_ref(), &q, &want, "Q8: after the commit").await;
}

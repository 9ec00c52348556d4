//! Run identity and wake-up: dedup across instances (S1), durable ids (S2), subscribe (S3).

use std::collections::{BTreeMap, BTreeSet};

use cairn_core::spool::RunState;
use cairn_core::{EnqueueOptions, Enqueued, NackKind, RunId};

use super::support::{consumer, enqueue_new, info, key, open_spool, within, LEASE};
use crate::{random_queue, SpoolHarness};

/// S1 (in-process part): many tasks on two spool instances enqueue the same keys at once; each
/// key gets exactly one run id, exactly one enqueue says `created`, and a later enqueue with
/// other payload and options changes nothing. The same key in another queue is another run.
pub async fn s1_same_key_same_run_across_instances<H: SpoolHarness>(h: &H) {
    let spools = [open_spool(h).await, open_spool(h).await];
    let q = random_queue("s1");
    let keys: Vec<String> = (0..16).map(|i| format!("sha{i}")).collect();
    let mut joins = Vec::new();
    for t in 0..8 {
        let spool = spools[t % 2].clone();
        let (q, keys) = (q.clone(), keys.clone());
        joins.push(tokio::spawn(async move {
            let mut out = Vec::new();
            // Each task walks the keys from another start, so every key is raced.
            for i in 0..keys.len() {
                let k = &keys[(i + t * 3) % keys.len()];
                let e = spool
                    .enqueue(
                        &q,
                        &key(&["gate", "refs/heads/main", k]),
                        format!("payload-{t}").into_bytes(),
                        EnqueueOptions::default(),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("S1: enqueue {k}: {e}"));
                out.push((k.clone(), e));
            }
            out
        }));
    }
    let mut by_key: BTreeMap<String, Vec<Enqueued>> = BTreeMap::new();
    for j in joins {
        for (k, e) in j.await.expect("enqueue task panicked") {
            by_key.entry(k).or_default().push(e);
        }
    }
    let mut all_ids = BTreeSet::new();
    for (k, es) in &by_key {
        let ids: BTreeSet<RunId> = es.iter().map(|e| e.run_id).collect();
        assert_eq!(ids.len(), 1, "S1: key {k} must map to one run id: {ids:?}");
        assert_eq!(
            es.iter().filter(|e| e.created).count(),
            1,
            "S1: exactly one enqueue of key {k} creates the run"
        );
        let id = es[0].run_id;
        all_ids.insert(id);
        for s in &spools {
            let i = info(s.as_ref(), id).await;
            assert_eq!(i.dedup_key, key(&["gate", "refs/heads/main", k]));
            assert_eq!((&i.queue, i.state), (&q, RunState::Queued));
        }
    }
    assert_eq!(
        all_ids.len(),
        keys.len(),
        "S1: distinct keys, distinct runs"
    );

    let first = by_key["sha0"][0].run_id;
    let k0 = key(&["gate", "refs/heads/main", "sha0"]);
    let before = info(spools[0].as_ref(), first).await;
    let again = spools[1]
        .enqueue(
            &q,
            &k0,
            b"another payload".to_vec(),
            EnqueueOptions::default().priority(9).max_attempts(1),
        )
        .await
        .unwrap();
    assert_eq!(
        again,
        Enqueued {
            run_id: first,
            created: false
        },
        "S1: an existing key returns its run"
    );
    assert_eq!(
        info(spools[0].as_ref(), first).await,
        before,
        "S1: a duplicate enqueue changes nothing"
    );
    let other = spools[0]
        .enqueue(
            &random_queue("s1-other"),
            &k0,
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        other.created && other.run_id != first,
        "S1: the same key in another queue is another run"
    );
}

/// S2 (in-process part): the run id returned by enqueue is there after the instance is dropped
/// and the store reopened, with its key, state and payload, and still deduplicates.
pub async fn s2_run_id_survives_reopen<H: SpoolHarness>(h: &H) {
    let q = random_queue("s2");
    let k = key(&["gate", "ref", "sha"]);
    let payload = vec![0u8, 1, 2, 0xfe, 0xff];
    let first = open_spool(h).await;
    let e = first
        .enqueue(&q, &k, payload.clone(), EnqueueOptions::default())
        .await
        .unwrap();
    assert!(e.created);
    drop(first);

    let reopened = open_spool(h).await;
    let i = info(reopened.as_ref(), e.run_id).await;
    assert_eq!((i.state, &i.dedup_key), (RunState::Queued, &k), "S2");
    assert_eq!(i.payload_bytes, payload.len() as u64);
    let again = reopened
        .enqueue(&q, &k, Vec::new(), EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(
        again,
        Enqueued {
            run_id: e.run_id,
            created: false
        },
        "S2: the reopened store still deduplicates the key"
    );
    let claimed = reopened
        .claim(&q, &consumer("s2"), LEASE, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(
        (claimed[0].run_id, &claimed[0].payload),
        (e.run_id, &payload),
        "S2: the payload round-trips byte for byte"
    );
    assert_eq!(RunId::parse(&e.run_id.to_string()).unwrap(), e.run_id);
}

/// S3 (in-process part): a consumer blocked in `subscribe` wakes for an enqueue made through
/// another spool instance; a wake-up between two waits is not lost; a retryable nack wakes too.
pub async fn s3_subscriber_wakes_for_another_instances_enqueue<H: SpoolHarness>(h: &H) {
    let consumer_side = open_spool(h).await;
    let producer_side = open_spool(h).await;
    let q = random_queue("s3");
    let mut wake = consumer_side.subscribe(&q).await.unwrap();
    let waiter = tokio::spawn(async move { wake.wait().await.map(|()| wake) });
    enqueue_new(producer_side.as_ref(), &q, "s3-1").await;
    let mut wake = within("S3: wake for another instance's enqueue", waiter)
        .await
        .expect("waiter panicked")
        .expect("wait failed");
    let got = consumer_side
        .claim(&q, &consumer("s3"), LEASE, 10)
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "S3: the woken consumer finds the run");

    enqueue_new(producer_side.as_ref(), &q, "s3-2").await;
    within("S3: a wake-up before wait is kept", wake.wait())
        .await
        .unwrap();

    let nacked = consumer_side
        .nack(got[0].run_id, got[0].token, NackKind::Retryable, "again")
        .await
        .unwrap();
    assert_eq!(nacked.state, RunState::Queued);
    within("S3: a retryable nack wakes subscribers", wake.wait())
        .await
        .unwrap();
}

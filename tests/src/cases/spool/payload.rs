//! A run's payload read back (S19): `payload()`, what operators' tools show of a run.

use std::time::Duration;

use cairn_core::spool::{RetentionBudget, RetentionPolicy, MAX_RUN_PAYLOAD};
use cairn_core::{Clock, EnqueueOptions, NackKind, RunId};

use super::support::{consumer, key, LEASE};
use crate::{random_queue, SpoolHarness};

/// S19: `payload(run)` answers the bytes the run was enqueued with — empty, binary and the
/// largest allowed alike, unchanged by claims, nacks, acks or a repeated enqueue of the key —
/// and `None` for a run that never was or that retention removed; it changes nothing.
pub async fn s19_payload_reads_back_the_enqueued_bytes<H: SpoolHarness>(h: &H) {
    // A location of its own: the retention pass at the end removes every finished run in it.
    let s = h
        .fresh_spool()
        .await
        .unwrap_or_else(|e| panic!("{}: cannot open spool: {e}", h.backend()));
    let s = s.as_ref();
    let q = random_queue("s19");
    let binary: Vec<u8> = (0..=255u8).chain([0, 0xff, b'\n']).collect();
    let largest = vec![0xa5; MAX_RUN_PAYLOAD];
    let mut runs = Vec::new();
    for (name, bytes) in [
        ("empty", Vec::new()),
        ("binary", binary),
        ("largest", largest),
    ] {
        let e = s
            .enqueue(
                &q,
                &key(&["s19", name]),
                bytes.clone(),
                EnqueueOptions::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("S19 enqueue {name}: {e}"));
        assert_eq!(
            s.payload(e.run_id).await.unwrap().as_deref(),
            Some(bytes.as_slice()),
            "S19: {name} reads back as enqueued"
        );
        runs.push((name, e.run_id, bytes));
    }
    // The same key again (another payload) is the same run: the stored payload stays.
    let again = s
        .enqueue(
            &q,
            &key(&["s19", "binary"]),
            b"other".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(again.run_id, runs[1].1);
    assert_eq!(s.payload(runs[1].1).await.unwrap(), Some(runs[1].2.clone()));
    // Through a claim, a retryable nack, a claim again and an ack.
    let me = consumer("s19");
    for _ in 0..2 {
        let claimed = s.claim(&q, &me, LEASE, 10).await.unwrap();
        for c in &claimed {
            let (_, _, bytes) = runs.iter().find(|r| r.1 == c.run_id).unwrap();
            assert_eq!(&c.payload, bytes, "S19: the claim hands out the same bytes");
            s.nack(c.run_id, c.token, NackKind::Retryable, "again")
                .await
                .unwrap();
        }
        h.clock().advance(Duration::from_secs(3600));
    }
    for (name, run, bytes) in &runs {
        assert_eq!(
            s.payload(*run).await.unwrap().as_ref(),
            Some(bytes),
            "S19: {name} unchanged by claims and nacks"
        );
    }
    assert_eq!(
        s.payload(RunId::generate(h.clock().now())).await.unwrap(),
        None,
        "S19: no such run"
    );
    // Finished and past retention's age: removed, and then there is no payload.
    let claimed = s.claim(&q, &me, LEASE, 10).await.unwrap();
    assert_eq!(claimed.len(), 3);
    for c in &claimed {
        s.ack(c.run_id, c.token).await.unwrap();
    }
    h.clock().advance(Duration::from_secs(3600));
    let policy = RetentionPolicy {
        max_age: Duration::from_secs(60),
        max_bytes: u64::MAX,
    };
    while !s
        .retention_pass(&policy, &RetentionBudget::default())
        .await
        .unwrap()
        .complete
    {}
    for (name, run, _) in &runs {
        assert_eq!(
            s.payload(*run).await.unwrap(),
            None,
            "S19: {name} was removed by retention"
        );
    }
}

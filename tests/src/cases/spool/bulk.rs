//! T4 (the spool half): bulk enqueue ([`Spool::enqueue_many`]) on every spool backend, the
//! model included.

use cairn_core::spool::{
    EnqueueItem, RunFilter, RunState, SupersedeGroup, MAX_ENQUEUE_BATCH, MAX_RUN_PAYLOAD,
};
use cairn_core::{EnqueueOptions, Error, QueueName, RunId, Spool};

use super::support::{info, key, open_spool};
use crate::SpoolHarness;

/// Every run of `queue`, paged through [`Spool::runs`].
pub(crate) async fn runs_of(spool: &dyn Spool, queue: &QueueName) -> Vec<RunId> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let filter = RunFilter {
            queue: Some(queue.clone()),
            state: None,
            after,
        };
        let page = spool
            .runs(&filter, 1000)
            .await
            .unwrap_or_else(|e| panic!("runs({queue}): {e}"));
        let Some(last) = page.last() else {
            return all;
        };
        after = Some(last.run_id);
        all.extend(page.iter().map(|r| r.run_id));
    }
}

/// T4: 10,000 items over 2,500 keys give 2,500 runs; the results come in input order, each
/// key's first item `created`, its later items the same id, not created.
pub async fn t4_bulk_dedups_repeated_keys_in_input_order<H: SpoolHarness>(h: &H) {
    let spool = open_spool(h).await;
    let queue = QueueName::new("t4-bulk").unwrap();
    let items: Vec<EnqueueItem> = (0..10_000)
        .map(|i| {
            EnqueueItem::new(
                key(&["t4", &(i % 2500).to_string()]),
                format!("item {i}").into_bytes(),
            )
        })
        .collect();
    let results = spool
        .enqueue_many(&queue, items)
        .await
        .unwrap_or_else(|e| panic!("{}: T4: bulk enqueue: {e}", h.backend()));
    assert_eq!(results.len(), 10_000, "T4: one result per item");
    for (i, r) in results.iter().enumerate() {
        let first = &results[i % 2500];
        if i < 2500 {
            assert!(r.created, "T4: item {i} is its key's first: created");
        } else {
            assert!(!r.created, "T4: item {i} repeats a key: not created");
            assert_eq!(r.run_id, first.run_id, "T4: item {i} answers its key's run");
        }
    }
    let mut ids: Vec<RunId> = results[..2500].iter().map(|r| r.run_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 2500, "T4: distinct keys are distinct runs");
    let mut stored = runs_of(spool.as_ref(), &queue).await;
    stored.sort();
    assert_eq!(
        stored, ids,
        "T4: the queue holds exactly one run per distinct key"
    );
    // The stored payload is the first item's.
    let run = info(spool.as_ref(), results[7].run_id).await;
    assert_eq!(run.state, RunState::Queued);
    assert_eq!(
        run.payload_bytes,
        "item 7".len() as u64,
        "T4: the first item's payload"
    );
    // Another instance sees the same answers.
    let other = open_spool(h).await;
    let again = other
        .enqueue_many(&queue, vec![EnqueueItem::new(key(&["t4", "7"]), "x")])
        .await
        .unwrap();
    assert_eq!(again[0].run_id, results[7].run_id);
    assert!(!again[0].created);
    assert!(
        spool
            .enqueue_many(&queue, Vec::new())
            .await
            .unwrap()
            .is_empty(),
        "T4: an empty batch answers nothing"
    );
}

/// T4: a key stored before the batch answers its run; supersede groups apply in input order,
/// the batch's own earlier runs included.
pub async fn t4_bulk_answers_stored_keys_and_supersedes_in_order<H: SpoolHarness>(h: &H) {
    let spool = open_spool(h).await;
    let queue = QueueName::new("t4-order").unwrap();
    let stored = spool
        .enqueue(
            &queue,
            &key(&["a"]),
            b"a".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let group = SupersedeGroup::from_parts(["g"]).unwrap();
    let grouped = EnqueueOptions::default().supersede(group);
    let results = spool
        .enqueue_many(
            &queue,
            vec![
                EnqueueItem::new(key(&["a"]), "a again"),
                EnqueueItem::new(key(&["b"]), "b").with_options(grouped.clone()),
                EnqueueItem::new(key(&["plain"]), "plain"),
                EnqueueItem::new(key(&["c"]), "c").with_options(grouped.clone()),
                EnqueueItem::new(key(&["b"]), "b again").with_options(grouped),
            ],
        )
        .await
        .unwrap_or_else(|e| panic!("{}: T4: bulk enqueue: {e}", h.backend()));
    assert_eq!(
        results[0].run_id, stored.run_id,
        "T4: a stored key answers its run"
    );
    assert!(!results[0].created);
    assert!(results[1].created && results[2].created && results[3].created);
    assert_eq!(
        results[4].run_id, results[1].run_id,
        "T4: b repeated is b's run"
    );
    assert!(!results[4].created);
    assert_eq!(
        info(spool.as_ref(), results[1].run_id).await.state,
        RunState::Superseded,
        "T4: c, later in the batch, supersedes b of the same group"
    );
    assert_eq!(
        info(spool.as_ref(), results[3].run_id).await.state,
        RunState::Queued
    );
    assert_eq!(
        info(spool.as_ref(), results[2].run_id).await.state,
        RunState::Queued
    );
}

/// T4: an invalid item refuses the whole batch, naming its index; nothing is written.
pub async fn t4_bulk_bad_input_refuses_the_whole_batch<H: SpoolHarness>(h: &H) {
    let spool = open_spool(h).await;
    let queue = QueueName::new("t4-bad").unwrap();
    let good = |i: usize| EnqueueItem::new(key(&["bad", &i.to_string()]), "ok");
    let mut items: Vec<EnqueueItem> = (0..10).map(good).collect();
    items[7].payload = vec![0; MAX_RUN_PAYLOAD + 1];
    match spool.enqueue_many(&queue, items).await {
        Err(Error::InvalidBatchItem { index: 7, error }) => {
            assert!(matches!(*error, Error::InvalidInput { .. }), "{error}");
        }
        other => panic!("{}: T4: an oversized item 7: {other:?}", h.backend()),
    }
    let mut items: Vec<EnqueueItem> = (0..10).map(good).collect();
    items[3].options.max_attempts = Some(0);
    match spool.enqueue_many(&queue, items).await {
        Err(Error::InvalidBatchItem { index: 3, .. }) => {}
        other => panic!("{}: T4: max_attempts 0 at item 3: {other:?}", h.backend()),
    }
    let items: Vec<EnqueueItem> = (0..=MAX_ENQUEUE_BATCH).map(good).collect();
    match spool.enqueue_many(&queue, items).await {
        Err(Error::InvalidInput { .. }) => {}
        other => panic!("{}: T4: an oversized batch: {other:?}", h.backend()),
    }
    assert!(
        runs_of(spool.as_ref(), &queue).await.is_empty(),
        "T4: a refused batch writes nothing"
    );
}

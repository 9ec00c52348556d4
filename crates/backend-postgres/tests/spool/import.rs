//! Imports on Postgres beyond the S13 cases: concurrent imports of one source.

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_conformance::random_queue;
use cairn_core::spool::{ImportSource, ImportedRun, RunFilter, RunImportOutcome, RunState};
use cairn_core::{Clock, DedupKey, EnqueueOptions, Error, QueueName, RunId, Spool, Timestamp};
use cairn_postgres::spool::testkit::spool_harness;

use crate::failures::{admin, lock_runs, unlock};

/// A run in `state` to import into `queue` under `key`, with the id `run_id`, enqueued (and,
/// unless queued, finished) at `now`.
pub(crate) fn imported(
    queue: &QueueName,
    key: &str,
    state: RunState,
    run_id: RunId,
    now: Timestamp,
) -> ImportedRun {
    let finished = state != RunState::Queued;
    ImportedRun {
        run_id,
        queue: queue.clone(),
        dedup_key: DedupKey::from_parts([key]).unwrap(),
        supersede_group: None,
        payload: Vec::new(),
        state,
        attempts: u32::from(finished),
        max_attempts: 3,
        priority: 0,
        enqueued_at: now,
        due_at: (!finished).then_some(now),
        finished_at: finished.then_some(now),
        reason: None,
        facts: BTreeMap::new(),
        events: Vec::new(),
    }
}

/// A source named after `what`.
fn source(what: &str) -> ImportSource {
    ImportSource {
        fingerprint: *blake3::hash(what.as_bytes()).as_bytes(),
        description: format!("a test source: {what}"),
    }
}

/// Two spools (two nodes) import one source at once: its runs are created once, one import
/// reports them and the other finds the source imported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_imports_of_one_source_create_its_runs_once() {
    let h = spool_harness().await;
    let (a, b) = (h.spool().await.unwrap(), h.spool().await.unwrap());
    let q = random_queue("import");
    let now = cairn_conformance::SpoolHarness::clock(&h).now();
    let source = ImportSource {
        fingerprint: *blake3::hash(q.as_str().as_bytes()).as_bytes(),
        description: "a test source".into(),
    };
    let runs: Vec<ImportedRun> = (0..20u8)
        .map(|i| ImportedRun {
            payload: vec![i],
            ..imported(
                &q,
                &format!("k{i}"),
                RunState::Queued,
                RunId::generate(now),
                now,
            )
        })
        .collect();
    let (ra, rb) = tokio::join!(
        a.import_runs(&source, runs.clone()),
        b.import_runs(&source, runs.clone())
    );
    let outcomes = [ra.unwrap(), rb.unwrap()];
    let imported: Vec<_> = outcomes
        .iter()
        .filter_map(|o| match o {
            RunImportOutcome::Imported { created, existing } => Some((created, existing)),
            RunImportOutcome::AlreadyImported(_) => None,
        })
        .collect();
    assert_eq!(imported.len(), 1, "exactly one import writes: {outcomes:?}");
    assert_eq!(imported[0].0.len(), 20);
    assert!(imported[0].1.is_empty());
    let stored = a
        .runs(
            &RunFilter {
                queue: Some(q.clone()),
                ..RunFilter::default()
            },
            100,
        )
        .await
        .unwrap();
    assert_eq!(stored.len(), 20, "the runs exist once");
    a.close().await;
    b.close().await;
}

/// An import carrying a run id stored already under another key is refused as a `Conflict`
/// that says so (the insert's unique violation, named for what it means to the operator),
/// and writes nothing; an import whose insert fails otherwise (here a lock timeout) keeps its
/// own error, `Retryable`, rather than being reported as that conflict. Kills
/// `import_runs_tx`'s match guard `e.is_conflict()` → `false` and → `true` (postgres-spool
/// shard 2/4 survivors at `b06aef2`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_refused_by_the_store_says_why() {
    let h = spool_harness().await;
    let spool = h
        .spool_with(h.options().lock_timeout(Duration::from_millis(200)))
        .await
        .unwrap();
    let q = random_queue("import-refused");
    let now = spool.clock().now();
    let taken = spool
        .enqueue(
            &q,
            &DedupKey::from_parts(["taken"]).unwrap(),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap()
        .run_id;

    let clash = vec![
        imported(&q, "fresh", RunState::Queued, RunId::generate(now), now),
        imported(&q, "other", RunState::Queued, taken, now),
    ];
    match spool.import_runs(&source(q.as_str()), clash).await {
        Err(e @ Error::Conflict { .. }) => assert!(
            e.to_string().contains("stored already under another key"),
            "the conflict says what clashed: {e}"
        ),
        other => panic!("an id stored under another key is a Conflict: {other:?}"),
    }
    let stored = spool
        .runs(
            &RunFilter {
                queue: Some(q.clone()),
                ..RunFilter::default()
            },
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        stored.len(),
        1,
        "the refused import wrote nothing: {stored:?}"
    );

    let mut conn = admin(&h).await;
    lock_runs(&mut conn).await;
    let blocked = spool
        .import_runs(
            &source(&format!("{q}-blocked")),
            vec![imported(
                &q,
                "blocked",
                RunState::Queued,
                RunId::generate(now),
                now,
            )],
        )
        .await;
    unlock(&mut conn).await;
    assert!(
        matches!(blocked, Err(Error::Retryable { .. })),
        "an import that timed out on a lock is Retryable, not a conflict: {blocked:?}"
    );
    spool.close().await;
}

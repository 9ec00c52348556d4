//! Imports on Postgres beyond the S13 cases: concurrent imports of one source.

use std::collections::BTreeMap;

use cairn_conformance::random_queue;
use cairn_core::spool::{ImportSource, ImportedRun, RunFilter, RunImportOutcome, RunState};
use cairn_core::{Clock, DedupKey, RunId, Spool};
use cairn_postgres::spool::testkit::spool_harness;

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
            run_id: RunId::generate(now),
            queue: q.clone(),
            dedup_key: DedupKey::from_parts([format!("k{i}")]).unwrap(),
            supersede_group: None,
            payload: vec![i],
            state: RunState::Queued,
            attempts: 0,
            max_attempts: 3,
            priority: 0,
            enqueued_at: now,
            due_at: Some(now),
            finished_at: None,
            reason: None,
            facts: BTreeMap::new(),
            events: Vec::new(),
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

//! E8: the paced head-cache backfill — pacing on a simulated clock, the switch, the first-error
//! stop, shutdown, and the completion marker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::backfill::{
    self, pause_after, run_pass, BackfillConfig, BackfillObserver, BackfillOutcome,
    BackfillProgress, Quiet, SimulatedPacer,
};
use cairn_core::{
    Appended, Epoch, EpochDiagnostics, EpochId, EpochStore, EpochSummary, Error, Event, FeedCursor,
    FeedPage, ForeignEpoch, Head, ImportOutcome, RepairOutcome, Result, Seq, SpaceId,
};

use super::support::{ev, open};
use crate::{random_space, Harness};

/// Makes a space whose cache is stale: one cached append, then one cache-unaware append.
async fn stale_space<H: Harness>(h: &H, store: &dyn EpochDiagnostics, label: &str) -> SpaceId {
    let space = random_space(label);
    store.append(&space, ev(label)).await.unwrap();
    h.legacy_append(&space, None, ev(format!("{label}-legacy")))
        .await
        .unwrap_or_else(|e| panic!("e8: legacy append: {e}"));
    assert!(
        !backfill::probe(store, &space)
            .await
            .unwrap()
            .cache_is_current(),
        "e8: a cache-unaware append must leave the cache stale"
    );
    space
}

async fn is_current(store: &dyn EpochDiagnostics, space: &SpaceId) -> bool {
    backfill::probe(store, space)
        .await
        .unwrap()
        .cache_is_current()
}

/// Records what the pass reported.
#[derive(Default)]
struct Recorder {
    spaces: AtomicU64,
    checkpoints: Mutex<Vec<u64>>,
    failures: Mutex<Vec<&'static str>>,
}

impl BackfillObserver for Recorder {
    fn space_done(&self, _p: &BackfillProgress) {
        self.spaces.fetch_add(1, Ordering::SeqCst);
    }
    fn checkpoint(&self, p: &BackfillProgress) {
        self.checkpoints.lock().unwrap().push(p.visited);
    }
    fn failed(&self, code: &'static str, _p: &BackfillProgress) {
        self.failures.lock().unwrap().push(code);
    }
}

/// Delegates to a real store but answers every `repair_heads` with a retryable error.
#[derive(Debug)]
struct FailingRepair {
    inner: Arc<dyn EpochDiagnostics>,
    repairs: AtomicU64,
}

#[async_trait]
impl EpochStore for FailingRepair {
    async fn append(&self, space: &SpaceId, events: Vec<Event>) -> Result<Appended> {
        self.inner.append(space, events).await
    }
    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        self.inner.heads(space).await
    }
    async fn repair_heads(&self, _space: &SpaceId) -> Result<RepairOutcome> {
        self.repairs.fetch_add(1, Ordering::SeqCst);
        Err(Error::retryable("injected by the e8 case"))
    }
    async fn import(&self, epoch: ForeignEpoch) -> Result<ImportOutcome> {
        self.inner.import(epoch).await
    }
    async fn events_since(
        &self,
        space: &SpaceId,
        cursor: Option<&FeedCursor>,
        limit: usize,
    ) -> Result<FeedPage> {
        self.inner.events_since(space, cursor, limit).await
    }
    async fn epoch(&self, space: &SpaceId, id: &EpochId) -> Result<Option<Epoch>> {
        self.inner.epoch(space, id).await
    }
    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
        self.inner.list_spaces(after, limit).await
    }
    async fn store_id(&self) -> Result<cairn_core::sync::StoreId> {
        self.inner.store_id().await
    }
    async fn import_batch(
        &self,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&cairn_core::sync::SyncCursor>,
        at_us: i64,
    ) -> Result<Vec<ImportOutcome>> {
        self.inner.import_batch(space, epochs, cursor, at_us).await
    }
    async fn sync_peers(&self, space: &SpaceId) -> Result<Vec<cairn_core::sync::SyncPeer>> {
        self.inner.sync_peers(space).await
    }
}

#[async_trait]
impl EpochDiagnostics for FailingRepair {
    async fn cached_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        self.inner.cached_heads(space).await
    }
    async fn computed_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        self.inner.computed_heads(space).await
    }
    async fn next_seq(&self, space: &SpaceId) -> Result<Seq> {
        self.inner.next_seq(space).await
    }
    async fn recent_epochs(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>> {
        self.inner.recent_epochs(space, before, limit).await
    }
    fn statements_executed(&self) -> u64 {
        self.inner.statements_executed()
    }
}

/// E8: the backfill visits every space at the configured pace (each pause at least as long as
/// the space took, and the rate kept), repairs only stale caches, can be switched off, stops at
/// the first error with its code and without retrying, stops on shutdown, and writes a
/// completion marker that a later pass may honour.
pub async fn e8_backfill_pacing_switch_first_error_stop_and_marker<H: Harness>(h: &H) {
    let store = open(h).await;
    let current = random_space("e8-current");
    store.append(&current, ev("e8")).await.unwrap();
    let stale = [
        stale_space(h, store.as_ref(), "e8-stale-a").await,
        stale_space(h, store.as_ref(), "e8-stale-b").await,
    ];
    let never = std::future::pending::<()>;

    // The switch: a disabled backfill reads and writes nothing.
    let off = BackfillConfig {
        enabled: false,
        ..BackfillConfig::default()
    };
    let pacer = SimulatedPacer::new(Duration::from_millis(100));
    let outcome = run_pass(store.as_ref(), &off, &pacer, &Quiet, true, never()).await;
    assert_eq!(outcome, BackfillOutcome::Disabled, "e8: the switch");
    assert!(
        pacer.sleeps().is_empty(),
        "e8: a disabled pass must not pace"
    );
    for s in &stale {
        assert!(
            !is_current(store.as_ref(), s).await,
            "e8: a disabled pass repaired"
        );
    }
    assert!(!backfill::marker_present(store.as_ref()).await.unwrap());

    // First error: the pass stops at the first failing repair, reports its code once, and
    // does not retry or go on to the next space.
    let failing = FailingRepair {
        inner: Arc::clone(&store),
        repairs: AtomicU64::new(0),
    };
    let rec = Recorder::default();
    let cfg = BackfillConfig {
        page_size: 1,
        ..BackfillConfig::default()
    };
    let outcome = run_pass(&failing, &cfg, &pacer, &rec, false, never()).await;
    let BackfillOutcome::Failed { progress, code } = outcome else {
        panic!("e8: a failing repair must stop the pass, got {outcome:?}");
    };
    assert_eq!(code, "retryable", "e8: the error's code");
    assert_eq!(failing.repairs.load(Ordering::SeqCst), 1, "e8: no retry");
    assert_eq!(*rec.failures.lock().unwrap(), vec!["retryable"]);
    assert_eq!(progress.repaired, 0);
    assert!(!backfill::marker_present(store.as_ref()).await.unwrap());

    // Shutdown: a pass asked to stop stops after the space in hand.
    let outcome = run_pass(store.as_ref(), &cfg, &pacer, &Quiet, false, async {}).await;
    assert!(
        matches!(outcome, BackfillOutcome::Stopped(p) if p.visited == 1),
        "e8: shutdown must stop the pass after one space, got {outcome:?}"
    );
    assert!(!backfill::marker_present(store.as_ref()).await.unwrap());

    // Pacing: every pause equals pause_after(took, interval) on the simulated clock, for a
    // space that takes less than the interval and for one that takes more.
    for work in [Duration::from_millis(100), Duration::from_millis(700)] {
        let pacer = SimulatedPacer::new(work);
        let rec = Recorder::default();
        let cfg = BackfillConfig {
            progress_every: 2,
            page_size: 2,
            ..BackfillConfig::default()
        };
        let outcome = run_pass(store.as_ref(), &cfg, &pacer, &rec, false, never()).await;
        let BackfillOutcome::Completed(p) = outcome else {
            panic!("e8: the pass must complete, got {outcome:?}");
        };
        assert!(p.visited >= 3, "e8: every space is visited");
        let sleeps = pacer.sleeps();
        assert_eq!(sleeps.len() as u64, p.visited, "e8: one pause per space");
        let want = pause_after(work, cfg.interval());
        assert!(want >= work, "e8: a pause is at least the work");
        assert!(
            sleeps.iter().all(|d| *d == want),
            "e8: pauses {sleeps:?}, want each {want:?}"
        );
        assert!(
            pacer.elapsed() >= cfg.interval() * p.visited as u32,
            "e8: the pass ran faster than the configured rate"
        );
        assert_eq!(
            rec.spaces.load(Ordering::SeqCst),
            p.visited,
            "e8: one progress report per space"
        );
        let want_checkpoints: Vec<u64> = (1..=p.visited / 2).map(|i| i * 2).collect();
        assert_eq!(*rec.checkpoints.lock().unwrap(), want_checkpoints);
        if work == Duration::from_millis(100) {
            assert!(p.repaired >= 1, "e8: the stale spaces are repaired: {p:?}");
        } else {
            assert_eq!(p.repaired, 0, "e8: a second pass finds every cache current");
        }
    }
    for s in &stale {
        assert!(is_current(store.as_ref(), s).await, "e8: stale cache left");
        assert_eq!(
            store.cached_heads(s).await.unwrap(),
            store.computed_heads(s).await.unwrap()
        );
    }
    assert!(is_current(store.as_ref(), &current).await);

    // The marker: present after a completed pass, honoured when asked, and harmless when a
    // cache-unaware writer makes a cache stale afterwards — the append's seq check still
    // refuses the stale cache and the next append has every head as a parent.
    assert!(backfill::marker_present(store.as_ref()).await.unwrap());
    let pacer = SimulatedPacer::new(Duration::from_millis(100));
    let outcome = run_pass(store.as_ref(), &cfg, &pacer, &Quiet, true, never()).await;
    assert_eq!(outcome, BackfillOutcome::AlreadyComplete);
    assert!(pacer.sleeps().is_empty());
    let reopened = open(h).await;
    assert!(backfill::marker_present(reopened.as_ref()).await.unwrap());
    let late = stale_space(h, reopened.as_ref(), "e8-after-marker").await;
    let heads = reopened.computed_heads(&late).await.unwrap();
    let appended = reopened.append(&late, ev("e8-next")).await.unwrap();
    let epoch = reopened.epoch(&late, &appended.id).await.unwrap().unwrap();
    let mut want: Vec<EpochId> = heads.iter().map(|h| h.id).collect();
    want.sort();
    assert_eq!(
        epoch.parents, want,
        "e8: a stale marker must not make a stale cache trusted"
    );
    assert!(is_current(reopened.as_ref(), &late).await);
}

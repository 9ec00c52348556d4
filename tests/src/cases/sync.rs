//! R: replication between stores (`cairn sync`). Every case runs on a [`SyncPair`] — two kinds
//! of side (model, SQLite, Postgres, or `cairn serve` over HTTP) — and checks the stores
//! themselves after each sync: the union of epochs with identical ids, parents and events, the
//! same heads, an exact head cache (`repair_heads` finds nothing), and true cursors.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::sync::{
    StoreId, Sync, SyncCursor, SyncEndpoint, SyncOptions, SyncPath, SyncPeer, SyncReport,
};
use cairn_core::{
    Epoch, EpochId, EpochSummary, Error, Event, ForeignEpoch, Head, ImportOutcome, RepairOutcome,
    Result, Seq, SpaceId,
};

use crate::random_space;
use crate::sync::{SyncPair, SyncSide};

pub(crate) fn events(tag: &str) -> Vec<Event> {
    vec![
        Event::new("sync.test", tag.as_bytes().to_vec()),
        Event::with_key("sync.keyed", format!("k-{tag}"), vec![7u8; 300]),
    ]
}

/// Appends `n` epochs to `space` on `side`.
pub(crate) async fn append_n(side: &SyncSide, space: &SpaceId, n: usize, tag: &str) {
    for i in 0..n {
        side.store
            .append(space, events(&format!("{tag}-{i}")))
            .await
            .expect("append");
    }
}

/// Every epoch of the space, by id: parents and events (seqs are each store's own).
pub(crate) async fn epochs_of(side: &SyncSide, space: &SpaceId) -> BTreeMap<EpochId, Epoch> {
    let mut out = BTreeMap::new();
    let mut before = None;
    loop {
        let page = match side.store.recent_epochs(space, before, 1000).await {
            Ok(p) => p,
            Err(Error::NotFound { .. }) => return out,
            Err(e) => panic!("recent_epochs: {e}"),
        };
        let Some(last) = page.last() else { return out };
        before = Some(last.seq);
        for s in &page {
            let e = side
                .store
                .epoch(space, &s.id)
                .await
                .expect("epoch")
                .expect("a listed epoch is readable");
            out.insert(s.id, e);
        }
        if page.len() < 1000 {
            return out;
        }
    }
}

/// Ids, parents and events, without the seqs.
fn shape(epochs: &BTreeMap<EpochId, Epoch>) -> BTreeMap<EpochId, (Vec<EpochId>, Vec<Event>)> {
    epochs
        .iter()
        .map(|(id, e)| (*id, (e.parents.clone(), e.events.clone())))
        .collect()
}

fn ids(heads: &[Head]) -> Vec<EpochId> {
    heads.iter().map(|h| h.id).collect()
}

/// The side's head cache is exact and every epoch's parents are present.
pub(crate) async fn assert_consistent(side: &SyncSide, space: &SpaceId, ctx: &str) {
    let epochs = epochs_of(side, space).await;
    if epochs.is_empty() {
        return;
    }
    for e in epochs.values() {
        for p in &e.parents {
            assert!(
                epochs.contains_key(p),
                "{ctx}: {} holds epoch {} without its parent {p}",
                side.endpoint.label(),
                e.id
            );
        }
    }
    let computed = side.store.computed_heads(space).await.expect("computed");
    let cached = side.store.cached_heads(space).await.expect("cached");
    let heads = side.store.heads(space).await.expect("heads");
    assert_eq!(heads, computed, "{ctx}: heads are the anti-join's");
    assert_eq!(
        side.store.repair_heads(space).await.expect("repair"),
        RepairOutcome::Unchanged,
        "{ctx}: {} head cache (cached {cached:?}, computed {computed:?})",
        side.endpoint.label()
    );
}

/// Every cursor `dest` keeps for `src` is true: `src`'s epoch at its seq is its id, and every
/// epoch of `src` at or below it is in `dest`.
pub(crate) async fn assert_cursors_true(
    dest: &SyncSide,
    src: &SyncSide,
    space: &SpaceId,
    ctx: &str,
) {
    let src_id = src.store.store_id().await.expect("store id");
    let peers: Vec<SyncPeer> = dest.store.sync_peers(space).await.expect("peers");
    let held = epochs_of(dest, space).await;
    for p in peers.iter().filter(|p| p.cursor.peer == src_id) {
        let at = src
            .store
            .recent_epochs(space, Some(Seq(p.cursor.seq.0 + 1)), 1)
            .await
            .expect("source epoch at the cursor");
        assert_eq!(
            at.first().map(|s| (s.seq, s.id)),
            Some((p.cursor.seq, p.cursor.id)),
            "{ctx}: the cursor names the source's epoch at its seq"
        );
        let src_all = epochs_of(src, space).await;
        for e in src_all.values().filter(|e| e.seq <= p.cursor.seq) {
            assert!(
                held.contains_key(&e.id),
                "{ctx}: cursor at seq {} but the source's epoch {} (seq {}) is missing",
                p.cursor.seq.0,
                e.id,
                e.seq.0
            );
        }
    }
}

/// Both sides hold the same epochs and heads, and are consistent.
pub(crate) async fn assert_same(a: &SyncSide, b: &SyncSide, space: &SpaceId, ctx: &str) {
    assert_consistent(a, space, ctx).await;
    assert_consistent(b, space, ctx).await;
    let (ea, eb) = (epochs_of(a, space).await, epochs_of(b, space).await);
    assert_eq!(
        shape(&ea).keys().collect::<Vec<_>>(),
        shape(&eb).keys().collect::<Vec<_>>(),
        "{ctx}: both sides hold the same epoch ids"
    );
    assert_eq!(shape(&ea), shape(&eb), "{ctx}: same parents and events");
    let ha = a
        .store
        .heads(space)
        .await
        .map(|h| ids(&h))
        .unwrap_or_default();
    let hb = b
        .store
        .heads(space)
        .await
        .map(|h| ids(&h))
        .unwrap_or_default();
    assert_eq!(ha, hb, "{ctx}: same heads");
}

pub(crate) fn small() -> SyncOptions {
    SyncOptions {
        batch_epochs: 4,
        batch_bytes: 4 << 20,
        fetch_epochs: 3,
    }
}

pub(crate) fn sync(a: &SyncSide, b: &SyncSide, spaces: &[&SpaceId]) -> Sync {
    let mut s = Sync::new(a.endpoint.clone(), b.endpoint.clone()).options(small());
    for sp in spaces {
        s = s.space((*sp).clone());
    }
    s
}

/// R1: after a sync both ways both sides hold the union of their epochs — identical ids,
/// parents and events — with the same heads and exact head caches, in every space synced.
pub async fn r1_sync_leaves_both_sides_the_union(pair: &SyncPair) {
    let (a, b) = (pair.a().await, pair.b().await);
    let (s1, s2) = (random_space("r1-one"), random_space("r1-two"));
    append_n(&a, &s1, 20, "a").await;
    append_n(&a, &s2, 5, "a2").await;
    append_n(&b, &s1, 7, "b").await;
    let report = sync(&a, &b, &[&s1, &s2])
        .both_ways(true)
        .run()
        .await
        .expect("sync");
    assert_eq!(report.epochs(), 20 + 5 + 7, "{}: {report:#?}", pair.name);
    for s in [&s1, &s2] {
        assert_same(&a, &b, s, &format!("R1 {}", pair.name)).await;
        assert_cursors_true(&b, &a, s, "R1").await;
        assert_cursors_true(&a, &b, s, "R1").await;
    }
    assert_eq!(epochs_of(&a, &s1).await.len(), 27);
    assert_eq!(
        a.store.heads(&s1).await.unwrap().len(),
        2,
        "two roots' lines"
    );
    // One way only moves one way.
    let s3 = random_space("r1-three");
    append_n(&b, &s3, 3, "b3").await;
    let one = sync(&a, &b, &[&s3]).run().await.expect("one way");
    assert_eq!(one.spaces[0].path, SyncPath::Empty, "a has nothing of s3");
    assert!(
        epochs_of(&a, &s3).await.is_empty(),
        "a one-way sync never writes its sender"
    );
}

/// R2: a second sync with nothing new transfers no epoch and reads nothing past the cursor;
/// one new epoch goes by the cursor path alone.
pub async fn r2_a_second_sync_transfers_nothing(pair: &SyncPair) {
    let (a, b) = (pair.a().await, pair.b().await);
    let s = random_space("r2");
    append_n(&a, &s, 12, "a").await;
    append_n(&b, &s, 3, "b").await;
    let first = sync(&a, &b, &[&s])
        .both_ways(true)
        .run()
        .await
        .expect("first");
    assert_eq!(first.epochs(), 15);
    // The back direction learned the epochs it had just sent; a second round settles both
    // cursors, then nothing moves at all.
    sync(&a, &b, &[&s])
        .both_ways(true)
        .run()
        .await
        .expect("settle");
    let again = sync(&a, &b, &[&s])
        .both_ways(true)
        .run()
        .await
        .expect("again");
    for r in &again.spaces {
        assert_eq!(
            r.epochs + r.present,
            0,
            "R2 {}: nothing sent: {r:#?}",
            pair.name
        );
        assert_eq!(r.path, SyncPath::UpToDate, "R2 {}: {r:#?}", pair.name);
        assert_eq!(r.summaries, 0, "R2: no history read: {r:#?}");
        assert!(
            r.ids_checked <= 2,
            "R2: only the sender's heads checked: {r:#?}"
        );
    }
    append_n(&a, &s, 1, "later").await;
    let one = sync(&a, &b, &[&s]).run().await.expect("one more");
    assert_eq!(one.spaces[0].path, SyncPath::Cursor);
    assert_eq!((one.epochs(), one.spaces[0].batches), (1, 1));
    assert!(one.spaces[0].summaries <= 2, "{one:#?}");
    assert_same(&a, &b, &s, "R2").await;
}

/// A side whose connection is cut after `left` more calls: every call after fails as a lost
/// connection does.
#[derive(Debug)]
pub(crate) struct Cut {
    pub(crate) inner: Arc<dyn SyncEndpoint>,
    pub(crate) left: AtomicI64,
}

impl Cut {
    pub(crate) fn new(inner: Arc<dyn SyncEndpoint>, calls: i64) -> Self {
        Self {
            inner,
            left: AtomicI64::new(calls),
        }
    }

    fn tick(&self) -> Result<()> {
        if self.left.fetch_sub(1, Ordering::SeqCst) <= 0 {
            return Err(Error::unavailable("the test cut the connection"));
        }
        Ok(())
    }
}

#[async_trait]
impl SyncEndpoint for Cut {
    fn label(&self) -> String {
        self.inner.label()
    }
    async fn store_id(&self) -> Result<StoreId> {
        self.tick()?;
        self.inner.store_id().await
    }
    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
        self.tick()?;
        self.inner.list_spaces(after, limit).await
    }
    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        self.tick()?;
        self.inner.heads(space).await
    }
    async fn summaries(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>> {
        self.tick()?;
        self.inner.summaries(space, before, limit).await
    }
    async fn epochs(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<Epoch>> {
        self.tick()?;
        self.inner.epochs(space, ids).await
    }
    async fn missing(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<EpochId>> {
        self.tick()?;
        self.inner.missing(space, ids).await
    }
    async fn peers(&self, space: &SpaceId) -> Result<Vec<SyncPeer>> {
        self.tick()?;
        self.inner.peers(space).await
    }
    async fn import_batch(
        &self,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&SyncCursor>,
        at_us: i64,
    ) -> Result<Vec<ImportOutcome>> {
        self.tick()?;
        self.inner.import_batch(space, epochs, cursor, at_us).await
    }
}

/// A side whose answers are another's, under another store id (a store restored, replaced or
/// copied under the same identity), or whose `epochs` answer one epoch forged.
#[derive(Debug)]
struct Altered {
    inner: Arc<dyn SyncEndpoint>,
    id: Option<StoreId>,
    forge: Option<EpochId>,
}

#[async_trait]
impl SyncEndpoint for Altered {
    fn label(&self) -> String {
        format!("altered {}", self.inner.label())
    }
    async fn store_id(&self) -> Result<StoreId> {
        match &self.id {
            Some(id) => Ok(id.clone()),
            None => self.inner.store_id().await,
        }
    }
    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
        self.inner.list_spaces(after, limit).await
    }
    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        self.inner.heads(space).await
    }
    async fn summaries(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>> {
        self.inner.summaries(space, before, limit).await
    }
    async fn epochs(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<Epoch>> {
        let mut got = self.inner.epochs(space, ids).await?;
        for e in &mut got {
            if Some(e.id) == self.forge {
                e.events[0] = Event::new("sync.test", b"forged".to_vec());
            }
        }
        Ok(got)
    }
    async fn missing(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<EpochId>> {
        self.inner.missing(space, ids).await
    }
    async fn peers(&self, space: &SpaceId) -> Result<Vec<SyncPeer>> {
        self.inner.peers(space).await
    }
    async fn import_batch(
        &self,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&SyncCursor>,
        at_us: i64,
    ) -> Result<Vec<ImportOutcome>> {
        self.inner.import_batch(space, epochs, cursor, at_us).await
    }
}

/// R3: a sync cut at any call — on the sending or the receiving side — leaves both sides
/// consistent with true cursors, and the next sync completes.
pub async fn r3_an_interrupted_sync_leaves_both_consistent_and_resumes(pair: &SyncPair) {
    let (a, b) = (pair.a().await, pair.b().await);
    let s = random_space("r3");
    append_n(&b, &s, 4, "b0").await;
    let mut cuts = 0;
    for (round, calls) in [1i64, 2, 3, 4, 5, 6, 8, 11, 15, 19, 25]
        .into_iter()
        .enumerate()
    {
        append_n(&a, &s, 6, &format!("a{round}")).await;
        if round % 3 == 1 {
            append_n(&b, &s, 2, &format!("b{round}")).await;
        }
        let cut_receiver = round % 2 == 0;
        let (from, to): (Arc<dyn SyncEndpoint>, Arc<dyn SyncEndpoint>) = if cut_receiver {
            (
                a.endpoint.clone(),
                Arc::new(Cut::new(b.endpoint.clone(), calls)),
            )
        } else {
            (
                Arc::new(Cut::new(a.endpoint.clone(), calls)),
                b.endpoint.clone(),
            )
        };
        let outcome = Sync::new(from, to)
            .space(s.clone())
            .options(small())
            .run()
            .await;
        if outcome.is_err() {
            cuts += 1;
        }
        let ctx = format!("R3 {} round {round} (cut after {calls} calls)", pair.name);
        assert_consistent(&b, &s, &ctx).await;
        assert_cursors_true(&b, &a, &s, &ctx).await;
    }
    assert!(cuts >= 8, "R3: most rounds were cut ({cuts})");
    sync(&a, &b, &[&s])
        .both_ways(true)
        .run()
        .await
        .expect("the uncut sync");
    assert_same(&a, &b, &s, &format!("R3 {}", pair.name)).await;
}

/// R4: an epoch whose id does not recompute is refused with its id, and nothing of its batch
/// (nor after it) is imported; a batch whose epoch names a parent neither side has imports
/// nothing.
pub async fn r4_a_forged_epoch_is_refused_with_nothing_after_it(pair: &SyncPair) {
    let (a, b) = (pair.a().await, pair.b().await);
    let s = random_space("r4");
    append_n(&a, &s, 10, "a").await;
    let ids: Vec<EpochId> = {
        let mut v: Vec<Epoch> = epochs_of(&a, &s).await.into_values().collect();
        v.sort_by_key(|e| e.seq);
        v.into_iter().map(|e| e.id).collect()
    };
    let forged = ids[5];
    let from: Arc<dyn SyncEndpoint> = Arc::new(Altered {
        inner: a.endpoint.clone(),
        id: None,
        forge: Some(forged),
    });
    let err = Sync::new(from, b.endpoint.clone())
        .space(s.clone())
        .options(small())
        .run()
        .await
        .expect_err("a forged epoch fails the sync");
    match &err {
        Error::EpochRefused { epoch, error, .. } => {
            assert_eq!(*epoch, forged, "R4 {}: refused with its id", pair.name);
            assert!(
                matches!(
                    **error,
                    Error::InvalidBatchItem { .. } | Error::HashMismatch { .. }
                ),
                "R4: the cause is the mismatch: {error:?}"
            );
        }
        other => panic!("R4 {}: expected EpochRefused, got {other:?}", pair.name),
    }
    let held = epochs_of(&b, &s).await;
    // Batches of 4: the first (epochs 1–4) committed; the second (5–8) held the forgery.
    assert_eq!(
        held.keys().copied().collect::<BTreeSet<_>>(),
        ids[..4].iter().copied().collect::<BTreeSet<_>>(),
        "R4 {}: only the batch before the forged one",
        pair.name
    );
    assert_consistent(&b, &s, "R4").await;
    assert_cursors_true(&b, &a, &s, "R4").await;

    // An orphan: a parent that is in neither store.
    let other = random_space("r4-orphan");
    append_n(&a, &other, 2, "o").await;
    let mut chain: Vec<Epoch> = epochs_of(&a, &other).await.into_values().collect();
    chain.sort_by_key(|e| e.seq);
    let before = b.store.sync_peers(&s).await.expect("peers");
    let orphan = chain[1].to_foreign(); // its parent chain[0] is not in b
    let refused = b
        .endpoint
        .import_batch(&other, vec![orphan], None, 1)
        .await
        .expect_err("an orphan is refused");
    assert!(
        matches!(&refused, Error::InvalidBatchItem { index: 0, error } if matches!(**error, Error::UnknownParent { .. })),
        "R4: {refused:?}"
    );
    assert!(
        epochs_of(&b, &other).await.is_empty(),
        "R4: nothing imported"
    );
    assert_eq!(b.store.sync_peers(&s).await.expect("peers"), before);

    // The honest sender completes it.
    sync(&a, &b, &[&s]).run().await.expect("honest sync");
    assert_same(&a, &b, &s, "R4 after").await;
}

/// R5: forks made on each side while apart end as the same heads on both, and the next
/// append on either side merges them (and syncs back as one head).
pub async fn r5_forks_made_apart_converge_and_the_next_append_merges(pair: &SyncPair) {
    let (a, b) = (pair.a().await, pair.b().await);
    let s = random_space("r5");
    append_n(&a, &s, 5, "base").await;
    sync(&a, &b, &[&s])
        .both_ways(true)
        .run()
        .await
        .expect("base");
    append_n(&a, &s, 2, "a-apart").await;
    append_n(&b, &s, 3, "b-apart").await;
    sync(&a, &b, &[&s])
        .both_ways(true)
        .run()
        .await
        .expect("converge");
    assert_same(&a, &b, &s, &format!("R5 {}", pair.name)).await;
    let heads = a.store.heads(&s).await.unwrap();
    assert_eq!(heads.len(), 2, "R5: the two lines are both heads");
    let merged = b.store.append(&s, events("merge")).await.expect("merge");
    let mut parents = ids(&heads);
    parents.sort();
    assert_eq!(
        merged.parents, parents,
        "R5: the next append merges both heads"
    );
    sync(&a, &b, &[&s])
        .both_ways(true)
        .run()
        .await
        .expect("merge back");
    assert_same(&a, &b, &s, "R5 merged").await;
    assert_eq!(ids(&a.store.heads(&s).await.unwrap()), vec![merged.id]);
}

/// R6: a sender replaced under the same store id (restored from a backup, a copied file) holds
/// another epoch at the cursor's seq: the cursor fails its digest check, the sync negotiates
/// and both sides end with the union.
pub async fn r6_a_replaced_sender_fails_the_cursor_check_and_is_negotiated(pair: &SyncPair) {
    let (a, b, c) = (pair.a().await, pair.b().await, pair.a().await);
    let s = random_space("r6");
    append_n(&a, &s, 6, "a").await;
    sync(&a, &b, &[&s]).run().await.expect("first");
    append_n(&c, &s, 8, "c").await;
    let impostor: Arc<dyn SyncEndpoint> = Arc::new(Altered {
        inner: c.endpoint.clone(),
        id: Some(a.store.store_id().await.unwrap()),
        forge: None,
    });
    let report = Sync::new(impostor, b.endpoint.clone())
        .space(s.clone())
        .options(small())
        .run()
        .await
        .expect("negotiated");
    let r = &report.spaces[0];
    assert!(
        r.cursor_reset,
        "R6 {}: the cursor failed its check: {r:#?}",
        pair.name
    );
    assert_eq!((r.path, r.epochs), (SyncPath::Negotiated, 8), "{r:#?}");
    assert_consistent(&b, &s, "R6").await;
    let held = epochs_of(&b, &s).await;
    for e in epochs_of(&c, &s)
        .await
        .keys()
        .chain(epochs_of(&a, &s).await.keys())
    {
        assert!(held.contains_key(e), "R6: b holds the union");
    }
}

/// R6: a sender restored from a backup (or cloned) under the same store id, whose new work sits
/// *below* the receiver's cursor while the epoch at the cursor's seq is the same: the cursor's
/// digest holds, yet the receiver must not be told it is up to date — it lacks a head of the
/// sender, so the sync negotiates and sends it.
pub async fn r6_a_restored_sender_with_new_work_below_the_cursor_is_negotiated(pair: &SyncPair) {
    let (a, z, d, c) = (
        pair.a().await,
        pair.a().await,
        pair.b().await,
        pair.a().await,
    );
    let s = random_space("r6-restored");
    append_n(&a, &s, 3, "e").await;
    sync(&a, &z, &[&s]).run().await.expect("a to z");
    let g = z.store.append(&s, events("g")).await.expect("g");
    // The backup of `a` is its first three epochs; `a` then goes on: W, then G from z.
    let mut base: Vec<Epoch> = epochs_of(&a, &s).await.into_values().collect();
    base.sort_by_key(|e| e.seq);
    append_n(&a, &s, 1, "w").await;
    sync(&z, &a, &[&s]).run().await.expect("z to a");
    sync(&a, &d, &[&s]).run().await.expect("a to d");
    // `c` is `a` restored from the backup, with new work H, then G again from z: G lands at the
    // seq the cursor names.
    for e in &base {
        c.store.import(e.to_foreign()).await.expect("restore");
    }
    let h = c.store.append(&s, events("h")).await.expect("h");
    sync(&z, &c, &[&s]).run().await.expect("z to c");
    let cursor = d.store.sync_peers(&s).await.expect("peers")[0]
        .cursor
        .clone();
    let at = c
        .store
        .recent_epochs(&s, Some(Seq(cursor.seq.0 + 1)), 1)
        .await
        .expect("at");
    assert_eq!(
        (at[0].seq, at[0].id),
        (cursor.seq, g.id),
        "the digest holds on the restored store"
    );
    let restored: Arc<dyn SyncEndpoint> = Arc::new(Altered {
        inner: c.endpoint.clone(),
        id: Some(a.store.store_id().await.unwrap()),
        forge: None,
    });
    let report = Sync::new(restored, d.endpoint.clone())
        .space(s.clone())
        .run()
        .await
        .expect("sync");
    let r = &report.spaces[0];
    assert!(
        r.cursor_reset,
        "R6 {}: the cursor did not hold: {r:#?}",
        pair.name
    );
    assert_eq!((r.path, r.epochs), (SyncPath::Negotiated, 1), "{r:#?}");
    assert!(epochs_of(&d, &s).await.contains_key(&h.id), "R6: H arrived");
    assert_consistent(&d, &s, "R6 restored").await;
}

/// R6: without a usable cursor, what a sync reads grows with the difference, not the history:
/// 400 shared epochs and 3 new ones cost a page of summaries and one `need` call.
pub async fn r6_negotiation_reads_in_proportion_to_the_difference(pair: &SyncPair) {
    let (a, b) = (pair.a().await, pair.b().await);
    let s = random_space("r6-cost");
    append_n(&a, &s, 400, "shared").await;
    let first = Sync::new(a.endpoint.clone(), b.endpoint.clone())
        .space(s.clone())
        .run()
        .await
        .expect("first");
    assert_eq!(first.spaces[0].path, SyncPath::Initial);
    append_n(&a, &s, 3, "new").await;
    // Under a fresh identity the receiver has no cursor for it: negotiation.
    let renamed: Arc<dyn SyncEndpoint> = Arc::new(Altered {
        inner: a.endpoint.clone(),
        id: Some(StoreId::random()),
        forge: None,
    });
    let report = Sync::new(renamed, b.endpoint.clone())
        .space(s.clone())
        .run()
        .await
        .expect("negotiated");
    let r = &report.spaces[0];
    assert_eq!((r.path, r.epochs), (SyncPath::Negotiated, 3), "{r:#?}");
    assert!(
        r.summaries <= 16 && r.ids_checked <= 1 + 16,
        "R6 {}: read {} summaries and checked {} ids for 3 new epochs over 400",
        pair.name,
        r.summaries,
        r.ids_checked
    );
    assert_same(&a, &b, &s, "R6 cost").await;
}

/// Ops of the random test.
#[derive(Clone, Debug)]
enum Op {
    AppendA(u8),
    AppendB(u8),
    SyncAB,
    SyncBA,
    SyncBoth,
    CutAB(u8),
}

fn op_strategy() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (0u8..2).prop_map(Op::AppendA),
        3 => (0u8..2).prop_map(Op::AppendB),
        1 => Just(Op::SyncAB),
        1 => Just(Op::SyncBA),
        1 => Just(Op::SyncBoth),
        1 => (1u8..12).prop_map(Op::CutAB),
    ]
}

/// Random DAGs appended on both sides, with partitions (no sync), cut syncs and syncs in
/// either direction in between: after each one-way sync the receiver holds everything the
/// sender held; at the end a sync both ways leaves both with the union of every epoch ever
/// appended, the same heads and exact caches.
pub async fn r_random_dags_and_partitions_converge_to_the_union(pair: &SyncPair) {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestError, TestRunner};
    let (a, b) = (pair.a().await, pair.b().await);
    let config = Config {
        cases: crate::proptest_cases().min(16),
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = prop::collection::vec(op_strategy(), 1..=14);
    let handle = tokio::runtime::Handle::current();
    let result = tokio::task::block_in_place(|| {
        runner.run(&strategy, |ops| {
            handle.block_on(random_case(&a, &b, &ops));
            Ok(())
        })
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, ops)) => panic!("{}: {reason}\n{ops:#?}", pair.name),
        Err(TestError::Abort(reason)) => panic!("{}: aborted: {reason}", pair.name),
    }
}

async fn random_case(a: &SyncSide, b: &SyncSide, ops: &[Op]) {
    let spaces = [random_space("rp-0"), random_space("rp-1")];
    let refs: Vec<&SpaceId> = spaces.iter().collect();
    let mut made: BTreeSet<EpochId> = BTreeSet::new();
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::AppendA(k) | Op::AppendB(k) => {
                let side = if matches!(op, Op::AppendA(_)) { a } else { b };
                let e = side
                    .store
                    .append(&spaces[*k as usize], events(&format!("{i}")))
                    .await
                    .expect("append");
                made.insert(e.id);
            }
            Op::SyncAB | Op::SyncBA => {
                let (from, to) = if matches!(op, Op::SyncAB) {
                    (a, b)
                } else {
                    (b, a)
                };
                sync(from, to, &refs).run().await.expect("sync");
                for s in &spaces {
                    let held = epochs_of(to, s).await;
                    for id in epochs_of(from, s).await.keys() {
                        assert!(held.contains_key(id), "step {i}: the receiver lacks {id}");
                    }
                    assert_consistent(to, s, &format!("step {i}")).await;
                }
            }
            Op::SyncBoth => {
                sync(a, b, &refs)
                    .both_ways(true)
                    .run()
                    .await
                    .expect("sync both");
                for s in &spaces {
                    assert_same(a, b, s, &format!("step {i}")).await;
                }
            }
            Op::CutAB(calls) => {
                let to: Arc<dyn SyncEndpoint> =
                    Arc::new(Cut::new(b.endpoint.clone(), i64::from(*calls)));
                let _ = Sync::new(a.endpoint.clone(), to)
                    .space(spaces[0].clone())
                    .space(spaces[1].clone())
                    .options(small())
                    .run()
                    .await;
                for s in &spaces {
                    assert_consistent(b, s, &format!("step {i} (cut)")).await;
                    assert_cursors_true(b, a, s, &format!("step {i} (cut)")).await;
                }
            }
        }
    }
    let report: SyncReport = sync(a, b, &refs)
        .both_ways(true)
        .run()
        .await
        .expect("final sync");
    let _ = report;
    let mut union = BTreeSet::new();
    for s in &spaces {
        assert_same(a, b, s, "final").await;
        union.extend(epochs_of(a, s).await.into_keys());
    }
    assert_eq!(
        union, made,
        "the union of every epoch appended on either side"
    );
    let _ = Duration::ZERO;
}

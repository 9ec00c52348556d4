//! The in-memory reference backend: the model the conformance suite checks real stores against.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::encoding::{epoch_id, verify_epoch};
use crate::error::{Error, Result};
use crate::ids::{EpochId, EventId};
use crate::seq::{next_seq, HeadProbe};
use crate::store::{EpochDiagnostics, EpochStore};
use crate::sync::types::{
    batch_item_error, check_import_batch, cursor_epoch_missing, epoch_bytes, StoreId, SyncCursor,
    SyncPeer,
};
use crate::types::{
    Appended, Epoch, EpochSummary, Event, FeedCursor, FeedEvent, FeedPage, ForeignEpoch, Head,
    ImportOutcome, RepairOutcome, Seq, SpaceId,
};

#[derive(Debug, Default)]
struct Space {
    /// Epochs by seq (seqs are unique per space).
    epochs: BTreeMap<Seq, Epoch>,
    by_id: HashMap<EpochId, Seq>,
    /// Epochs named as a parent by some other epoch.
    has_child: BTreeSet<EpochId>,
    /// The head cache: id → seq.
    cache: BTreeMap<EpochId, Seq>,
    /// Sync cursors kept for sending stores.
    peers: BTreeMap<StoreId, SyncPeer>,
}

impl Space {
    fn next(&self) -> Seq {
        next_seq(self.epochs.keys().next_back().copied())
    }

    fn computed_heads(&self) -> Vec<Head> {
        let mut heads: Vec<Head> = self
            .epochs
            .values()
            .filter(|e| !self.has_child.contains(&e.id))
            .map(|e| Head {
                id: e.id,
                seq: e.seq,
            })
            .collect();
        heads.sort();
        heads
    }

    fn cached(&self) -> Vec<Head> {
        self.cache
            .iter()
            .map(|(id, seq)| Head { id: *id, seq: *seq })
            .collect()
    }

    /// Heads as the append path finds them: the cache when current, else the anti-join.
    fn current_heads(&self) -> Vec<Head> {
        let newest = self.epochs.values().next_back();
        let probe = HeadProbe {
            max_seq: newest.map(|e| e.seq),
            max_id: newest.map(|e| e.id),
            cached: self.cached(),
        };
        if probe.cache_is_current() {
            self.cached()
        } else {
            self.computed_heads()
        }
    }

    fn insert(&mut self, space: &SpaceId, parents: Vec<EpochId>, events: Vec<Event>) -> Epoch {
        let ids: Vec<EventId> = events.iter().map(Event::id).collect();
        let id = epoch_id(space, &parents, &ids);
        let seq = self.next();
        let epoch = Epoch {
            space: space.clone(),
            id,
            seq,
            parents,
            events,
        };
        self.has_child.extend(epoch.parents.iter().copied());
        self.by_id.insert(id, seq);
        self.epochs.insert(seq, epoch.clone());
        epoch
    }
}

/// The in-memory reference backend.
///
/// It follows the same algorithm as the SQL backends (seq rule, cache check, anti-join
/// fallback, cache write), so the conformance suite can compare heads, cache rows and seqs of
/// a real store with it after every step. It is also a convenient store for unit tests of code
/// that takes an `Arc<dyn EpochStore>`.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    spaces: Arc<Mutex<BTreeMap<SpaceId, Space>>>,
    id: StoreId,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self {
            spaces: Arc::default(),
            id: StoreId::random(),
        }
    }
}

impl MemoryStore {
    /// An empty store (with a fresh [`StoreId`]).
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<SpaceId, Space>> {
        // A panic while holding the lock cannot leave a half-applied write: every mutation
        // below is computed first and applied without fallible steps.
        self.spaces.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Test support (feature `testkit`): appends an epoch the way a writer that predates the
    /// head cache does —
    /// same lock and seq rule, parents from the anti-join (or `parents` when given, to make a
    /// fork), and the cache left untouched.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an invalid batch, [`Error::UnknownParent`] for a parent not
    /// in the space.
    #[cfg(any(test, feature = "testkit"))]
    pub fn legacy_append(
        &self,
        space: &SpaceId,
        parents: Option<Vec<EpochId>>,
        events: Vec<Event>,
    ) -> Result<Appended> {
        Event::validate_batch(&events)?;
        let mut spaces = self.lock();
        let sp = spaces.entry(space.clone()).or_default();
        let mut parents = match parents {
            Some(p) => p,
            None => sp.computed_heads().into_iter().map(|h| h.id).collect(),
        };
        parents.sort();
        parents.dedup();
        if let Some(missing) = parents.iter().find(|p| !sp.by_id.contains_key(p)) {
            return Err(Error::UnknownParent { parent: *missing });
        }
        let e = sp.insert(space, parents, events);
        Ok(Appended {
            id: e.id,
            seq: e.seq,
            parents: e.parents,
        })
    }
}

#[async_trait]
impl EpochStore for MemoryStore {
    async fn append(&self, space: &SpaceId, events: Vec<Event>) -> Result<Appended> {
        Event::validate_batch(&events)?;
        let mut spaces = self.lock();
        let sp = spaces.entry(space.clone()).or_default();
        let parents: Vec<EpochId> = sp.current_heads().into_iter().map(|h| h.id).collect();
        let e = sp.insert(space, parents, events);
        sp.cache.clear();
        sp.cache.insert(e.id, e.seq);
        Ok(Appended {
            id: e.id,
            seq: e.seq,
            parents: e.parents,
        })
    }

    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let spaces = self.lock();
        let sp = spaces
            .get(space)
            .filter(|s| !s.epochs.is_empty())
            .ok_or_else(|| Error::space_not_found(space))?;
        Ok(sp.current_heads())
    }

    async fn repair_heads(&self, space: &SpaceId) -> Result<RepairOutcome> {
        let mut spaces = self.lock();
        let sp = spaces
            .get_mut(space)
            .filter(|s| !s.epochs.is_empty())
            .ok_or_else(|| Error::space_not_found(space))?;
        let before = sp.cached();
        let after = sp.computed_heads();
        if before == after {
            return Ok(RepairOutcome::Unchanged);
        }
        sp.cache = after.iter().map(|h| (h.id, h.seq)).collect();
        Ok(RepairOutcome::Rewritten { before, after })
    }

    async fn import(&self, epoch: ForeignEpoch) -> Result<ImportOutcome> {
        verify_epoch(&epoch)?;
        let mut spaces = self.lock();
        let sp = spaces.entry(epoch.space.clone()).or_default();
        if let Some(seq) = sp.by_id.get(&epoch.id) {
            return Ok(ImportOutcome::AlreadyPresent(*seq));
        }
        if let Some(missing) = epoch.parents.iter().find(|p| !sp.by_id.contains_key(p)) {
            return Err(Error::UnknownParent { parent: *missing });
        }
        let heads_before = sp.current_heads();
        let e = sp.insert(&epoch.space, epoch.parents, epoch.events);
        let mut heads: BTreeMap<EpochId, Seq> =
            heads_before.into_iter().map(|h| (h.id, h.seq)).collect();
        for p in &e.parents {
            heads.remove(p);
        }
        heads.insert(e.id, e.seq);
        sp.cache = heads;
        Ok(ImportOutcome::Imported(e.seq))
    }

    async fn events_since(
        &self,
        space: &SpaceId,
        cursor: Option<&FeedCursor>,
        limit: usize,
    ) -> Result<FeedPage> {
        let after = FeedCursor::start_after(space, cursor, limit)?;
        let spaces = self.lock();
        let sp = spaces
            .get(space)
            .filter(|s| !s.epochs.is_empty())
            .ok_or_else(|| Error::space_not_found(space))?;
        let mut events = Vec::new();
        let mut last = after;
        for (seq, epoch) in sp.epochs.range(Seq(after.0 + 1)..) {
            if !events.is_empty() && events.len() + epoch.events.len() > limit {
                break;
            }
            for (i, ev) in epoch.events.iter().enumerate() {
                events.push(FeedEvent {
                    seq: *seq,
                    epoch: epoch.id,
                    epoch_seq: i as u32,
                    event_id: ev.id(),
                    event: ev.clone(),
                });
            }
            last = *seq;
        }
        Ok(FeedPage {
            events,
            next: FeedCursor::new(space, last),
        })
    }

    async fn epoch(&self, space: &SpaceId, id: &EpochId) -> Result<Option<Epoch>> {
        let spaces = self.lock();
        Ok(spaces
            .get(space)
            .and_then(|sp| sp.by_id.get(id).and_then(|seq| sp.epochs.get(seq)))
            .cloned())
    }

    async fn store_id(&self) -> Result<StoreId> {
        Ok(self.id.clone())
    }

    async fn import_batch(
        &self,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&SyncCursor>,
        at_us: i64,
    ) -> Result<Vec<ImportOutcome>> {
        check_import_batch(space, &epochs, cursor)?;
        let mut spaces = self.lock();
        let sp = spaces.entry(space.clone()).or_default();
        let (outcomes, imported, bytes) = Self::import_batch_locked(sp, space, epochs, cursor)?;
        if let Some(c) = cursor {
            let peer = sp.peers.entry(c.peer.clone()).or_insert_with(|| SyncPeer {
                cursor: c.clone(),
                epochs: 0,
                bytes: 0,
                updated_at_us: at_us,
            });
            peer.cursor = c.clone();
            peer.epochs += imported;
            peer.bytes += bytes;
            peer.updated_at_us = at_us;
        }
        Ok(outcomes)
    }

    async fn sync_peers(&self, space: &SpaceId) -> Result<Vec<SyncPeer>> {
        Ok(self
            .lock()
            .get(space)
            .map(|sp| sp.peers.values().cloned().collect())
            .unwrap_or_default())
    }

    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
        if limit == 0 {
            return Err(Error::invalid("page limit", "must be at least 1"));
        }
        let spaces = self.lock();
        Ok(spaces
            .iter()
            .filter(|(id, sp)| !sp.epochs.is_empty() && after.is_none_or(|a| *id > a))
            .take(limit)
            .map(|(id, _)| id.clone())
            .collect())
    }
}

impl MemoryStore {
    /// The batch import's decisions under the lock: every check first, then the writes,
    /// which cannot fail, so a refused batch leaves the space as it was.
    fn import_batch_locked(
        sp: &mut Space,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&SyncCursor>,
    ) -> Result<(Vec<ImportOutcome>, u64, u64)> {
        let mut known: HashSet<EpochId> = HashSet::new();
        for (index, epoch) in epochs.iter().enumerate() {
            if sp.by_id.contains_key(&epoch.id) || known.contains(&epoch.id) {
                continue;
            }
            let unknown = epoch
                .parents
                .iter()
                .find(|p| !sp.by_id.contains_key(p) && !known.contains(p));
            if let Some(parent) = unknown {
                return Err(batch_item_error(
                    index,
                    Error::UnknownParent { parent: *parent },
                ));
            }
            known.insert(epoch.id);
        }
        if let Some(c) = cursor {
            if !sp.by_id.contains_key(&c.id) && !known.contains(&c.id) {
                return Err(cursor_epoch_missing(c));
            }
        }
        let (mut imported, mut bytes) = (0, 0);
        let mut outcomes = Vec::with_capacity(epochs.len());
        for epoch in epochs {
            if let Some(seq) = sp.by_id.get(&epoch.id) {
                outcomes.push(ImportOutcome::AlreadyPresent(*seq));
                continue;
            }
            imported += 1;
            bytes += epoch_bytes(&epoch);
            let mut heads: BTreeMap<EpochId, Seq> = sp
                .current_heads()
                .into_iter()
                .map(|h| (h.id, h.seq))
                .collect();
            let e = sp.insert(space, epoch.parents, epoch.events);
            for p in &e.parents {
                heads.remove(p);
            }
            heads.insert(e.id, e.seq);
            sp.cache = heads;
            outcomes.push(ImportOutcome::Imported(e.seq));
        }
        Ok((outcomes, imported, bytes))
    }
}

#[async_trait]
impl EpochDiagnostics for MemoryStore {
    async fn cached_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        Ok(self
            .lock()
            .get(space)
            .map(Space::cached)
            .unwrap_or_default())
    }

    async fn computed_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        Ok(self
            .lock()
            .get(space)
            .map(Space::computed_heads)
            .unwrap_or_default())
    }

    async fn next_seq(&self, space: &SpaceId) -> Result<Seq> {
        Ok(self.lock().get(space).map_or(Seq::FIRST, Space::next))
    }

    async fn recent_epochs(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>> {
        EpochSummary::check_limit(limit)?;
        let spaces = self.lock();
        let sp = spaces
            .get(space)
            .filter(|s| !s.epochs.is_empty())
            .ok_or_else(|| Error::space_not_found(space))?;
        let below = before.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(sp
            .epochs
            .range((Bound::Unbounded, below))
            .rev()
            .take(limit)
            .map(|(seq, e)| EpochSummary {
                id: e.id,
                seq: *seq,
                parents: e.parents.clone(),
                events: e.events.len() as u64,
            })
            .collect())
    }

    fn statements_executed(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(tag: &str) -> Vec<Event> {
        vec![Event::new("test.event", tag.as_bytes().to_vec())]
    }

    /// Deletes the space's newest epoch by hand, as an operator's `DELETE` would: the log
    /// forgets it, the cache row stays.
    fn delete_newest_by_hand(store: &MemoryStore, space: &SpaceId) {
        let mut spaces = store.lock();
        let sp = spaces.get_mut(space).unwrap();
        let (_, gone) = sp.epochs.pop_last().unwrap();
        sp.by_id.remove(&gone.id);
        sp.has_child = sp
            .epochs
            .values()
            .flat_map(|e| e.parents.iter().copied())
            .collect();
    }

    #[tokio::test]
    async fn a_cached_head_deleted_by_hand_whose_seq_was_reused_is_not_trusted() {
        let store = MemoryStore::new();
        let space = SpaceId::new(b"phantom".to_vec()).unwrap();
        let a = store.append(&space, ev("a")).await.unwrap();
        let b = store.append(&space, ev("b")).await.unwrap();
        delete_newest_by_hand(&store, &space);
        // A writer that never touches the cache takes the freed seq: `max(cached seq) + 1 ==
        // next` holds again, while the cached id names nothing.
        let c = store.legacy_append(&space, None, ev("c")).unwrap();
        assert_eq!((c.seq, c.parents.clone()), (b.seq, vec![a.id]));

        let c_head = Head {
            id: c.id,
            seq: c.seq,
        };
        assert_eq!(
            store.heads(&space).await.unwrap(),
            vec![c_head],
            "no phantom"
        );
        let d = store.append(&space, ev("d")).await.unwrap();
        assert_eq!(d.parents, vec![c.id]);
    }
}

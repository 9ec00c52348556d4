//! One side of a sync as the driver sees it ([`SyncEndpoint`]), and that side for a store
//! this process opened ([`LocalEndpoint`]). `cairn serve`'s HTTP client is the other
//! implementation (`cairn-server`'s `sync` module).

use std::fmt::{self, Debug};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::ids::EpochId;
use crate::store::EpochDiagnostics;
use crate::sync::types::{StoreId, SyncCursor, SyncPeer};
use crate::types::{Epoch, EpochSummary, ForeignEpoch, Head, ImportOutcome, Seq, SpaceId};

/// What the sync driver asks of each side: a source answers the reads, a destination the
/// `missing` check and the batch import. Every method maps to one store call (one HTTP request
/// for `cairn serve`), so a sync's traffic is what the driver asks for.
#[async_trait]
pub trait SyncEndpoint: Send + Sync + Debug {
    /// The side as a report names it (a URL without its secrets).
    fn label(&self) -> String;

    /// The store's identity ([`crate::EpochStore::store_id`]).
    async fn store_id(&self) -> Result<StoreId>;

    /// Non-reserved space ids in byte order after `after`, at most `limit`.
    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>>;

    /// The space's heads; empty when the space has no epoch.
    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>>;

    /// The space's epochs with `seq < before` (all when `None`), newest first, at most `limit`
    /// (1..=[`crate::MAX_RECENT_EPOCHS`]), without events; empty when the space has none.
    async fn summaries(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>>;

    /// The epochs `ids` with their events, in the order given.
    ///
    /// # Errors
    /// [`Error::NotFound`] when one of them is not in the space.
    async fn epochs(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<Epoch>>;

    /// Which of `ids` the space lacks ([`crate::EpochStore::missing`]).
    async fn missing(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<EpochId>>;

    /// The cursors the side keeps for `space` ([`crate::EpochStore::sync_peers`]).
    async fn peers(&self, space: &SpaceId) -> Result<Vec<SyncPeer>>;

    /// [`crate::EpochStore::import_batch`].
    async fn import_batch(
        &self,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&SyncCursor>,
        at_us: i64,
    ) -> Result<Vec<ImportOutcome>>;

    /// Waits until `space` may hold an epoch with a seq above `seen` (its newest seq when the
    /// caller last looked; `None` for a space it has not seen), or until `timeout` passed.
    /// Returns early on a change; a spurious return is allowed. The default polls the heads
    /// every 250 ms; `cairn serve` answers from its own wake-up.
    async fn wait_change(
        &self,
        space: &SpaceId,
        seen: Option<Seq>,
        timeout: Duration,
    ) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let newest = self.heads(space).await?.iter().map(|h| h.seq).max();
            if newest > seen {
                return Ok(());
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(());
            }
            tokio::time::sleep((deadline - now).min(Duration::from_millis(250))).await;
        }
    }
}

/// A store this process opened, as a side of a sync.
#[derive(Clone)]
pub struct LocalEndpoint {
    store: Arc<dyn EpochDiagnostics>,
    label: String,
    /// What must live as long as the side (the handle that keeps the store open).
    keep: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl fmt::Debug for LocalEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalEndpoint")
            .field("store", &self.store)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl LocalEndpoint {
    /// `store` under the name `label` (a URL without its secrets, say).
    pub fn new(store: Arc<dyn EpochDiagnostics>, label: impl Into<String>) -> Self {
        Self {
            store,
            label: label.into(),
            keep: None,
        }
    }

    /// Keeps `keep` (the handle that keeps the store open, say) alive as long as the side.
    #[must_use]
    pub fn keeping(mut self, keep: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        self.keep = Some(keep);
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn EpochDiagnostics> {
        &self.store
    }
}

/// `Ok(empty)` for a space the store does not have.
fn or_empty<T>(r: Result<Vec<T>>) -> Result<Vec<T>> {
    match r {
        Err(Error::NotFound { .. }) => Ok(Vec::new()),
        other => other,
    }
}

#[async_trait]
impl SyncEndpoint for LocalEndpoint {
    fn label(&self) -> String {
        self.label.clone()
    }

    async fn store_id(&self) -> Result<StoreId> {
        self.store.store_id().await
    }

    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
        // A full page means more may follow: reserved spaces left out are made up from the
        // next pages, so a short answer means the end (as the sync's listing reads it).
        let mut after = after.cloned();
        let mut kept = Vec::new();
        loop {
            let page = self.store.list_spaces(after.as_ref(), limit).await?;
            let full = page.len() == limit;
            after = page.last().cloned();
            kept.extend(page.into_iter().filter(|s| !s.is_reserved()));
            if kept.len() >= limit || !full {
                kept.truncate(limit);
                return Ok(kept);
            }
        }
    }

    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        or_empty(self.store.heads(space).await)
    }

    async fn summaries(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>> {
        or_empty(self.store.recent_epochs(space, before, limit).await)
    }

    async fn epochs(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<Epoch>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match self.store.epoch(space, id).await? {
                Some(e) => out.push(e),
                None => {
                    return Err(Error::NotFound {
                        what: format!("epoch {id}"),
                    })
                }
            }
        }
        Ok(out)
    }

    async fn missing(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<EpochId>> {
        self.store.missing(space, ids).await
    }

    async fn peers(&self, space: &SpaceId) -> Result<Vec<SyncPeer>> {
        self.store.sync_peers(space).await
    }

    async fn import_batch(
        &self,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&SyncCursor>,
        at_us: i64,
    ) -> Result<Vec<ImportOutcome>> {
        self.store.import_batch(space, epochs, cursor, at_us).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{LocalEndpoint, SyncEndpoint};
    use crate::{EpochStore, Event, MemoryStore, SpaceId};

    /// A page that held a reserved space is made up from the next page, so a sync listing all
    /// spaces (which stops at a short page) skips none.
    #[tokio::test]
    async fn a_page_short_of_reserved_spaces_is_filled() {
        let store = MemoryStore::new();
        let reserved = SpaceId::from_stored(b"\0cairn/marker".to_vec()).unwrap();
        for s in [
            reserved,
            SpaceId::new("a").unwrap(),
            SpaceId::new("b").unwrap(),
            SpaceId::new("c").unwrap(),
        ] {
            store.append(&s, vec![Event::new("t", "x")]).await.unwrap();
        }
        let side = LocalEndpoint::new(Arc::new(store), "m");
        let names = |v: Vec<SpaceId>| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(names(side.list_spaces(None, 2).await.unwrap()), ["a", "b"]);
        let b = SpaceId::new("b").unwrap();
        assert_eq!(names(side.list_spaces(Some(&b), 2).await.unwrap()), ["c"]);
    }
}

//! The epoch-log traits every backend implements.

use std::fmt::Debug;

use async_trait::async_trait;

use crate::error::Result;
use crate::ids::EpochId;
use crate::sync::types::{check_missing_ids, StoreId, SyncCursor, SyncPeer};
use crate::types::{
    Appended, Epoch, EpochSummary, Event, FeedCursor, FeedPage, ForeignEpoch, Head, ImportOutcome,
    RepairOutcome, Seq, SpaceId,
};

/// A store of per-space epoch DAGs with a maintained, self-validating head cache.
///
/// Object safe: hold it as `Arc<dyn EpochStore>`. The conformance suite (`cairn-conformance`)
/// is the executable form of the contracts below; a backend is correct when it passes it.
#[async_trait]
pub trait EpochStore: Send + Sync + Debug + 'static {
    /// Appends one epoch holding `events` to `space` (creating the space on its first epoch).
    ///
    /// # Contract
    /// - Writers of one space are serialized; the epoch gets `seq = MAX(seq) + 1` (first seq 1),
    ///   so seqs are unique and strictly increase in commit order.
    /// - Its parents are the space's heads at append time, sorted by id bytes: taken from the
    ///   head cache when [`crate::cache_is_current`] holds, else from the anti-join over the
    ///   whole history (once).
    /// - After commit the new epoch is the space's only head and the cache holds exactly one
    ///   row for the space: the new epoch.
    /// - With a current cache the append costs a fixed number of statements, independent of
    ///   the history's length.
    /// - Atomic: on error nothing was written.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for an empty or oversized batch;
    /// [`crate::Error::Retryable`] when the store stayed busy past its timeout.
    async fn append(&self, space: &SpaceId, events: Vec<Event>) -> Result<Appended>;

    /// The space's heads, sorted by id bytes.
    ///
    /// # Contract
    /// Equal to the anti-join's result at one committed state, whether or not the cache is
    /// current; reading writes nothing.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`] when the space has no epoch.
    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>>;

    /// Recomputes the space's head cache from the anti-join, under the space's write lock.
    ///
    /// # Contract
    /// Afterwards the cache rows equal the anti-join's heads. Idempotent: when they already
    /// do, nothing is written at all and [`RepairOutcome::Unchanged`] is returned.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`] when the space has no epoch.
    async fn repair_heads(&self, space: &SpaceId) -> Result<RepairOutcome>;

    /// Imports an epoch made elsewhere (replication).
    ///
    /// # Contract
    /// - The id must recompute ([`crate::verify_epoch`]) and every parent must already be in
    ///   the space.
    /// - The epoch gets the next local seq; it may create a fork (several heads), which the
    ///   next [`EpochStore::append`] merges. The cache stays exact.
    /// - Idempotent: importing an epoch already present writes nothing and returns
    ///   [`ImportOutcome::AlreadyPresent`].
    ///
    /// # Errors
    /// [`crate::Error::HashMismatch`], [`crate::Error::UnknownParent`],
    /// [`crate::Error::InvalidInput`]; nothing is written.
    async fn import(&self, epoch: ForeignEpoch) -> Result<ImportOutcome>;

    /// Reads the space's events after `cursor` (from the start when `None`).
    ///
    /// # Contract
    /// Events come in `(seq, epoch, epoch_seq)` order. A page holds whole epochs only: it
    /// stops before the epoch that would take it past `limit` events, except that a page always
    /// holds at least one epoch when one is available. No event is skipped. An empty page
    /// means the caller has read everything committed so far.
    ///
    /// # Errors
    /// [`crate::Error::BadCursor`] for a cursor issued for another space;
    /// [`crate::Error::NotFound`] when the space has no epoch;
    /// [`crate::Error::InvalidInput`] when `limit` is 0.
    async fn events_since(
        &self,
        space: &SpaceId,
        cursor: Option<&FeedCursor>,
        limit: usize,
    ) -> Result<FeedPage>;

    /// As [`EpochStore::events_since`], and the page also stops before the epoch that would
    /// take its events' stored bytes ([`Event::stored_bytes`](crate::Event::stored_bytes):
    /// kind, key and payload) past `max_bytes`; its first epoch goes whatever its size. A
    /// server answering untrusted readers bounds a page's memory with it, not only its count.
    ///
    /// # Contract
    /// The page is the longest prefix of [`EpochStore::events_since`]'s page (same cursor and
    /// limit) within `max_bytes`, and at least its first epoch; `next` points after its last
    /// epoch. The default reads that page and cuts it; a backend overrides it to read no more
    /// than it returns.
    ///
    /// # Errors
    /// As [`EpochStore::events_since`].
    async fn events_since_within(
        &self,
        space: &SpaceId,
        cursor: Option<&FeedCursor>,
        limit: usize,
        max_bytes: usize,
    ) -> Result<FeedPage> {
        let mut page = self.events_since(space, cursor, limit).await?;
        page.keep_within(space, max_bytes);
        Ok(page)
    }

    /// One stored epoch with its parents and events, or `None`.
    ///
    /// # Errors
    /// Backend errors only.
    async fn epoch(&self, space: &SpaceId, id: &EpochId) -> Result<Option<Epoch>>;

    /// Which of `ids` the space lacks, in the order given (a space with no epoch lacks them
    /// all): the `need` list of a sync. Reading writes nothing.
    ///
    /// The default asks [`EpochStore::epoch`] per id; the SQL backends answer with one query.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for more than [`crate::sync::MAX_MISSING_IDS`] ids.
    async fn missing(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<EpochId>> {
        check_missing_ids(ids)?;
        let mut out = Vec::new();
        for id in ids {
            if self.epoch(space, id).await?.is_none() {
                out.push(*id);
            }
        }
        Ok(out)
    }

    /// This store's identity for sync ([`StoreId`]): made at random and stored the first time
    /// it is asked (by whichever process asks first), the same answer ever after.
    ///
    /// # Errors
    /// Backend errors; [`crate::Error::Incompatible`] on a store whose upgrade stopped before
    /// the revision that stores sync state (`0010_epoch_sync`).
    async fn store_id(&self) -> Result<StoreId>;

    /// Imports `epochs` (parents first: an epoch's parents are in the space or earlier in the
    /// batch) in **one transaction**, and, when `cursor` is given, records it as this store's
    /// cursor for `cursor.peer` in `space` in the same transaction, stamped `at_us`
    /// (microseconds since the Unix epoch).
    ///
    /// # Contract
    /// - All or nothing: on any error nothing of the batch, and no cursor, was written.
    /// - Each epoch as [`EpochStore::import`] would: its id recomputed before anything is
    ///   written ([`crate::sync::check_import_batch`]), an epoch present already (or earlier
    ///   in the batch) answered [`ImportOutcome::AlreadyPresent`] and written no more, the
    ///   others given the next local seqs in batch order; the head cache stays exact.
    /// - The cursor's epoch must be in the space once the batch is in (stored before, or in the
    ///   batch): else [`crate::Error::BadCursor`] and nothing is written.
    /// - The cursor row is replaced (its seq may move back: the caller knows it is true); its
    ///   counters grow by the epochs this batch imported and their stored bytes. An empty
    ///   batch with a cursor moves the cursor only.
    /// - One outcome per epoch, in batch order.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for a batch over [`crate::sync::MAX_IMPORT_BATCH`];
    /// [`crate::Error::InvalidBatchItem`] naming the first epoch refused, with
    /// [`crate::Error::HashMismatch`], [`crate::Error::UnknownParent`] (a parent neither in the
    /// space nor earlier in the batch) or [`crate::Error::InvalidInput`] inside;
    /// [`crate::Error::BadCursor`] for a cursor naming an epoch the space does not hold;
    /// [`crate::Error::Incompatible`] as [`EpochStore::store_id`].
    async fn import_batch(
        &self,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&SyncCursor>,
        at_us: i64,
    ) -> Result<Vec<ImportOutcome>>;

    /// The sync cursors this store keeps for `space` (one per sending store), by peer id.
    /// Empty for a space never synced into this store.
    ///
    /// # Errors
    /// Backend errors; [`crate::Error::Incompatible`] as [`EpochStore::store_id`].
    async fn sync_peers(&self, space: &SpaceId) -> Result<Vec<SyncPeer>>;

    /// Space ids in byte order, strictly after `after`, at most `limit` of them (for paced
    /// backfill).
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] when `limit` is 0.
    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>>;
}

/// Read-only views into the head cache, for `cairn doctor`, the backfill and the conformance
/// suite.
#[async_trait]
pub trait EpochDiagnostics: EpochStore {
    /// The cache rows stored for the space, sorted by id bytes, exactly as stored (possibly
    /// stale).
    ///
    /// # Errors
    /// Backend errors only.
    async fn cached_heads(&self, space: &SpaceId) -> Result<Vec<Head>>;

    /// The heads computed by the anti-join over the whole history (slow: O(history)), sorted by
    /// id bytes.
    ///
    /// # Errors
    /// Backend errors only.
    async fn computed_heads(&self, space: &SpaceId) -> Result<Vec<Head>>;

    /// The seq the space's next epoch would get.
    ///
    /// # Errors
    /// Backend errors only.
    async fn next_seq(&self, space: &SpaceId) -> Result<Seq>;

    /// The space's epochs with `seq < before` (all when `None`), newest (highest seq) first, at
    /// most `limit`; each with its parents and its event count, without the events.
    ///
    /// # Contract
    /// One committed state: every epoch, its parents and its count are read at once. Paging
    /// with `before` = the last returned seq concatenates to the whole history, newest first,
    /// with no gap or repeat. A page shorter than `limit` is the last one; `before` at or
    /// below [`Seq::FIRST`] yields an empty page for an existing space. Backends read it with
    /// one indexed query (descending `(space, seq)`), so a page costs O(`limit` + its parents
    /// and events), not O(history).
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] when `limit` is 0 or above [`crate::MAX_RECENT_EPOCHS`]
    /// ([`EpochSummary::check_limit`]), checked before reading;
    /// [`crate::Error::NotFound`] when the space has no epoch (as [`EpochStore::heads`]).
    async fn recent_epochs(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>>;

    /// How many SQL statements (round trips, including BEGIN and COMMIT) this store instance
    /// has sent since it was opened. The memory backend counts 0.
    fn statements_executed(&self) -> u64;

    /// Whether this instance can still write to the store it opened, checked without writing
    /// (readiness probes call it). The SQLite backend checks that the file at its path, and its
    /// `-wal` file, are still the ones it opened; the default has nothing to check.
    ///
    /// # Errors
    /// [`crate::Error::StoreReplaced`] when the store's file was replaced, moved or removed;
    /// [`crate::Error::Io`] when the check itself failed.
    async fn check_ready(&self) -> Result<()> {
        Ok(())
    }
}

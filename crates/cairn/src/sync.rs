//! Replication of spaces between stores: what `cairn sync` runs.
//!
//! ```no_run
//! # async fn demo() -> cairn::Result<()> {
//! let edge = cairn::Store::open("sqlite://edge.db").await?;
//! let central = cairn::Store::open("postgres://localhost/app").await?;
//! let report = edge
//!     .sync_to(&central)
//!     .all_spaces()
//!     .both_ways(true)
//!     .run()
//!     .await?;
//! println!("{} epochs, {} bytes", report.epochs(), report.bytes());
//! # Ok(()) }
//! ```
//!
//! A side may also be a `cairn serve` reached over HTTP (the `cairn` binary's `sync` command).
//! How it works — per-peer cursors with a digest, negotiation by heads and a `need` list,
//! batches imported in one transaction each — is in [`cairn_core::sync`]'s documentation and
//! docs/ARCHITECTURE.md.

use std::sync::Arc;

pub use cairn_core::sync::{
    epoch_bytes, pull, LocalEndpoint, SpaceReport, Spaces, StoreId, Sync, SyncCursor, SyncEndpoint,
    SyncOptions, SyncPath, SyncPeer, SyncReport, MAX_IMPORT_BATCH, MAX_MISSING_IDS,
};

use crate::Store;

impl Store {
    /// This store as a side of a sync, named `label` in reports (the engine's name when
    /// `None`); the side holds a handle of the store, so the store stays open while it lives.
    pub fn sync_endpoint(&self, label: Option<&str>) -> Arc<dyn SyncEndpoint> {
        let label = label.map_or_else(|| format!("{} store", self.engine()), str::to_owned);
        Arc::new(LocalEndpoint::new(self.diagnostics(), label).keeping(Arc::new(self.clone())))
    }

    /// A sync from this store to `other` (add spaces, [`Sync::both_ways`], then
    /// [`Sync::run`] or [`Sync::follow`]).
    pub fn sync_to(&self, other: &Store) -> Sync {
        Sync::new(
            self.sync_endpoint(Some("this store")),
            other.sync_endpoint(Some("other store")),
        )
    }

    /// A sync from `other` to this store.
    pub fn sync_from(&self, other: &Store) -> Sync {
        Sync::new(
            other.sync_endpoint(Some("other store")),
            self.sync_endpoint(Some("this store")),
        )
    }
}

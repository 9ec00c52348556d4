//! Replication of spaces between stores: `cairn sync`'s engine.
//!
//! An epoch's id is its content, so two stores that hold the same epochs agree on ids,
//! parents and heads whatever seqs they gave them; a sync only has to find and send what the
//! receiver lacks. The receiving store keeps, per sending store and space, a cursor with a
//! digest ([`SyncCursor`]); when it holds, only the sender's newer epochs are listed. When it
//! is missing or fails its check, the driver negotiates: the sender's heads, then its history
//! newest first, each page's ids checked against the receiver (`need`), down to what the
//! receiver has. What is missing goes parents first in bounded batches, each imported in one
//! transaction with the cursor it earns ([`crate::EpochStore::import_batch`]).
//!
//! [`Sync`] runs it between two [`SyncEndpoint`]s: [`LocalEndpoint`] over a store this process
//! opened, or `cairn serve`'s HTTP client.

mod driver;
mod endpoint;
mod report;
mod run;
pub(crate) mod types;

pub use driver::{pull, SyncOptions};
pub use endpoint::{LocalEndpoint, SyncEndpoint};
pub use report::{SpaceReport, SyncPath, SyncReport};
pub use run::{Spaces, Sync};
pub use types::{
    batch_item_error, check_import_batch, check_missing_ids, cursor_epoch_missing, epoch_bytes,
    StoreId, SyncCursor, SyncPeer, MAX_IMPORT_BATCH, MAX_MISSING_IDS,
};

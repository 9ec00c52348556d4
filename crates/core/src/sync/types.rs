//! The values a sync exchanges and stores: a store's identity, the per-peer cursor a receiving
//! store keeps, and the batch import's limits and checks.
//!
//! A leaf module: [`crate::EpochStore`] names these types, so this file imports nothing of the
//! crate but its leaf modules.

use std::fmt;

use crate::encoding::verify_epoch;
use crate::error::{Error, Result};
use crate::ids::EpochId;
use crate::types::{ForeignEpoch, Seq, SpaceId};

/// Most epochs one [`crate::EpochStore::import_batch`] call takes.
pub const MAX_IMPORT_BATCH: usize = 1000;

/// Most ids one [`crate::EpochStore::missing`] call (and a sync's `need` exchange) takes.
pub const MAX_MISSING_IDS: usize = 10_000;

/// A store's identity for sync: 32 lowercase hex digits (128 random bits), made by the store
/// the first time it is asked ([`crate::EpochStore::store_id`]) and kept for its life.
///
/// A receiving store keeps its cursors by the *sending* store's id, so the same store reached
/// by its URL or through `cairn serve` shares one cursor. A copy of a store's file or database
/// carries its id: two copies syncing into one store share a cursor, which the cursor's digest
/// check then finds wrong each time (each sync negotiates: correct, slower).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StoreId(String);

impl StoreId {
    /// Length of the hex form.
    pub const LEN: usize = 32;

    /// A fresh random id.
    pub fn random() -> Self {
        Self(hex::encode(rand::random::<[u8; 16]>()))
    }

    /// Parses the hex form.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `s` is exactly 32 lowercase hex digits.
    pub fn parse(s: &str) -> Result<Self> {
        if s.len() == Self::LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Self(s.to_owned()))
        } else {
            Err(Error::invalid(
                "store id",
                "must be 32 lowercase hex digits",
            ))
        }
    }

    /// The hex form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreId({})", self.0)
    }
}

/// Where a receiving store stands with one sending store in one space: every epoch the sender
/// holds with a seq (the *sender's* seq) at or below `seq` is in the receiver, and the sender's
/// epoch at `seq` is `id` — the digest a later sync checks before it trusts the cursor (a
/// sender restored from a backup or replaced by another store holds another epoch there, or
/// none).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SyncCursor {
    /// The sending store.
    pub peer: StoreId,
    /// The sender's seq up to which the receiver holds everything.
    pub seq: Seq,
    /// The sender's epoch at `seq`.
    pub id: EpochId,
}

/// A cursor as a receiving store keeps it, with what it counted.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SyncPeer {
    /// The cursor.
    pub cursor: SyncCursor,
    /// Epochs this store imported from the peer in this space (present ones not counted).
    pub epochs: u64,
    /// Their stored bytes ([`crate::Event::stored_bytes`] summed).
    pub bytes: u64,
    /// When the cursor last moved, in microseconds since the Unix epoch (the syncing process's
    /// clock).
    pub updated_at_us: i64,
}

/// Checks a batch before a backend opens its transaction, as every backend must: at most
/// [`MAX_IMPORT_BATCH`] epochs, every one of `space`, each id recomputed
/// ([`verify_epoch`]), and a cursor's seq at least [`Seq::FIRST`].
///
/// # Errors
/// [`Error::InvalidInput`] for a batch too large or a bad cursor;
/// [`Error::InvalidBatchItem`] naming the first epoch that is of another space, malformed or
/// whose id does not recompute ([`Error::HashMismatch`] inside).
pub fn check_import_batch(
    space: &SpaceId,
    epochs: &[ForeignEpoch],
    cursor: Option<&SyncCursor>,
) -> Result<()> {
    if epochs.len() > MAX_IMPORT_BATCH {
        return Err(Error::invalid(
            "import batch",
            format!(
                "holds {} epochs; at most {MAX_IMPORT_BATCH} go in one batch",
                epochs.len()
            ),
        ));
    }
    if let Some(c) = cursor {
        if c.seq < Seq::FIRST || c.seq.to_i64().is_err() {
            return Err(Error::invalid(
                "sync cursor",
                "its seq must be between 1 and 2^63 - 1",
            ));
        }
    }
    for (index, epoch) in epochs.iter().enumerate() {
        let checked = if &epoch.space != space {
            Err(Error::invalid(
                "import batch",
                "every epoch must belong to the batch's space",
            ))
        } else {
            verify_epoch(epoch)
        };
        checked.map_err(|e| Error::InvalidBatchItem {
            index,
            error: Box::new(e),
        })?;
    }
    Ok(())
}

/// Wraps the error an epoch of a batch met inside the backend's transaction (an unknown
/// parent) with its position, as every backend reports it.
pub fn batch_item_error(index: usize, error: Error) -> Error {
    match error {
        e @ (Error::UnknownParent { .. }
        | Error::HashMismatch { .. }
        | Error::InvalidInput { .. }) => Error::InvalidBatchItem {
            index,
            error: Box::new(e),
        },
        other => other,
    }
}

/// The refusal of a cursor whose epoch the receiving space does not hold once its batch is
/// in: a cursor names the sender's epoch at its seq, and every epoch up to it is in the
/// receiver, that one included.
pub fn cursor_epoch_missing(cursor: &SyncCursor) -> Error {
    Error::BadCursor {
        reason: format!(
            "the sync cursor names epoch {}, which this space does not hold (a cursor's epoch is in the store or in its batch)",
            cursor.id
        ),
    }
}

/// Checks the ids of a [`crate::EpochStore::missing`] call.
///
/// # Errors
/// [`Error::InvalidInput`] for more than [`MAX_MISSING_IDS`] ids.
pub fn check_missing_ids(ids: &[EpochId]) -> Result<()> {
    if ids.len() > MAX_MISSING_IDS {
        return Err(Error::invalid(
            "epoch ids",
            format!("{} asked; at most {MAX_MISSING_IDS} per call", ids.len()),
        ));
    }
    Ok(())
}

/// The stored bytes of an epoch's events, as a peer's byte count sums them.
pub fn epoch_bytes(epoch: &ForeignEpoch) -> u64 {
    epoch.events.iter().map(|e| e.stored_bytes() as u64).sum()
}

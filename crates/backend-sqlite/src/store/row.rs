//! Conversions between the epoch log's rows and core's types: ids and heads.

use cairn_core::{EpochId, Head, Result, Seq};

use crate::error::corrupt;

/// A stored epoch id; another length than 32 bytes is [`cairn_core::Error::Corrupt`].
pub(crate) fn epoch_id_from(bytes: &[u8]) -> Result<EpochId> {
    EpochId::from_slice(bytes).map_err(|_| corrupt("a stored epoch id is not 32 bytes"))
}

/// Heads from `(id, seq)` rows.
pub(crate) fn heads_from(rows: Vec<(Vec<u8>, i64)>) -> Result<Vec<Head>> {
    rows.into_iter()
        .map(|(id, seq)| {
            Ok(Head {
                id: epoch_id_from(&id)?,
                seq: Seq::from_i64(seq)?,
            })
        })
        .collect()
}

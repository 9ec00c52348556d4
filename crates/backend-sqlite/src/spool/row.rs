//! Row and column conversions: between the spool's values and what the SQLite tables store
//! (the same helper names as the Postgres spool's `row` module).

use cairn_core::spool::{DedupKey, RunId, RunState, Timestamp};
use cairn_core::Result;

use crate::error::corrupt;

pub(super) fn micros(t: Timestamp) -> i64 {
    t.as_unix_micros()
}

pub(super) fn ts(micros: i64) -> Timestamp {
    Timestamp::from_unix_micros(micros)
}

pub(super) fn len_i64(bytes: &[u8]) -> i64 {
    i64::try_from(bytes.len()).unwrap_or(i64::MAX)
}

pub(super) fn count(n: i64, what: &str) -> Result<u32> {
    u32::try_from(n).map_err(|_| corrupt(format!("a stored {what} is out of range")))
}

pub(super) fn non_negative(n: i64, what: &str) -> Result<u64> {
    u64::try_from(n).map_err(|_| corrupt(format!("a stored {what} is negative")))
}

pub(super) fn run_id(bytes: &[u8]) -> Result<RunId> {
    RunId::from_slice(bytes).map_err(|_| corrupt("a stored run id is not 16 bytes"))
}

pub(super) fn state(s: &str) -> Result<RunState> {
    RunState::parse(s).map_err(|_| corrupt("a stored run state is unknown"))
}

pub(super) fn dedup_key(bytes: Vec<u8>) -> Result<DedupKey> {
    DedupKey::from_bytes(bytes).map_err(|_| corrupt("a stored dedup key is out of bounds"))
}

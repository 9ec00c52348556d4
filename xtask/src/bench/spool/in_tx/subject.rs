//! What row 7's two engines share: the subject interface (a store and an application, and one
//! transaction of a variant on them), the phases it times, the variants' labels, and the bare
//! row, keys and order ids each transaction writes.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cairn::DedupKey;

use super::super::super::setup::Backend;

/// The phases of one transaction, timed on the client: `BEGIN` (and taking the connection or
/// the writer, and the hop to it), the order row, the job (cairn's enqueue or the bare
/// insert), `COMMIT` (and the hop back).
pub(super) type Phases = [Duration; 4];

pub(super) const PHASES: [&str; 4] = ["begin", "order row", "job", "commit"];

pub(super) const LITE_A: &str = "(a) SqliteBackend::transaction: order row + enqueue";

pub(super) const LITE_A_HANDLE: &str =
    "(a, handle) Store::begin handle: order row (Transaction::sqlite) + enqueue + commit";
pub(super) const LITE_B: &str = "(b) the application's own connection: order row + bare insert";

pub(super) const LITE_B_IN: &str =
    "(b, in cairn's transaction) SqliteBackend::transaction: order row + bare insert";
pub(super) const PG_A1: &str =
    "(a1) PgTransaction from cairn's pool (Store::begin): order row + enqueue";

pub(super) const PG_A2: &str =
    "(a2) Store::enqueue_in on the application's own sqlx transaction: order row + enqueue";
pub(super) const PG_B: &str = "(b) the application's own sqlx transaction: order row + bare insert";

pub(super) const PG_B_IN: &str =
    "(b, in cairn's transaction) PgTransaction: order row + bare insert";

/// The variants, with whether the target applies to them.
pub(super) fn variants(backend: Backend) -> [(&'static str, bool); 4] {
    match backend {
        Backend::Sqlite => [
            (LITE_A, true),
            (LITE_A_HANDLE, false),
            (LITE_B, false),
            (LITE_B_IN, false),
        ],
        Backend::Postgres => [
            (PG_A1, true),
            (PG_A2, true),
            (PG_B, false),
            (PG_B_IN, false),
        ],
    }
}

/// The two (b) variants: the application's own connection, and cairn's transaction.
pub(super) fn baselines(backend: Backend) -> [&'static str; 2] {
    match backend {
        Backend::Sqlite => [LITE_B, LITE_B_IN],
        Backend::Postgres => [PG_B, PG_B_IN],
    }
}

/// A store and an application, and the variants of row 7 on them.
pub(super) trait Subject {
    fn labels(&self) -> Vec<&'static str>;
    /// One transaction of variant `v` (an index into [`Subject::labels`]), the `n`-th, and
    /// the time of its phases.
    async fn one(&self, v: usize, n: u64) -> Result<Phases, String>;
}

/// The phases between consecutive instants `t[0]..=t[4]`.
pub(super) fn phases(t: [Instant; 5]) -> Phases {
    [t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3]]
}

pub(super) fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// What the bare insert writes for transaction `n`: the values cairn's enqueue writes (a
/// 16-byte id, the queue, the key, the times, the payload, the jitter).
pub(super) struct BareRow {
    pub(super) run_id: Vec<u8>,
    pub(super) key: Vec<u8>,
    pub(super) now: i64,
    pub(super) jitter: i64,
}

impl BareRow {
    pub(super) fn new(tag: u64, n: u64, key: &DedupKey) -> Self {
        let mut run_id = tag.to_be_bytes().to_vec();
        run_id.extend_from_slice(&n.to_be_bytes());
        Self {
            run_id,
            key: key.as_bytes().to_vec(),
            now: now_micros(),
            jitter: i64::from_le_bytes((n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ tag).to_le_bytes()),
        }
    }
}

pub(super) fn tx_key(variant: usize, n: u64) -> DedupKey {
    DedupKey::from_parts(["tx", &variant.to_string(), &format!("{n:08}")]).expect("a valid key")
}

/// The order id of transaction `n` of variant `v`: unique across the variants.
pub(super) fn order_id(v: usize, n: u64) -> i64 {
    i64::try_from(v as u64 * 1_000_000_000 + n).unwrap_or(i64::MAX)
}

//! Row and column conversions: decoding spool rows into the core's value types (a value no
//! cairn build writes — a run id that is not 16 bytes, an unknown state, a negative count — is
//! [`Error::Corrupt`]), and the column values the writers compute (`micros`, the claim
//! attempt and jitter).

use std::collections::BTreeMap;

use cairn_core::spool::{
    jitter_seed, ConsumerId, DedupKey, EventStream, FactName, LeaseInfo, LeaseToken, PartitionKey,
    QueueName, RunId, RunInfo, RunState, SupersedeGroup, Timestamp, TraceParent,
};
use cairn_core::{Error, Result};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::map;

pub(super) fn corrupt(what: &str) -> Error {
    Error::corrupt(format!("{what} in the spool tables"))
}

pub(super) fn get<'r, T>(row: &'r PgRow, i: usize) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(i).map_err(map)
}

pub(super) fn run_id(bytes: &[u8]) -> Result<RunId> {
    RunId::from_slice(bytes).map_err(|_| corrupt("a run id that is not 16 bytes"))
}

pub(super) fn state(s: &str) -> Result<RunState> {
    RunState::parse(s).map_err(|_| corrupt("an unknown run state"))
}

pub(super) fn count(n: i64) -> Result<u64> {
    u64::try_from(n).map_err(|_| corrupt("a negative count"))
}

pub(super) fn u32_of(n: i32) -> Result<u32> {
    u32::try_from(n).map_err(|_| corrupt("a negative attempt count"))
}

/// A timestamp as stored: microseconds since the Unix epoch.
pub(super) fn micros(t: Timestamp) -> i64 {
    t.as_unix_micros()
}

/// A length as stored (`payload_bytes`, `bytes`).
pub(super) fn bytes_len(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The attempt a run left with `attempts` starts next, as stored in `claim_attempt` (`None`
/// past `i32::MAX`, where no claim can take the one-statement path).
pub(super) fn next_attempt(attempts: u32) -> Option<i32> {
    attempts.checked_add(1).and_then(|a| i32::try_from(a).ok())
}

/// The claim jitter a run left with `attempts` carries (`claim_jitter`, read by
/// [`super::sql::CLAIM_QUEUED`]): the top 32 bits of the jitter seed of its next attempt — the
/// only bits [`cairn_core::spool::backoff`] uses. `None` where [`next_attempt`] is `None`.
pub(super) fn claim_jitter(queue: &QueueName, key: &DedupKey, attempts: u32) -> Option<i64> {
    let next = next_attempt(attempts)?;
    let seed = jitter_seed(queue, key, u32::try_from(next).ok()?);
    Some(i64::try_from(seed >> 32).unwrap_or(i64::MAX))
}

/// A stored trace context (`spool_run.traceparent`).
pub(super) fn traceparent_of(stored: Option<String>) -> Result<Option<TraceParent>> {
    stored
        .map(|t| TraceParent::parse(&t).map_err(|_| corrupt("an invalid traceparent")))
        .transpose()
}

pub(super) fn ts(micros: i64) -> Timestamp {
    Timestamp::from_unix_micros(micros)
}

pub(super) fn opt_ts(micros: Option<i64>) -> Option<Timestamp> {
    micros.map(Timestamp::from_unix_micros)
}

/// A run's row without payload, facts and events: what a transition reads and decides on.
#[derive(Clone, Debug)]
pub(super) struct RunRow {
    pub(super) run_id: RunId,
    pub(super) queue: QueueName,
    pub(super) dedup_key: DedupKey,
    pub(super) group: Option<SupersedeGroup>,
    pub(super) state: RunState,
    pub(super) attempts: u32,
    pub(super) max_attempts: u32,
    pub(super) priority: i32,
    pub(super) payload_bytes: u64,
    pub(super) enqueued_at: Timestamp,
    pub(super) updated_at: Timestamp,
    pub(super) due_at: Option<Timestamp>,
    pub(super) finished_at: Option<Timestamp>,
    pub(super) token: Option<LeaseToken>,
    pub(super) consumer: Option<ConsumerId>,
    pub(super) lease_expires_at: Option<Timestamp>,
    pub(super) cancel_requested: bool,
    pub(super) reason: Option<String>,
    pub(super) closed: Option<bool>,
}

/// How many columns [`RunRow::from_row`] reads (`run_columns!` in `sql.rs`).
pub(super) const RUN_COLUMNS: usize = 19;

impl RunRow {
    pub(super) fn from_row(row: &PgRow) -> Result<Self> {
        let id: Vec<u8> = get(row, 0)?;
        let queue: String = get(row, 1)?;
        let key: Vec<u8> = get(row, 2)?;
        let group: Option<Vec<u8>> = get(row, 3)?;
        let state_name: String = get(row, 4)?;
        let token: Option<Vec<u8>> = get(row, 13)?;
        let consumer: Option<String> = get(row, 14)?;
        Ok(Self {
            run_id: run_id(&id)?,
            queue: QueueName::new(queue).map_err(|_| corrupt("an invalid queue name"))?,
            dedup_key: DedupKey::from_bytes(key).map_err(|_| corrupt("an invalid dedup key"))?,
            group: group
                .map(SupersedeGroup::from_bytes)
                .transpose()
                .map_err(|_| corrupt("an invalid supersede group"))?,
            state: state(&state_name)?,
            attempts: u32_of(get(row, 5)?)?,
            max_attempts: u32_of(get(row, 6)?)?,
            priority: get(row, 7)?,
            payload_bytes: count(get(row, 8)?)?,
            enqueued_at: ts(get(row, 9)?),
            updated_at: ts(get(row, 10)?),
            due_at: opt_ts(get(row, 11)?),
            finished_at: opt_ts(get(row, 12)?),
            token: token
                .map(|t| LeaseToken::from_slice(&t))
                .transpose()
                .map_err(|_| corrupt("a lease token that is not 16 bytes"))?,
            consumer: consumer
                .map(ConsumerId::new)
                .transpose()
                .map_err(|_| corrupt("an invalid consumer id"))?,
            lease_expires_at: opt_ts(get(row, 15)?),
            cancel_requested: get(row, 16)?,
            reason: get(row, 17)?,
            closed: get(row, 18)?,
        })
    }

    /// The run as [`RunInfo`], with its event count and facts.
    pub(super) fn info(self, events: u64, facts: BTreeMap<FactName, Vec<u8>>) -> RunInfo {
        let lease = match (self.consumer, self.lease_expires_at) {
            (Some(consumer), Some(expires_at)) => Some(LeaseInfo {
                consumer,
                expires_at,
            }),
            _ => None,
        };
        RunInfo {
            run_id: self.run_id,
            queue: self.queue,
            dedup_key: self.dedup_key,
            supersede_group: self.group,
            state: self.state,
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            priority: self.priority,
            payload_bytes: self.payload_bytes,
            enqueued_at: self.enqueued_at,
            updated_at: self.updated_at,
            due_at: self.due_at,
            finished_at: self.finished_at,
            lease,
            cancel_requested: self.cancel_requested,
            reason: self.reason,
            facts,
            events,
            partition_key: None,
            traceparent: None,
            stream: EventStream::from_stored(self.closed),
        }
    }
}

/// A [`RunInfo`] from a row of `RUN_INFO` / `RUN_LIST`: the run columns, then the event count,
/// the fact names and the fact values (and, from revision `0009_spool_flow` on, the partition
/// key and the trace context: `RUN_INFO_FLOW` / `RUN_LIST_FLOW`).
pub(super) fn run_info(row: &PgRow) -> Result<RunInfo> {
    let run = RunRow::from_row(row)?;
    let events = count(get(row, RUN_COLUMNS)?)?;
    let names: Vec<String> = get(row, RUN_COLUMNS + 1)?;
    let values: Vec<Vec<u8>> = get(row, RUN_COLUMNS + 2)?;
    if names.len() != values.len() {
        return Err(corrupt("a fact list out of step"));
    }
    let mut facts = BTreeMap::new();
    for (name, value) in names.into_iter().zip(values) {
        facts.insert(
            FactName::new(name).map_err(|_| corrupt("an invalid fact name"))?,
            value,
        );
    }
    let mut info = run.info(events, facts);
    if row.len() > RUN_COLUMNS + 3 {
        info.partition_key = get::<Option<String>>(row, RUN_COLUMNS + 3)?
            .map(|p| PartitionKey::from_stored(p).map_err(|_| corrupt("an invalid partition key")))
            .transpose()?;
        info.traceparent = traceparent_of(get(row, RUN_COLUMNS + 4)?)?;
    }
    Ok(info)
}

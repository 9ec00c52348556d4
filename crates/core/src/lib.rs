//! # cairn-core
//!
//! Domain types, traits, errors and pure decisions shared by every cairn backend, plus
//! [`MemoryStore`], the in-memory reference backend that the conformance suite uses as its
//! model.
//!
//! This crate depends on no SQL driver. Backends (`cairn-sqlite`, `cairn-postgres`) implement
//! [`EpochStore`] and [`EpochDiagnostics`]; servers and tools hold them as `Arc<dyn …>`.
//!
//! # Use the facade
//! `cairn-core` is published because the backend crates depend on it, but the supported
//! surface is the facade crate `cairn`: a service depends on `cairn` and names what it
//! re-exports (`cairn::Store`, `cairn::spool::…`, `cairn::Error`, …). What this crate holds
//! beyond that is the backend contract, and may change in any release:
//! - the **decision functions** every backend calls so that no backend decides differently
//!   from the others and from the model: the run state machine ([`spool::transition`],
//!   [`spool::nack_action`], [`spool::release_action`], [`spool::expiry_action`], the park
//!   reasons), the lease check ([`spool::check_token`]), the append rule
//!   ([`spool::check_append`]), the enqueue and import checks ([`spool::check_enqueue`],
//!   [`spool::check_enqueue_batch`], [`spool::check_import`]), retention planning
//!   ([`spool::RetentionPass`]), the retry jitter ([`spool::jitter_seed`]) and the epoch log's
//!   seq and head-cache rules ([`next_seq`], [`cache_is_current`], [`heads_after_import`]);
//! - the legacy importer's planner ([`spool::legacy`]) and the backfill's machinery
//!   ([`backfill`]), which the facade wraps.
//!
//! The epoch log in one paragraph: a *space* is an independent history; an *epoch* is a
//! non-empty batch of [`Event`]s appended atomically to one space. Each epoch gets a
//! commit-ordered [`Seq`] (the largest seq in the space plus one, first seq [`Seq::FIRST`]), names
//! the space's heads at append time as its parents, and is identified by
//! [`EpochId`] = BLAKE3 over a canonical encoding of (space, sorted parents, event ids). A
//! maintained head cache makes appends cost O(heads); it is trusted only when
//! [`cache_is_current`] says so.
//!
//! The spool ([`spool`], trait [`Spool`], model [`MemorySpool`]) is a durable work queue: runs
//! deduplicated by `(queue, DedupKey)`, leased to one consumer at a time, retried with backoff,
//! superseded, canceled, carrying event streams and write-once facts, with bounded retention.

#![forbid(unsafe_code)]

pub mod backfill;
mod encoding;
mod error;
mod ids;
mod keys;
mod memory;
pub mod schema;
mod seq;
pub mod spool;
mod store;
pub mod sync;
mod tx;
mod types;

pub use encoding::{epoch_id, event_id, verify_epoch};
pub use error::{escape_control, Blocker, BoxError, Error, Report, Result};
pub use ids::{EpochId, EventId};
pub use keys::{key64, scratch_name};
pub use memory::MemoryStore;
pub use seq::{cache_is_current, heads_after_import, next_seq, HeadProbe};
pub use spool::{
    Claimed, Clock, ConsumerId, DedupKey, EnqueueOptions, Enqueued, FactName, Heartbeat,
    LeaseToken, ManualClock, MemorySpool, NackKind, QueueName, RunEventId, RunId, RunInfo,
    RunState, Spool, SupersedeGroup, SystemClock, Timestamp, Wakeup,
};
pub use store::{EpochDiagnostics, EpochStore};
pub use tx::{failed_transaction, Transaction};
pub use types::{
    Appended, Epoch, EpochSummary, Event, FeedCursor, FeedEvent, FeedPage, ForeignEpoch, Head,
    ImportOutcome, RepairOutcome, Seq, SpaceId, MAX_EPOCH_EVENTS, MAX_EVENT_PAYLOAD, MAX_KEY_LEN,
    MAX_KIND_LEN, MAX_RECENT_EPOCHS, MAX_SPACE_LEN, RESERVED_SPACE_PREFIX,
};

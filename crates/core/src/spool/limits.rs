//! The spool's limits: the sizes, counts and durations every backend enforces alike (through
//! the checks in `checks.rs`). A leaf module.

use std::time::Duration;

/// Largest fact value, in bytes (64 KiB).
pub const MAX_FACT_VALUE: usize = 64 * 1024;
/// Largest run payload, in bytes (1 MiB).
pub const MAX_RUN_PAYLOAD: usize = 1024 * 1024;
/// Largest run event payload, in bytes (1 MiB).
pub const MAX_RUN_EVENT_PAYLOAD: usize = 1024 * 1024;
/// Longest nack reason kept, in bytes; longer reasons are cut at a character boundary (a nack
/// must not fail because its error text is long).
pub const MAX_REASON_LEN: usize = 4096;
/// Most runs one claim hands out, and most rows one listing or event read returns.
pub const MAX_BATCH: usize = 1000;
/// Most event ids one `acknowledge_events` call takes.
pub const MAX_ACK_IDS: usize = 1000;
/// Shortest lease a claim or heartbeat may ask for.
pub const MIN_LEASE: Duration = Duration::from_secs(1);
/// Longest lease a claim or heartbeat may ask for.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);
/// Largest `max_attempts` an enqueue may ask for.
pub const MAX_ATTEMPTS_LIMIT: u32 = 1000;
/// `max_attempts` when an enqueue names none.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;
/// Most items one [`Spool::enqueue_many`](super::Spool::enqueue_many) takes.
pub const MAX_ENQUEUE_BATCH: usize = 10_000;
/// Most payload bytes one [`Spool::enqueue_many`](super::Spool::enqueue_many) takes, all its
/// items together (64 MiB).
pub const MAX_ENQUEUE_BATCH_BYTES: usize = 64 * 1024 * 1024;

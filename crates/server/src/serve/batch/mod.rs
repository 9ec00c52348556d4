//! Batches of writes: `POST /v1/queues/{queue}/runs/batch` (many runs of one queue in one
//! `Spool::enqueue_many`) and `POST /v1/batch` (enqueues, epoch appends, run events, cancels,
//! closes and facts in one store transaction).
//!
//! Both are all or nothing, and both read every item into core types before the store is
//! touched: an item that does not read (a bad key, a payload over its limit, a bad name, an
//! unknown op, a field of the wrong type) refuses the whole batch with 400
//! `invalid_batch_item` naming the item's `index` (from 0), and nothing is written. Items
//! arrive as their raw JSON text (`RawValue`) and are read one at a time from it, so an item of
//! the wrong shape is named by its index, not by a line and column of the body, and a field
//! written twice is refused as the single route refuses it (a `serde_json::Value` would keep
//! the last one, and would cost many times the body's bytes). The ops of `POST /v1/batch`
//! carry at most [`spool::MAX_ENQUEUE_BATCH_BYTES`] of payloads together, decoded, checked as
//! they are read. An op the store refuses inside the
//! transaction (an unknown run, a closed event stream) rolls the whole batch back and answers
//! its own status and code, with the op's `index`.
//!
//! An item is read by the function the single route uses (`EnqueueRequest::into_enqueue`,
//! `events_in`, `RunEventIn::into_event`, `FactIn`), so a batch item and a single request are
//! one shape under one set of rules. An op on a run names it by `run_id`, or by `run: {"op": N}`:
//! the run that enqueue op `N` of the same batch answered (created or found), which must be an
//! earlier op; a reference to anything else answers 422 `invalid_reference` before the
//! transaction opens.
//!
//! **Lock order (Architecture invariant).** Every `POST /v1/batch` takes all its locks in one
//! global order, so no two batches — on one node or on several over one database — can wait
//! for each other in a cycle (which Postgres breaks by aborting one with SQLSTATE 40P01):
//! 1. the write locks of every space it appends to, up front (`Transaction::lock_spaces`, in
//!    the order every append of every node uses);
//! 2. its enqueues, queue by queue in name order, each queue's ops as one bulk enqueue
//!    (`Transaction::enqueue_many`: supersede groups' locks, then keys in key order);
//! 3. its epoch appends, in the request's order (their locks are held already);
//! 4. its ops on runs, in run-id order: a run's `append_event`, `cancel` and `close_run` in the
//!    request's order, then its `set_fact`s in name order.
//!
//! A batch is all or nothing and its ops touch disjoint things in each step, so running them in
//! this order instead of the request's changes no answer, except which op an error names when
//! several would fail. Results come back in the request's order. The server never reruns a
//! batch: a deadlock would be a broken invariant, answered 503 `retryable` like any busy store.
//! The tests are `crates/server/tests/batch.rs`, `batch_ops.rs` and `batch_concurrency.rs` (16
//! concurrent clients over overlapping spaces and keys, on one node and on two).

pub(super) mod handlers;
mod op;
mod plan;
#[cfg(test)]
mod tests;
mod wire;

pub(crate) use self::wire::MAX_BATCH_OPS;

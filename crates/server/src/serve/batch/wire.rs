//! The JSON shapes of the two batch routes: requests read item by item (at most so many), and
//! the results.

use axum::http::StatusCode;
use cairn::spool::{self, Enqueued};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use crate::serve::json::EnqueueRequest;

/// Most ops one `POST /v1/batch` takes. The whole batch holds the store's writer on SQLite
/// (and its rows' locks on Postgres) until it commits, so it is kept to what commits quickly;
/// its bytes are bounded by the server's body limit as well, and its ops' payloads together
/// by [`spool::MAX_ENQUEUE_BATCH_BYTES`] (see [`Op::payload_bytes`]).
pub(crate) const MAX_BATCH_OPS: usize = 1000;

/// `POST /v1/queues/{queue}/runs/batch`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnqueueBatchRequest {
    /// The runs to enqueue, in order, each as `POST /v1/queues/{queue}/runs` takes its body:
    /// at most 10000 items, their payloads at most 64 MiB together. A key repeated in the
    /// batch is one run (its later items answer `created: false`; their payload and options
    /// are ignored).
    #[schema(value_type = Vec<EnqueueRequest>, max_items = 10000)]
    #[serde(deserialize_with = "enqueue_items")]
    pub(crate) items: Vec<Box<RawValue>>,
}

/// One item's result of a batch enqueue.
#[derive(Serialize, ToSchema)]
pub(crate) struct EnqueuedOut {
    /// The run's id: new, or the run the key already named (stored, or created by an earlier
    /// item of the batch).
    pub(crate) run_id: String,
    /// Whether this item created the run.
    pub(crate) created: bool,
    /// What `POST /v1/queues/{queue}/runs` answers for such an item: 201 created, 200
    /// existing.
    pub(crate) status: u16,
}

impl From<&Enqueued> for EnqueuedOut {
    fn from(e: &Enqueued) -> Self {
        Self {
            run_id: e.run_id.to_string(),
            created: e.created,
            status: created_status(e.created),
        }
    }
}

/// What a batch enqueue did.
#[derive(Serialize, ToSchema)]
pub(crate) struct EnqueueBatchResponse {
    /// One result per item, in the items' order.
    pub(crate) results: Vec<EnqueuedOut>,
}

/// `POST /v1/batch`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchRequest {
    /// The ops, run in order in one transaction (at most 1000, their payloads at most 64 MiB
    /// together: enqueue payloads, run event payloads and epoch event payloads, decoded), each
    /// an object whose `op` is `enqueue`, `append`, `append_event`, `cancel`, `close_run` or
    /// `set_fact` (see `BatchOp`).
    #[schema(value_type = Vec<Object>, max_items = 1000)]
    #[serde(deserialize_with = "batch_ops")]
    pub(crate) ops: Vec<Box<RawValue>>,
}

/// One op's result of `POST /v1/batch`, tagged by its `op`.
#[derive(Serialize, ToSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum OpOut {
    /// A run enqueued, or found under its key.
    Enqueue {
        /// The run's id.
        run_id: String,
        /// Whether this op created the run.
        created: bool,
        /// What `POST /v1/queues/{queue}/runs` answers for it: 201 created, 200 existing.
        status: u16,
    },
    /// An epoch appended.
    Append {
        /// Its seq in the space.
        seq: u64,
        /// Its id (64 hex digits).
        id: String,
        /// Its parents' ids.
        parents: Vec<String>,
    },
    /// A run event appended, or found under its id.
    AppendEvent {
        /// The event's seq in the run.
        seq: u64,
        /// False when the run already held this event id.
        created: bool,
        /// What `POST /v1/runs/{id}/events` answers for it: 201 appended, 200 existing.
        status: u16,
    },
    /// A run canceled, or its cancel requested.
    Cancel {
        /// The run.
        run_id: String,
        /// Its state now: `canceled`, or `claimed` when a cancel was only requested.
        state: String,
        /// Whether a cancel is requested (the run was claimed).
        cancel_requested: bool,
    },
    /// A run's event stream closed.
    CloseRun {
        /// The run.
        run_id: String,
        /// `closed`, or `already_closed` when it was closed before.
        outcome: String,
    },
    /// A run's fact set.
    SetFact {
        /// The run.
        run_id: String,
        /// `set`, or `already_set` when it held this value already.
        outcome: String,
        /// What `PUT /v1/runs/{id}/facts/{name}` answers for it: 201 set, 200 already set.
        status: u16,
    },
}

/// What a batch did.
#[derive(Serialize, ToSchema)]
pub(crate) struct BatchResponse {
    /// One result per op, in the ops' order.
    pub(crate) results: Vec<OpOut>,
}

pub(super) fn created_status(created: bool) -> u16 {
    if created {
        StatusCode::CREATED.as_u16()
    } else {
        StatusCode::OK.as_u16()
    }
}

/// Reads a JSON array of raw items, refusing it as soon as it holds more than `max`: a body of
/// millions of tiny items (`[0,0,0,…]`) is refused after `max + 1` of them, instead of being
/// read whole into a `Vec` that takes many times the body's bytes before it is counted.
pub(super) fn at_most<'de, D: Deserializer<'de>>(
    d: D,
    what: &'static str,
    max: usize,
) -> Result<Vec<Box<RawValue>>, D::Error> {
    struct Items {
        what: &'static str,
        max: usize,
    }
    impl<'de> Visitor<'de> for Items {
        type Value = Vec<Box<RawValue>>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "an array of at most {} items", self.max)
        }

        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(self.max));
            while let Some(item) = seq.next_element::<Box<RawValue>>()? {
                if items.len() == self.max {
                    return Err(de::Error::custom(format!(
                        "{} holds more than {} items, the limit: split it into several batches",
                        self.what, self.max
                    )));
                }
                items.push(item);
            }
            Ok(items)
        }
    }
    d.deserialize_seq(Items { what, max })
}

pub(super) fn enqueue_items<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<Box<RawValue>>, D::Error> {
    at_most(d, "the enqueue batch", spool::MAX_ENQUEUE_BATCH)
}

pub(super) fn batch_ops<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Box<RawValue>>, D::Error> {
    at_most(d, "the batch", MAX_BATCH_OPS)
}

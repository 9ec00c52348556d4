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

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use cairn::spool::{self, CancelOutcome, CloseOutcome, EnqueueItem, Enqueued, FactOutcome};
use cairn::{Error, Event, FactName, QueueName, RunEventId, RunId, RunState, SpaceId, Transaction};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::error::ApiError;
use super::extract::{Body, PathArgs};
use super::json::{
    bytes_in, events_in, AppendRequest, EnqueueRequest, ErrorBody, FactIn, QueuePath, RunEventIn,
};
use super::state::AppState;

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

fn created_status(created: bool) -> u16 {
    if created {
        StatusCode::CREATED.as_u16()
    } else {
        StatusCode::OK.as_u16()
    }
}

/// Reads a JSON array of raw items, refusing it as soon as it holds more than `max`: a body of
/// millions of tiny items (`[0,0,0,…]`) is refused after `max + 1` of them, instead of being
/// read whole into a `Vec` that takes many times the body's bytes before it is counted.
fn at_most<'de, D: Deserializer<'de>>(
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

fn enqueue_items<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Box<RawValue>>, D::Error> {
    at_most(d, "the enqueue batch", spool::MAX_ENQUEUE_BATCH)
}

fn batch_ops<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Box<RawValue>>, D::Error> {
    at_most(d, "the batch", MAX_BATCH_OPS)
}

/// Refuses a batch whose ops' payloads, read so far, exceed
/// [`spool::MAX_ENQUEUE_BATCH_BYTES`] together, before the transaction opens.
fn check_payload_bytes(bytes: usize) -> cairn::Result<()> {
    let max = spool::MAX_ENQUEUE_BATCH_BYTES;
    if bytes > max {
        return Err(Error::invalid(
            "batch",
            format!(
                "its ops' payloads exceed {max} bytes together (enqueue payloads, run event \
                 payloads and epoch event payloads, decoded); the limit is {max}: split it into \
                 several batches"
            ),
        ));
    }
    Ok(())
}

/// Names item `index` in its error.
fn item(index: usize) -> impl Fn(Error) -> Error {
    move |e| Error::InvalidBatchItem {
        index,
        error: Box::new(e),
    }
}

/// Enqueues many runs of a queue at once, atomically.
#[utoipa::path(
    post, path = "/v1/queues/{queue}/runs/batch", tag = "spool",
    params(QueuePath),
    request_body = EnqueueBatchRequest,
    responses(
        (status = 200, description = "Every item enqueued or found, in one transaction; one result per item, in order", body = EnqueueBatchResponse),
        (status = 400, description = "Invalid input: too many items or payload bytes (`invalid_input`), or an item that does not read (`invalid_batch_item`, naming its `index`); nothing was written", body = ErrorBody),
        (status = 401, description = "No valid token", body = ErrorBody),
        (status = 403, description = "Read-only token", body = ErrorBody),
        (status = 413, description = "Body too large; nothing was written", body = ErrorBody),
        (status = 503, description = "Busy or unavailable; retry (`retryable`, `storage_full`: nothing was written; `unavailable`: the connection to the store broke and the batch may or may not have committed)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn enqueue_batch(
    State(state): State<AppState>,
    PathArgs(queue): PathArgs<String>,
    Body(req): Body<EnqueueBatchRequest>,
) -> Result<Json<EnqueueBatchResponse>, ApiError> {
    let queue = QueueName::new(queue)?;
    let items = req
        .items
        .into_iter()
        .enumerate()
        .map(|(index, raw)| {
            EnqueueRequest::from_json(raw.get())
                .and_then(EnqueueRequest::into_enqueue)
                .map_err(item(index))
        })
        .collect::<cairn::Result<Vec<EnqueueItem>>>()?;
    spool::check_enqueue_batch(&items)?;
    let enqueued = state.spool.enqueue_many(&queue, items).await?;
    for e in &enqueued {
        state
            .metrics
            .enqueues
            .with_label_values(&[outcome(e.created)])
            .inc();
    }
    Ok(Json(EnqueueBatchResponse {
        results: enqueued.iter().map(EnqueuedOut::from).collect(),
    }))
}

/// The enqueue metric's label.
fn outcome(created: bool) -> &'static str {
    if created {
        "created"
    } else {
        "existing"
    }
}

/// The run an op of `POST /v1/batch` is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RunRef {
    /// `run_id`: a run stored before the batch.
    Id(RunId),
    /// `run: {"op": N}`: the run enqueue op `N` of the batch answered.
    Op(usize),
}

/// `run: {"op": N}` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpRef {
    #[serde(deserialize_with = "crate::serve::integer::one")]
    op: usize,
}

/// An op of `POST /v1/batch` in core types.
#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        queue: QueueName,
        item: EnqueueItem,
    },
    Append {
        space: SpaceId,
        events: Vec<Event>,
    },
    AppendEvent {
        run: RunRef,
        event_id: RunEventId,
        payload: Vec<u8>,
    },
    Cancel {
        run: RunRef,
    },
    CloseRun {
        run: RunRef,
    },
    SetFact {
        run: RunRef,
        name: FactName,
        value: Vec<u8>,
    },
}

/// An op's fields in the order written, each value as its raw JSON text. A field written twice
/// is refused (`duplicate field`), as the derived readers of the routes' bodies refuse it.
struct Fields(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut names = std::collections::HashSet::new();
                let mut fields = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    if !names.insert(name.clone()) {
                        return Err(de::Error::custom(format_args!("duplicate field `{name}`")));
                    }
                    fields.push((name, map.next_value::<Box<RawValue>>()?));
                }
                Ok(Fields(fields))
            }
        }
        d.deserialize_map(FieldsVisitor)
    }
}

impl Fields {
    /// Removes the text field `name` of an op.
    fn take_text(&mut self, name: &'static str) -> cairn::Result<String> {
        let Some(at) = self.0.iter().position(|(n, _)| n == name) else {
            return Err(Error::invalid("batch op", format!("has no `{name}`")));
        };
        let (_, raw) = self.0.remove(at);
        serde_json::from_str(raw.get())
            .map_err(|_| Error::invalid("batch op", format!("`{name}` is not a string")))
    }

    /// Removes the op's run: exactly one of `run_id` (a run id) and `run` (`{"op": N}`).
    fn take_run(&mut self) -> cairn::Result<RunRef> {
        let id = self.0.iter().position(|(n, _)| n == "run_id");
        let op = self.0.iter().position(|(n, _)| n == "run");
        match (id, op) {
            (Some(_), None) => Ok(RunRef::Id(RunId::parse(&self.take_text("run_id")?)?)),
            (None, Some(at)) => {
                let (_, raw) = self.0.remove(at);
                let r: OpRef = serde_json::from_str(raw.get()).map_err(|e| {
                    Error::invalid(
                        "batch op",
                        format!(
                            "`run` names an earlier enqueue op of the batch as {{\"op\": N}}: {e}"
                        ),
                    )
                })?;
                Ok(RunRef::Op(r.op))
            }
            (None, None) => Err(Error::invalid(
                "batch op",
                "has no `run_id`: name the run by `run_id`, or by `run: {\"op\": N}` for the \
                 run enqueue op N of the batch answered",
            )),
            (Some(_), Some(_)) => Err(Error::invalid(
                "batch op",
                "has both `run_id` and `run`: give exactly one",
            )),
        }
    }

    /// Refuses any field left: the op takes none beyond those read.
    fn no_more(&self, op: &'static str, takes: &str) -> cairn::Result<()> {
        match self.0.first() {
            Some((field, _)) => Err(Error::invalid(
                op,
                format!("unknown field `{field}`: {takes}"),
            )),
            None => Ok(()),
        }
    }

    /// The rest of the fields as JSON text: the body of the op's own route.
    fn into_text(self) -> cairn::Result<String> {
        let len: usize = self
            .0
            .iter()
            .map(|(n, v)| n.len() + v.get().len() + 4)
            .sum();
        let mut text = String::with_capacity(len + 2);
        text.push('{');
        for (i, (name, raw)) in self.0.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            let name = serde_json::to_string(name)
                .map_err(|e| Error::invalid("batch op", e.to_string()))?;
            text.push_str(&name);
            text.push(':');
            text.push_str(raw.get());
        }
        text.push('}');
        Ok(text)
    }

    /// The rest of the fields as the body of the op's own route.
    fn rest_as<T: serde::de::DeserializeOwned>(self, what: &'static str) -> cairn::Result<T> {
        serde_json::from_str(&self.into_text()?).map_err(|e| Error::invalid(what, e.to_string()))
    }
}

impl Op {
    /// Reads one op: `op` names it, the field its route takes from the path (`queue`,
    /// `space`, `run_id`) sits beside the fields of the route's body, read as that route
    /// reads them, from the op's JSON text (a field written twice is refused, `op` included).
    fn from_json(text: &str) -> cairn::Result<Self> {
        if !text.trim_start().starts_with('{') {
            return Err(Error::invalid("batch op", "is not a JSON object"));
        }
        let mut fields: Fields =
            serde_json::from_str(text).map_err(|e| Error::invalid("batch op", e.to_string()))?;
        let op = fields.take_text("op")?;
        match op.as_str() {
            "enqueue" => {
                let queue = QueueName::new(fields.take_text("queue")?)?;
                let item = EnqueueRequest::from_json(&fields.into_text()?)?.into_enqueue()?;
                Ok(Self::Enqueue { queue, item })
            }
            "append" => {
                let space = SpaceId::new(fields.take_text("space")?)?;
                let body: AppendRequest = fields.rest_as("append op")?;
                Ok(Self::Append {
                    space,
                    events: events_in(body.events)?,
                })
            }
            "append_event" => {
                let run = fields.take_run()?;
                let body: RunEventIn = fields.rest_as("append_event op")?;
                let (event_id, payload) = body.into_event()?;
                // The spool refuses it too, but inside the transaction; here it is refused
                // with the op's index before anything is opened.
                spool::check_producer_event_id(&event_id)?;
                Ok(Self::AppendEvent {
                    run,
                    event_id,
                    payload,
                })
            }
            "cancel" => {
                let run = fields.take_run()?;
                fields.no_more(
                    "cancel op",
                    "a cancel takes `op` and `run_id` (or `run`) only",
                )?;
                Ok(Self::Cancel { run })
            }
            "close_run" => {
                let run = fields.take_run()?;
                fields.no_more(
                    "close_run op",
                    "a close takes `op` and `run_id` (or `run`) only",
                )?;
                Ok(Self::CloseRun { run })
            }
            "set_fact" => {
                let run = fields.take_run()?;
                let name = FactName::new(fields.take_text("name")?)?;
                let body: FactIn = fields.rest_as("set_fact op")?;
                let value = bytes_in("fact value", body.value, body.value_b64)?;
                spool::check_payload("fact value", spool::MAX_FACT_VALUE, &value)?;
                Ok(Self::SetFact { run, name, value })
            }
            _ => Err(Error::invalid(
                "batch op",
                "`op` names no op: expected one of enqueue, append, append_event, cancel, \
                 close_run, set_fact",
            )),
        }
    }

    /// The payload bytes the op writes, decoded: an enqueue's payload, a run event's payload,
    /// the payloads of an append's events. A batch's ops carry at most
    /// [`spool::MAX_ENQUEUE_BATCH_BYTES`] of them together.
    fn payload_bytes(&self) -> usize {
        match self {
            Self::Enqueue { item, .. } => item.payload.len(),
            Self::Append { events, .. } => events
                .iter()
                .map(|e| e.payload.len())
                .fold(0, usize::saturating_add),
            Self::AppendEvent { payload, .. } => payload.len(),
            Self::SetFact { value, .. } => value.len(),
            Self::Cancel { .. } | Self::CloseRun { .. } => 0,
        }
    }

    /// The run the op is about, if it is an op on a run.
    fn run(&self) -> Option<RunRef> {
        match self {
            Self::AppendEvent { run, .. }
            | Self::Cancel { run }
            | Self::CloseRun { run }
            | Self::SetFact { run, .. } => Some(*run),
            Self::Enqueue { .. } | Self::Append { .. } => None,
        }
    }

    /// Runs an op on a run (`AppendEvent`, `Cancel`, `CloseRun`, `SetFact`) inside `tx`, on
    /// `run` (its reference resolved).
    async fn run_on(self, run: RunId, tx: &mut Transaction) -> cairn::Result<OpOut> {
        Ok(match self {
            Self::AppendEvent {
                event_id, payload, ..
            } => {
                let a = tx.append_event(run, &event_id, payload).await?;
                OpOut::AppendEvent {
                    seq: a.seq,
                    created: a.created,
                    status: created_status(a.created),
                }
            }
            Self::Cancel { .. } => {
                let (state, cancel_requested) = match tx.cancel(run).await? {
                    CancelOutcome::Canceled => (RunState::Canceled, false),
                    CancelOutcome::Requested => (RunState::Claimed, true),
                };
                OpOut::Cancel {
                    run_id: run.to_string(),
                    state: state.to_string(),
                    cancel_requested,
                }
            }
            Self::CloseRun { .. } => {
                let outcome = match tx.close_run(run).await? {
                    CloseOutcome::Closed => "closed",
                    CloseOutcome::AlreadyClosed => "already_closed",
                };
                OpOut::CloseRun {
                    run_id: run.to_string(),
                    outcome: outcome.into(),
                }
            }
            Self::SetFact { name, value, .. } => {
                let (outcome, set) = match tx.set_fact(run, &name, value).await? {
                    FactOutcome::Set => ("set", true),
                    FactOutcome::AlreadySet => ("already_set", false),
                };
                OpOut::SetFact {
                    run_id: run.to_string(),
                    outcome: outcome.into(),
                    status: created_status(set),
                }
            }
            Self::Enqueue { .. } | Self::Append { .. } => {
                unreachable!("only ops on a run are run on one")
            }
        })
    }
}

/// Refuses a `run: {"op": N}` that does not name an earlier enqueue op of the batch: 422
/// `invalid_reference` with the op's index (the body is well formed; what it names is not
/// there).
fn check_references(ops: &[Op]) -> Result<(), ApiError> {
    for (index, op) in ops.iter().enumerate() {
        if let Some(RunRef::Op(target)) = op.run() {
            if target >= index || !matches!(ops[target], Op::Enqueue { .. }) {
                let mut e = ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_reference",
                    format!(
                        "op {index}: `run` names op {target}, which is not an earlier enqueue \
                         op of the batch; nothing was written"
                    ),
                );
                e.index = Some(index);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Runs enqueues, epoch appends, run events, cancels, closes and facts in one transaction:
/// every op's write commits together, or none does. A batch sees its own writes (two appends
/// to one space chain, a key enqueued twice is one run, `run: {"op": N}` names the run enqueue
/// op N answered) and takes its locks in one global order (module docs), so concurrent batches
/// never deadlock. Results come in the ops' order. Wakes the consumers of each queue that got a
/// run, after the commit.
#[utoipa::path(
    post, path = "/v1/batch", tag = "batch",
    request_body = BatchRequest,
    responses(
        (status = 200, description = "Every op done, committed together; one result per op, in order", body = BatchResponse),
        (status = 400, description = "Invalid input: too many ops or payload bytes (`invalid_input`: more than 1000 ops, or more than 64 MiB of payloads together, decoded: enqueue payloads, run event payloads and epoch event payloads), or an op that does not read (`invalid_batch_item`, naming its `index`); nothing was written", body = ErrorBody),
        (status = 401, description = "No valid token", body = ErrorBody),
        (status = 403, description = "Read-only token", body = ErrorBody),
        (status = 404, description = "An op names a run that does not exist (`unknown_run`, with the op's `index`); the batch was rolled back, nothing was written", body = ErrorBody),
        (status = 409, description = "The store refused an op (`run_closed`: an event for a closed or finished run; `invalid_transition`: a cancel of a run that ended; `fact_conflict`: a fact set to another value), with the op's `index`; the batch was rolled back, nothing was written", body = ErrorBody),
        (status = 413, description = "Body too large; nothing was written", body = ErrorBody),
        (status = 422, description = "An op's `run: {\"op\": N}` names no earlier enqueue op of the batch (`invalid_reference`, with the op's `index`); nothing was written", body = ErrorBody),
        (status = 503, description = "Busy or unavailable; retry (`retryable`, `storage_full`: nothing was written; `unavailable`: the connection to the store broke and the batch may or may not have committed)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn batch(
    State(state): State<AppState>,
    Body(req): Body<BatchRequest>,
) -> Result<Json<BatchResponse>, ApiError> {
    let mut ops = Vec::with_capacity(req.ops.len());
    let mut payload_bytes = 0usize;
    for (index, raw) in req.ops.into_iter().enumerate() {
        let op = Op::from_json(raw.get()).map_err(item(index))?;
        drop(raw);
        payload_bytes = payload_bytes.saturating_add(op.payload_bytes());
        check_payload_bytes(payload_bytes)?;
        ops.push(op);
    }
    if ops.is_empty() {
        return Ok(Json(BatchResponse {
            results: Vec::new(),
        }));
    }
    check_references(&ops)?;
    let results = run_batch(&state, ops).await.map_err(|(index, e)| {
        let e = ApiError::from(e);
        match index {
            Some(index) => e.in_op(index),
            None => e,
        }
    })?;
    for out in &results {
        match out {
            OpOut::Enqueue { created, .. } => {
                state
                    .metrics
                    .enqueues
                    .with_label_values(&[outcome(*created)])
                    .inc();
            }
            OpOut::Append { .. } => state.metrics.appends.inc(),
            OpOut::AppendEvent { .. }
            | OpOut::Cancel { .. }
            | OpOut::CloseRun { .. }
            | OpOut::SetFact { .. } => {}
        }
    }
    Ok(Json(BatchResponse { results }))
}

/// The order a batch runs its ops in (module docs: the lock order), by op index.
struct Plan {
    /// Every space the batch appends to (locked up front).
    spaces: Vec<SpaceId>,
    /// The enqueue ops of each queue, queues in name order, ops in the request's order.
    enqueues: Vec<(QueueName, Vec<usize>)>,
    /// The append ops, in the request's order.
    appends: Vec<usize>,
    /// The ops on runs, in the request's order (sorted by run once references resolve).
    on_runs: Vec<usize>,
}

impl Plan {
    fn new(ops: &[Op]) -> Self {
        let mut plan = Self {
            spaces: Vec::new(),
            enqueues: Vec::new(),
            appends: Vec::new(),
            on_runs: Vec::new(),
        };
        let mut queues: std::collections::BTreeMap<&str, (QueueName, Vec<usize>)> =
            std::collections::BTreeMap::new();
        for (index, op) in ops.iter().enumerate() {
            match op {
                Op::Enqueue { queue, .. } => queues
                    .entry(queue.as_str())
                    .or_insert_with(|| (queue.clone(), Vec::new()))
                    .1
                    .push(index),
                Op::Append { space, .. } => {
                    if !plan.spaces.contains(space) {
                        plan.spaces.push(space.clone());
                    }
                    plan.appends.push(index);
                }
                _ => plan.on_runs.push(index),
            }
        }
        plan.enqueues = queues.into_values().collect();
        plan
    }
}

/// Where an op on a run goes among the batch's ops on runs: by run id, then a run's stream ops
/// (`append_event`, `cancel`, `close_run`: one row, in the request's order) before its facts
/// (by name). Sorting is stable, so equal keys keep the request's order.
fn run_order(op: &Op, run: RunId) -> ([u8; 16], u8, Option<&str>) {
    let bytes = *run.as_bytes();
    match op {
        Op::SetFact { name, .. } => (bytes, 1, Some(name.as_str())),
        _ => (bytes, 0, None),
    }
}

/// Runs `ops` in one transaction in the order of their locks (module docs) and commits it; the
/// results in the ops' order. On error, the index of the op that failed (if an op did) and the
/// error, with the transaction rolled back.
async fn run_batch(
    state: &AppState,
    ops: Vec<Op>,
) -> Result<Vec<OpOut>, (Option<usize>, cairn::Error)> {
    let plan = Plan::new(&ops);
    let mut tx = state.store.begin().await.map_err(|e| (None, e))?;
    match run_planned(&mut tx, &plan, ops).await {
        Ok(results) => {
            tx.commit().await.map_err(|e| (None, e))?;
            Ok(results)
        }
        Err(e) => {
            // The transaction can only roll back now; doing it here frees the connection (and
            // SQLite's writer) before the answer goes out. A failed rollback leaves nothing
            // committed either.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

async fn run_planned(
    tx: &mut Transaction,
    plan: &Plan,
    ops: Vec<Op>,
) -> Result<Vec<OpOut>, (Option<usize>, cairn::Error)> {
    let mut results: Vec<Option<OpOut>> = (0..ops.len()).map(|_| None).collect();
    let mut runs: Vec<Option<RunId>> = vec![None; ops.len()];
    let mut ops: Vec<Option<Op>> = ops.into_iter().map(Some).collect();
    if !plan.spaces.is_empty() {
        tx.lock_spaces(&plan.spaces)
            .await
            .map_err(|e| (Some(plan.appends[0]), e))?;
    }
    for (queue, indices) in &plan.enqueues {
        let items = indices
            .iter()
            .map(|&i| match ops[i].take() {
                Some(Op::Enqueue { item, .. }) => item,
                _ => unreachable!("the plan's enqueues are enqueue ops"),
            })
            .collect();
        // The bulk enqueue's error is the first op's of its queue: it fails (or not) whole.
        let done = tx
            .enqueue_many(queue, items)
            .await
            .map_err(|e| (Some(indices[0]), e))?;
        for (&i, e) in indices.iter().zip(&done) {
            runs[i] = Some(e.run_id);
            results[i] = Some(OpOut::Enqueue {
                run_id: e.run_id.to_string(),
                created: e.created,
                status: created_status(e.created),
            });
        }
    }
    for &i in &plan.appends {
        let Some(Op::Append { space, events }) = ops[i].take() else {
            unreachable!("the plan's appends are append ops")
        };
        let a = tx.append(&space, events).await.map_err(|e| (Some(i), e))?;
        results[i] = Some(OpOut::Append {
            seq: a.seq.0,
            id: a.id.to_string(),
            parents: a.parents.iter().map(ToString::to_string).collect(),
        });
    }
    let mut on_runs: Vec<(usize, RunId)> = plan
        .on_runs
        .iter()
        .map(|&i| {
            let run = match ops[i].as_ref().and_then(Op::run) {
                Some(RunRef::Id(run)) => run,
                // `check_references` made it an earlier enqueue op, answered above.
                Some(RunRef::Op(target)) => runs[target].expect("an enqueue op's run"),
                None => unreachable!("the plan's ops on runs are on a run"),
            };
            (i, run)
        })
        .collect();
    on_runs.sort_by(|a, b| {
        let (x, y) = (ops[a.0].as_ref(), ops[b.0].as_ref());
        run_order(x.expect("an op"), a.1).cmp(&run_order(y.expect("an op"), b.1))
    });
    for (i, run) in on_runs {
        let op = ops[i].take().expect("each op runs once");
        results[i] = Some(op.run_on(run, tx).await.map_err(|e| (Some(i), e))?);
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("every op ran"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn read(v: Value) -> cairn::Result<Op> {
        Op::from_json(&v.to_string())
    }

    fn refusal(v: Value) -> String {
        read(v).unwrap_err().to_string()
    }

    #[test]
    fn ops_read_as_their_routes_read_their_bodies() {
        let run = "0190a5c0-0000-7000-8000-000000000001";
        assert!(matches!(
            read(json!({"op": "enqueue", "queue": "q", "key": "k", "payload": "p"})),
            Ok(Op::Enqueue { .. })
        ));
        assert!(matches!(
            read(json!({"op": "append", "space": "s",
                                  "events": [{"kind": "k", "payload": "p"}]})),
            Ok(Op::Append { .. })
        ));
        assert!(matches!(
            read(json!({"op": "append_event", "run_id": run,
                                  "event_id": "e", "payload_b64": "/wA="})),
            Ok(Op::AppendEvent { .. })
        ));
        assert!(matches!(
            read(json!({"op": "cancel", "run_id": run})),
            Ok(Op::Cancel { .. })
        ));
        assert!(matches!(
            read(json!({"op": "close_run", "run": {"op": 3}})),
            Ok(Op::CloseRun { run: RunRef::Op(3) })
        ));
        assert!(matches!(
            read(json!({"op": "set_fact", "run_id": run, "name": "n", "value_b64": "/wA="})),
            Ok(Op::SetFact { value, .. }) if value == [0xff, 0]
        ));
        for (bad, says) in [
            (json!([]), "not a JSON object"),
            (json!({"queue": "q"}), "has no `op`"),
            (json!({"op": 1}), "`op` is not a string"),
            (json!({"op": "frobnicate"}), "names no op"),
            (
                json!({"op": "enqueue", "key": "k", "payload": "p"}),
                "has no `queue`",
            ),
            (
                json!({"op": "enqueue", "queue": "q", "key": "k", "payload": 5}),
                "invalid type",
            ),
            (
                json!({"op": "enqueue", "queue": "q", "key": "k", "payload": "p", "x": 1}),
                "unknown field `x`",
            ),
            (
                json!({"op": "append", "space": "s", "events": []}),
                "at least one event",
            ),
            (
                json!({"op": "append_event", "run_id": run, "event_id": "cairn:x",
                       "payload": "p"}),
                "reserved",
            ),
            (
                json!({"op": "cancel", "run_id": run, "reason": "r"}),
                "unknown field `reason`",
            ),
            (json!({"op": "cancel", "run_id": "nope"}), "run id"),
            (
                json!({"op": "close_run", "run_id": run, "run": {"op": 0}}),
                "both `run_id` and `run`",
            ),
            (json!({"op": "close_run"}), "has no `run_id`"),
            (
                json!({"op": "close_run", "run": {"op": -1}}),
                "earlier enqueue op",
            ),
            (
                json!({"op": "set_fact", "run_id": run, "value": "v"}),
                "has no `name`",
            ),
            (
                json!({"op": "set_fact", "run_id": run, "name": "n"}),
                "fact value",
            ),
        ] {
            let msg = refusal(bad.clone());
            assert!(msg.contains(says), "{bad}: {msg}");
        }
    }

    #[test]
    fn a_batch_locks_spaces_first_then_queues_by_name_then_runs() {
        let ops: Vec<Op> = [
            json!({"op": "enqueue", "queue": "b", "key": "k", "payload": "p"}),
            json!({"op": "append", "space": "s2", "events": [{"kind": "k", "payload": "p"}]}),
            json!({"op": "enqueue", "queue": "a", "key": "k", "payload": "p"}),
            json!({"op": "close_run", "run": {"op": 0}}),
            json!({"op": "append", "space": "s1", "events": [{"kind": "k", "payload": "p"}]}),
            json!({"op": "enqueue", "queue": "b", "key": "j", "payload": "p"}),
            json!({"op": "append", "space": "s2", "events": [{"kind": "k", "payload": "p"}]}),
        ]
        .into_iter()
        .map(|v| read(v).unwrap())
        .collect();
        let plan = Plan::new(&ops);
        let space = |s: &str| SpaceId::new(s).unwrap();
        assert_eq!(
            plan.spaces,
            [space("s2"), space("s1")],
            "each space once (lock_spaces sorts them)"
        );
        let queues: Vec<(&str, &[usize])> = plan
            .enqueues
            .iter()
            .map(|(q, i)| (q.as_str(), i.as_slice()))
            .collect();
        assert_eq!(queues, [("a", &[2][..]), ("b", &[0, 5][..])]);
        assert_eq!(plan.appends, [1, 4, 6]);
        assert_eq!(plan.on_runs, [3]);
        assert!(check_references(&ops).is_ok());
        let later = [ops[3].clone(), ops[0].clone()];
        let e = check_references(&later).unwrap_err();
        assert_eq!((e.code, e.index), ("invalid_reference", Some(0)));
    }

    #[test]
    fn a_field_written_twice_is_refused() {
        for (text, field) in [
            (
                r#"{"op":"cancel","op":"enqueue","queue":"q","key":"k","payload":"p"}"#,
                "op",
            ),
            (
                r#"{"op":"enqueue","queue":"q","key":"a","key":"b","payload":"p"}"#,
                "key",
            ),
            (
                r#"{"op":"append","space":"s","space":"t","events":[]}"#,
                "space",
            ),
        ] {
            let msg = Op::from_json(text).unwrap_err().to_string();
            assert!(
                msg.contains(&format!("duplicate field `{field}`")),
                "{text}: {msg}"
            );
        }
    }

    #[test]
    fn batches_over_their_count_are_refused_as_they_are_read() {
        let ops = |n: usize| format!(r#"{{"ops":[{}]}}"#, vec!["0"; n].join(","));
        let read = serde_json::from_str::<BatchRequest>(&ops(MAX_BATCH_OPS)).unwrap();
        assert_eq!(read.ops.len(), MAX_BATCH_OPS, "exactly the limit is read");
        let e = serde_json::from_str::<BatchRequest>(&ops(MAX_BATCH_OPS + 1))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("the batch holds more than 1000 items"), "{e}");
        // The refusal comes at item 1001 (column ~2010), not after the body's 200,000 bytes.
        let e = serde_json::from_str::<BatchRequest>(&ops(MAX_BATCH_OPS * 100))
            .err()
            .unwrap();
        assert!(e.column() < 3 * MAX_BATCH_OPS, "{e}");
        let items = |n: usize| format!(r#"{{"items":[{}]}}"#, vec!["{}"; n].join(","));
        let read = serde_json::from_str::<EnqueueBatchRequest>(&items(spool::MAX_ENQUEUE_BATCH));
        assert_eq!(read.unwrap().items.len(), spool::MAX_ENQUEUE_BATCH);
        let e = serde_json::from_str::<EnqueueBatchRequest>(&items(spool::MAX_ENQUEUE_BATCH + 1))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("the enqueue batch holds more than 10000 items"),
            "{e}"
        );
        assert!(check_payload_bytes(spool::MAX_ENQUEUE_BATCH_BYTES).is_ok());
        let e = check_payload_bytes(spool::MAX_ENQUEUE_BATCH_BYTES + 1).unwrap_err();
        assert!(matches!(e, Error::InvalidInput { .. }), "{e}");
        let e = item(7)(Error::invalid("x", "y"));
        assert!(matches!(e, Error::InvalidBatchItem { index: 7, .. }), "{e}");
    }
}

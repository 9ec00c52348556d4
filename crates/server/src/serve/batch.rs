//! Batches of writes: `POST /v1/queues/{queue}/runs/batch` (many runs of one queue in one
//! `Spool::enqueue_many`) and `POST /v1/batch` (enqueues, epoch appends, run events and
//! cancels in one store transaction).
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
//! `events_in`, `RunEventIn::into_event`), so a batch item and a single request are one
//! shape under one set of rules. The tests are `crates/server/tests/batch.rs`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use cairn::spool::{self, CancelOutcome, EnqueueItem, Enqueued};
use cairn::{Error, Event, QueueName, RunEventId, RunId, RunState, SpaceId, Transaction};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::error::{ApiError, Body, PathArgs};
use super::json::{events_in, AppendRequest, EnqueueRequest, ErrorBody, QueuePath, RunEventIn};
use super::routes::AppState;

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
    /// an object whose `op` is `enqueue`, `append`, `append_event` or `cancel` (see `BatchOp`).
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
        (status = 503, description = "Busy or unavailable; nothing was written, retry", body = ErrorBody),
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
        run: RunId,
        event_id: RunEventId,
        payload: Vec<u8>,
    },
    Cancel {
        run: RunId,
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
                let run = RunId::parse(&fields.take_text("run_id")?)?;
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
                let run = RunId::parse(&fields.take_text("run_id")?)?;
                if let Some((field, _)) = fields.0.first() {
                    return Err(Error::invalid(
                        "cancel op",
                        format!("unknown field `{field}`: a cancel takes `op` and `run_id` only"),
                    ));
                }
                Ok(Self::Cancel { run })
            }
            _ => Err(Error::invalid(
                "batch op",
                "`op` names no op: expected one of enqueue, append, append_event, cancel",
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
            Self::Cancel { .. } => 0,
        }
    }

    /// Runs the op inside `tx`.
    async fn run(self, tx: &mut Transaction) -> cairn::Result<OpOut> {
        Ok(match self {
            Self::Enqueue { queue, item } => {
                let e = tx
                    .enqueue(&queue, &item.key, item.payload, item.options)
                    .await?;
                OpOut::Enqueue {
                    run_id: e.run_id.to_string(),
                    created: e.created,
                    status: created_status(e.created),
                }
            }
            Self::Append { space, events } => {
                let a = tx.append(&space, events).await?;
                OpOut::Append {
                    seq: a.seq.0,
                    id: a.id.to_string(),
                    parents: a.parents.iter().map(ToString::to_string).collect(),
                }
            }
            Self::AppendEvent {
                run,
                event_id,
                payload,
            } => {
                let a = tx.append_event(run, &event_id, payload).await?;
                OpOut::AppendEvent {
                    seq: a.seq,
                    created: a.created,
                    status: created_status(a.created),
                }
            }
            Self::Cancel { run } => {
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
        })
    }
}

/// Runs enqueues, epoch appends, run events and cancels in one transaction: every op's write
/// commits together, or none does. Ops run in order (a later op sees an earlier one's writes:
/// two appends to one space chain, a key enqueued twice is one run). Wakes the consumers of
/// each queue that got a run, after the commit.
#[utoipa::path(
    post, path = "/v1/batch", tag = "batch",
    request_body = BatchRequest,
    responses(
        (status = 200, description = "Every op done, committed together; one result per op, in order", body = BatchResponse),
        (status = 400, description = "Invalid input: too many ops or payload bytes (`invalid_input`: more than 1000 ops, or more than 64 MiB of payloads together, decoded: enqueue payloads, run event payloads and epoch event payloads), or an op that does not read (`invalid_batch_item`, naming its `index`); nothing was written", body = ErrorBody),
        (status = 401, description = "No valid token", body = ErrorBody),
        (status = 403, description = "Read-only token", body = ErrorBody),
        (status = 404, description = "An op names a run that does not exist (`unknown_run`, with the op's `index`); the batch was rolled back, nothing was written", body = ErrorBody),
        (status = 409, description = "The store refused an op (`run_closed`: an event for a closed or finished run; `invalid_transition`: a cancel of a run that ended), with the op's `index`; the batch was rolled back, nothing was written", body = ErrorBody),
        (status = 413, description = "Body too large; nothing was written", body = ErrorBody),
        (status = 503, description = "Busy or unavailable; nothing was written, retry", body = ErrorBody),
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
    let mut round = 1;
    let results = loop {
        match run_batch(&state, &ops).await {
            // The server broke a deadlock with another transaction by aborting this one
            // (Postgres' SQLSTATE 40P01): nothing of it was written; run it again once the
            // other has had time to finish (a prompt rerun meets it again, in the same order).
            Err((_, e)) if round < DEADLOCK_ROUNDS && is_deadlock(&e) => {
                tokio::time::sleep(deadlock_pause(round)).await;
                round += 1;
            }
            Err((index, e)) => {
                let e = ApiError::from(e);
                return Err(match index {
                    Some(index) => e.in_op(index),
                    None => e,
                });
            }
            Ok(results) => break results,
        }
    };
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
            OpOut::AppendEvent { .. } | OpOut::Cancel { .. } => {}
        }
    }
    Ok(Json(BatchResponse { results }))
}

/// How often `POST /v1/batch` runs a batch the store aborted to break a deadlock.
const DEADLOCK_ROUNDS: u32 = 5;

/// The pause before rerunning a batch after its `round`th deadlock: 100 ms times the round,
/// plus up to 100 ms of jitter so that two victims do not rerun in step.
fn deadlock_pause(round: u32) -> std::time::Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::time::Duration::from_millis(
        100 * u64::from(round) + u64::from(nanos % 100_000_000) / 1_000_000,
    )
}

/// Whether `e` says the store aborted the transaction to break a deadlock (Postgres' SQLSTATE
/// 40P01): running it again is safe, nothing of it was written.
fn is_deadlock(e: &cairn::Error) -> bool {
    matches!(e, cairn::Error::Retryable { detail, .. } if detail.contains("40P01"))
}

/// Runs `ops` in one transaction and commits it; on error, the index of the op that failed (if
/// an op did) and the error, with the transaction rolled back.
async fn run_batch(
    state: &AppState,
    ops: &[Op],
) -> Result<Vec<OpOut>, (Option<usize>, cairn::Error)> {
    let mut tx = state.store.begin().await.map_err(|e| (None, e))?;
    let mut results = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        match op.clone().run(&mut tx).await {
            Ok(out) => results.push(out),
            Err(e) => {
                // The transaction can only roll back now; doing it here frees the connection
                // (and SQLite's writer) before the answer goes out. A failed rollback leaves
                // nothing committed either.
                let _ = tx.rollback().await;
                return Err((Some(index), e));
            }
        }
    }
    tx.commit().await.map_err(|e| (None, e))?;
    Ok(results)
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
        ] {
            let msg = refusal(bad.clone());
            assert!(msg.contains(says), "{bad}: {msg}");
        }
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

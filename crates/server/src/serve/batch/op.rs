//! An op of `POST /v1/batch`, read from its raw JSON text by the rules of its own route, and the
//! checks made on the ops before the transaction opens (references, payload bytes).

use axum::http::StatusCode;
use cairn::spool::{self, CancelOutcome, CloseOutcome, EnqueueItem, FactOutcome};
use cairn::{Error, Event, FactName, QueueName, RunEventId, RunId, RunState, SpaceId, Transaction};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::wire::{created_status, OpOut};
use crate::serve::error::ApiError;
use crate::serve::json::{bytes_in, events_in, AppendRequest, EnqueueRequest, FactIn, RunEventIn};

/// Refuses a batch whose ops' payloads, read so far, exceed
/// [`spool::MAX_ENQUEUE_BATCH_BYTES`] together, before the transaction opens.
pub(super) fn check_payload_bytes(bytes: usize) -> cairn::Result<()> {
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
pub(super) fn item(index: usize) -> impl Fn(Error) -> Error {
    move |e| Error::InvalidBatchItem {
        index,
        error: Box::new(e),
    }
}

/// The run an op of `POST /v1/batch` is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RunRef {
    /// `run_id`: a run stored before the batch.
    Id(RunId),
    /// `run: {"op": N}`: the run enqueue op `N` of the batch answered.
    Op(usize),
}

/// `run: {"op": N}` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OpRef {
    #[serde(deserialize_with = "crate::serve::integer::one")]
    op: usize,
}

/// An op of `POST /v1/batch` in core types.
#[derive(Clone, Debug)]
pub(super) enum Op {
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
pub(super) struct Fields(Vec<(String, Box<RawValue>)>);

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
    pub(super) fn from_json(text: &str) -> cairn::Result<Self> {
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
    pub(super) fn payload_bytes(&self) -> usize {
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
    pub(super) fn run(&self) -> Option<RunRef> {
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
    pub(super) async fn run_on(self, run: RunId, tx: &mut Transaction) -> cairn::Result<OpOut> {
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
pub(super) fn check_references(ops: &[Op]) -> Result<(), ApiError> {
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

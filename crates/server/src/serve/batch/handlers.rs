//! The two batch routes: `POST /v1/queues/{queue}/runs/batch` and `POST /v1/batch`.

use axum::extract::State;
use axum::Json;
use cairn::spool::{self, EnqueueItem};
use cairn::QueueName;

use super::op::{check_payload_bytes, check_references, item, Op};
use super::plan::run_batch;
use super::wire::{
    BatchRequest, BatchResponse, EnqueueBatchRequest, EnqueueBatchResponse, EnqueuedOut, OpOut,
};
use crate::serve::error::ApiError;
use crate::serve::extract::{Body, PathArgs};
use crate::serve::json::{EnqueueRequest, ErrorBody, QueuePath, TraceParentHeader};
use crate::serve::responses::{BatchBusy, NoToken, ReadOnly, TooLargeNothingWritten};
use crate::serve::runs::traceparent;
use crate::serve::state::AppState;

/// Enqueues many runs of a queue at once, atomically.
#[utoipa::path(
    post, path = "/v1/queues/{queue}/runs/batch", tag = "spool",
    params(QueuePath, TraceParentHeader),
    request_body = EnqueueBatchRequest,
    responses(
        (status = 200, description = "Every item enqueued or found, in one transaction; one result per item, in order", body = EnqueueBatchResponse),
        (status = 400, description = "Invalid input: too many items or payload bytes (`invalid_input`), or an item that does not read (`invalid_batch_item`, naming its `index`); nothing was written", body = ErrorBody),
        NoToken,
        ReadOnly,
        TooLargeNothingWritten,
        BatchBusy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn enqueue_batch(
    State(state): State<AppState>,
    PathArgs(queue): PathArgs<String>,
    headers: axum::http::HeaderMap,
    Body(req): Body<EnqueueBatchRequest>,
) -> Result<Json<EnqueueBatchResponse>, ApiError> {
    let queue = QueueName::new(queue)?;
    let trace = traceparent(&headers)?;
    let items = req
        .items
        .into_iter()
        .enumerate()
        .map(|(index, raw)| {
            EnqueueRequest::from_json(raw.get())
                .and_then(EnqueueRequest::into_enqueue)
                .map(|mut e| {
                    e.options.traceparent.clone_from(&trace);
                    e
                })
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
pub(super) fn outcome(created: bool) -> &'static str {
    if created {
        "created"
    } else {
        "existing"
    }
}

/// Runs enqueues, epoch appends, run events, cancels, closes and facts in one transaction:
/// every op's write commits together, or none does. A batch sees its own writes (two appends
/// to one space chain, a key enqueued twice is one run, `run: {"op": N}` names the run enqueue
/// op N answered) and takes its locks in one global order (module docs), so concurrent batches
/// never deadlock. Results come in the ops' order. Wakes the consumers of each queue that got a
/// run, after the commit.
#[utoipa::path(
    post, path = "/v1/batch", tag = "batch",
    params(TraceParentHeader),
    request_body = BatchRequest,
    responses(
        (status = 200, description = "Every op done, committed together; one result per op, in order", body = BatchResponse),
        (status = 400, description = "Invalid input: too many ops or payload bytes (`invalid_input`: more than 1000 ops, or more than 64 MiB of payloads together, decoded: enqueue payloads, run event payloads and epoch event payloads), or an op that does not read (`invalid_batch_item`, naming its `index`); nothing was written", body = ErrorBody),
        NoToken,
        ReadOnly,
        (status = 404, description = "An op names a run that does not exist (`unknown_run`, with the op's `index`); the batch was rolled back, nothing was written", body = ErrorBody),
        (status = 409, description = "The store refused an op (`run_closed`: an event for a closed or finished run; `invalid_transition`: a cancel of a run that ended; `fact_conflict`: a fact set to another value), with the op's `index`; the batch was rolled back, nothing was written", body = ErrorBody),
        TooLargeNothingWritten,
        (status = 422, description = "An op's `run: {\"op\": N}` names no earlier enqueue op of the batch (`invalid_reference`, with the op's `index`); nothing was written", body = ErrorBody),
        BatchBusy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn batch(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    Body(req): Body<BatchRequest>,
) -> Result<Json<BatchResponse>, ApiError> {
    let trace = traceparent(&headers)?;
    let mut ops = Vec::with_capacity(req.ops.len());
    let mut payload_bytes = 0usize;
    for (index, raw) in req.ops.into_iter().enumerate() {
        let mut op = Op::from_json(raw.get()).map_err(item(index))?;
        if let Op::Enqueue { item, .. } = &mut op {
            item.options.traceparent.clone_from(&trace);
        }
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
            OpOut::Append { .. } => {
                state.metrics.appends.inc();
                state.sync.changed();
            }
            OpOut::AppendEvent { .. }
            | OpOut::Cancel { .. }
            | OpOut::CloseRun { .. }
            | OpOut::SetFact { .. } => {}
        }
    }
    Ok(Json(BatchResponse { results }))
}

//! The spool's routes: enqueue, run, run events, facts, claim, heartbeat, ack, nack, cancel,
//! close, and the operator's retry and discard of parked runs.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use cairn::spool::{self, CancelOutcome, FactOutcome};
use cairn::{FactName, QueueName, RunId, RunState};

use super::error::ApiError;
use super::extract::{Body, Params, PathArgs};
use super::json::{
    lease_token, AckRequest, ClaimRequest, ClaimResponse, ClaimedOut, EnqueueRequest,
    EnqueueResponse, ErrorBody, FactIn, FactOut, FactPath, FactSet, FactsResponse,
    HeartbeatRequest, HeartbeatResponse, Nack, NackRequest, QueuePath, RunEventAppended,
    RunEventIn, RunEventOut, RunEventsQuery, RunEventsResponse, RunOut, RunPath, RunStateResponse,
    TraceParentHeader,
};
use super::page;
use super::responses::{
    Busy, InvalidInput, LeaseLost, MalformedId, NoSuchRun, NoToken, NotParked, ReadOnly, TooLarge,
};
use super::state::AppState;

/// Run events per page when a request names no limit.
const DEFAULT_EVENTS_LIMIT: usize = 100;

/// The W3C `traceparent` header, when sent: stored with the run (each run of a batch), so the
/// consumer that handles it continues the enqueuer's trace. One that does not read, or more
/// than one, is refused (400).
pub(crate) fn traceparent(
    headers: &axum::http::HeaderMap,
) -> Result<Option<spool::TraceParent>, ApiError> {
    let mut all = headers.get_all("traceparent").iter();
    let (Some(value), None) = (all.next(), all.next()) else {
        return match headers.contains_key("traceparent") {
            false => Ok(None),
            true => Err(cairn::Error::invalid(
                "traceparent",
                "send one traceparent header, not several",
            )
            .into()),
        };
    };
    let text = value
        .to_str()
        .map_err(|_| cairn::Error::invalid("traceparent", "must be ASCII"))?;
    Ok(Some(spool::TraceParent::parse(text)?))
}

fn run_id(s: &str) -> Result<RunId, ApiError> {
    Ok(RunId::parse(s)?)
}

/// Enqueues a run, or finds the run already under its key.
#[utoipa::path(
    post, path = "/v1/queues/{queue}/runs", tag = "spool",
    params(QueuePath, TraceParentHeader),
    request_body = EnqueueRequest,
    responses(
        (status = 201, description = "Created", body = EnqueueResponse),
        (status = 200, description = "A run with this key exists; its id", body = EnqueueResponse),
        InvalidInput,
        NoToken,
        ReadOnly,
        TooLarge,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn enqueue(
    State(state): State<AppState>,
    PathArgs(queue): PathArgs<String>,
    headers: axum::http::HeaderMap,
    Body(req): Body<EnqueueRequest>,
) -> Result<(StatusCode, Json<EnqueueResponse>), ApiError> {
    let queue = QueueName::new(queue)?;
    let spool::EnqueueItem {
        key,
        payload,
        mut options,
    } = req.into_enqueue()?;
    options.traceparent = traceparent(&headers)?;
    let enqueued = state.spool.enqueue(&queue, &key, payload, options).await?;
    state
        .metrics
        .enqueues
        .with_label_values(&[if enqueued.created {
            "created"
        } else {
            "existing"
        }])
        .inc();
    let status = if enqueued.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(EnqueueResponse {
            run_id: enqueued.run_id.to_string(),
            created: enqueued.created,
        }),
    ))
}

/// Everything about one run but its payload and events.
#[utoipa::path(
    get, path = "/v1/runs/{id}", tag = "spool",
    params(RunPath),
    responses(
        (status = 200, description = "The run", body = RunOut),
        MalformedId,
        NoToken,
        NoSuchRun,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn run(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
) -> Result<Json<RunOut>, ApiError> {
    let id = run_id(&id)?;
    let run = state
        .spool
        .run(id)
        .await?
        .ok_or(cairn::Error::UnknownRun { run: id })?;
    Ok(Json(RunOut::from(&run)))
}

/// Appends an event to a run's stream. An event id the run still holds is not appended again
/// (200, its first seq and payload kept, whatever this payload is); once the event has been
/// delivered and removed, or removed by retention, its id is new again and appends a new event.
#[utoipa::path(
    post, path = "/v1/runs/{id}/events", tag = "spool",
    params(RunPath),
    request_body = RunEventIn,
    responses(
        (status = 201, description = "Appended", body = RunEventAppended),
        (status = 200, description = "The run still holds this event id: nothing appended, its first seq and payload kept", body = RunEventAppended),
        InvalidInput,
        NoToken,
        ReadOnly,
        NoSuchRun,
        (status = 409, description = "The run takes no more events: it was closed or it finished (`run_closed`); nothing was appended", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn append_event(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
    Body(req): Body<RunEventIn>,
) -> Result<(StatusCode, Json<RunEventAppended>), ApiError> {
    let id = run_id(&id)?;
    let (event_id, payload) = req.into_event()?;
    let appended = state.spool.append_event(id, &event_id, payload).await?;
    let status = if appended.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(RunEventAppended {
            seq: appended.seq,
            created: appended.created,
        }),
    ))
}

/// The run's stored events after a seq.
#[utoipa::path(
    get, path = "/v1/runs/{id}/events", tag = "spool",
    params(RunPath, RunEventsQuery),
    responses(
        (status = 200, description = "Events in seq order", body = RunEventsResponse),
        InvalidInput,
        NoToken,
        NoSuchRun,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn events(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
    Params(q): Params<RunEventsQuery>,
) -> Result<Json<RunEventsResponse>, ApiError> {
    let id = run_id(&id)?;
    let limit = q.limit.unwrap_or(DEFAULT_EVENTS_LIMIT);
    spool::check_limit(limit)?;
    // At most `limit` events and `limits.max_page_bytes` (the first goes in whatever its
    // size): the store reads no more than that many payload bytes, and the JSON, which can be
    // larger (`page`), is cut at the same budget.
    let read = state
        .spool
        .events_within(id, q.after.unwrap_or(0), limit, state.page_bytes)
        .await?;
    let mut events = page::JsonArray::new(state.page_bytes);
    for e in &read {
        if !events.offer(&page::unit([RunEventOut::from(e)])?) {
            break;
        }
    }
    Ok(Json(RunEventsResponse {
        events: events.close()?,
    }))
}

/// Sets a named fact on a run, once (first writer wins).
#[utoipa::path(
    put, path = "/v1/runs/{id}/facts/{name}", tag = "spool",
    params(FactPath),
    request_body = FactIn,
    responses(
        (status = 201, description = "Set", body = FactSet),
        (status = 200, description = "Already set to this value", body = FactSet),
        InvalidInput,
        NoToken,
        ReadOnly,
        NoSuchRun,
        (status = 409, description = "Set to another value", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn set_fact(
    State(state): State<AppState>,
    PathArgs((id, name)): PathArgs<(String, String)>,
    Body(req): Body<FactIn>,
) -> Result<(StatusCode, Json<FactSet>), ApiError> {
    let id = run_id(&id)?;
    let name = FactName::new(name)?;
    let value = req.into_value()?;
    let (status, outcome) = match state.spool.set_fact(id, &name, value).await? {
        FactOutcome::Set => (StatusCode::CREATED, "set"),
        FactOutcome::AlreadySet => (StatusCode::OK, "already_set"),
    };
    Ok((
        status,
        Json(FactSet {
            outcome: outcome.into(),
        }),
    ))
}

/// The run's facts.
#[utoipa::path(
    get, path = "/v1/runs/{id}/facts", tag = "spool",
    params(RunPath),
    responses(
        (status = 200, description = "The facts by name", body = FactsResponse),
        MalformedId,
        NoToken,
        NoSuchRun,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn facts(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
) -> Result<Json<FactsResponse>, ApiError> {
    let id = run_id(&id)?;
    let facts = state.spool.facts(id).await?;
    Ok(Json(FactsResponse {
        facts: facts
            .iter()
            .map(|(name, value)| {
                let (value, value_b64) = super::json::bytes_out(value);
                FactOut {
                    name: name.to_string(),
                    value,
                    value_b64,
                }
            })
            .collect(),
    }))
}

/// Claims due runs of a queue under a lease.
#[utoipa::path(
    post, path = "/v1/queues/{queue}/claim", tag = "spool",
    params(QueuePath),
    request_body = ClaimRequest,
    responses(
        (status = 200, description = "The claimed runs (empty: nothing due)", body = ClaimResponse),
        InvalidInput,
        NoToken,
        ReadOnly,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn claim(
    State(state): State<AppState>,
    PathArgs(queue): PathArgs<String>,
    Body(req): Body<ClaimRequest>,
) -> Result<Json<ClaimResponse>, ApiError> {
    let queue = QueueName::new(queue)?;
    let (consumer, lease, limit) = req.into_claim()?;
    let claimed = state.spool.claim(&queue, &consumer, lease, limit).await?;
    state.metrics.claims.inc_by(claimed.len() as u64);
    Ok(Json(ClaimResponse {
        runs: claimed.iter().map(ClaimedOut::from).collect(),
    }))
}

/// Extends the lease on a claimed run.
#[utoipa::path(
    post, path = "/v1/runs/{id}/heartbeat", tag = "spool",
    params(RunPath),
    request_body = HeartbeatRequest,
    responses(
        (status = 200, description = "Extended", body = HeartbeatResponse),
        InvalidInput,
        NoToken,
        ReadOnly,
        NoSuchRun,
        LeaseLost,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn heartbeat(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
    Body(req): Body<HeartbeatRequest>,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    let id = run_id(&id)?;
    let (token, lease) = req.into_heartbeat()?;
    let hb = state.spool.heartbeat(id, token, lease).await?;
    Ok(Json(HeartbeatResponse {
        expires_at_us: hb.expires_at.as_unix_micros(),
        cancel_requested: hb.cancel_requested,
    }))
}

/// Reports success: the run becomes `succeeded` (idempotent).
#[utoipa::path(
    post, path = "/v1/runs/{id}/ack", tag = "spool",
    params(RunPath),
    request_body = AckRequest,
    responses(
        (status = 200, description = "Succeeded", body = RunStateResponse),
        InvalidInput,
        NoToken,
        ReadOnly,
        NoSuchRun,
        (status = 409, description = "Lease lost or run ended otherwise", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn ack(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
    Body(req): Body<AckRequest>,
) -> Result<Json<RunStateResponse>, ApiError> {
    let id = run_id(&id)?;
    let token = lease_token(&req.token)?;
    state.spool.ack(id, token).await?;
    state.metrics.acks.inc();
    Ok(Json(RunStateResponse {
        run_id: id.to_string(),
        state: RunState::Succeeded.to_string(),
        retry_at_us: None,
        cancel_requested: false,
    }))
}

/// Gives a claimed run back: retry (after the backoff or `retry_after_ms`), park or fail it.
#[utoipa::path(
    post, path = "/v1/runs/{id}/nack", tag = "spool",
    params(RunPath),
    request_body = NackRequest,
    responses(
        (status = 200, description = "Where the run went", body = RunStateResponse),
        InvalidInput,
        NoToken,
        ReadOnly,
        NoSuchRun,
        LeaseLost,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn nack(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
    Body(req): Body<NackRequest>,
) -> Result<Json<RunStateResponse>, ApiError> {
    let id = run_id(&id)?;
    let Nack {
        token,
        kind,
        label,
        reason,
        retry_after,
    } = req.into_nack()?;
    let nacked = match retry_after {
        Some(delay) => state.spool.retry_after(id, token, &reason, delay).await?,
        None => state.spool.nack(id, token, kind, &reason).await?,
    };
    state.metrics.nacks.with_label_values(&[label]).inc();
    Ok(Json(RunStateResponse {
        run_id: id.to_string(),
        state: nacked.state.to_string(),
        retry_at_us: nacked.retry_at.map(|t| t.as_unix_micros()),
        cancel_requested: false,
    }))
}

/// Cancels a run: a queued run ends `canceled`; a claimed one gets a cancel request.
#[utoipa::path(
    post, path = "/v1/runs/{id}/cancel", tag = "spool",
    params(RunPath),
    responses(
        (status = 200, description = "Canceled or requested", body = RunStateResponse),
        MalformedId,
        NoToken,
        ReadOnly,
        NoSuchRun,
        (status = 409, description = "The run already ended", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
) -> Result<Json<RunStateResponse>, ApiError> {
    let id = run_id(&id)?;
    let (state_now, requested) = match state.spool.cancel(id).await? {
        CancelOutcome::Canceled => (RunState::Canceled, false),
        CancelOutcome::Requested => (RunState::Claimed, true),
    };
    Ok(Json(RunStateResponse {
        run_id: id.to_string(),
        state: state_now.to_string(),
        retry_at_us: None,
        cancel_requested: requested,
    }))
}

/// What `POST /v1/runs/{id}/close` did.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(crate) struct RunClosedResponse {
    /// The run.
    pub(crate) run_id: String,
    /// `closed`, or `already_closed` when it was closed before (nothing was written).
    pub(crate) outcome: String,
}

/// Closes a run's event stream: its producer has appended its last event. From then on an
/// append answers 409 `run_closed`, and the delivery worker finishes the run once every event
/// is delivered (a run that is never closed is never finished by delivery).
#[utoipa::path(
    post, path = "/v1/runs/{id}/close", tag = "spool",
    params(RunPath),
    responses(
        (status = 200, description = "Closed (or closed already)", body = RunClosedResponse),
        MalformedId,
        NoToken,
        ReadOnly,
        NoSuchRun,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn close(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
) -> Result<Json<RunClosedResponse>, ApiError> {
    let id = run_id(&id)?;
    let outcome = match state.spool.close_run(id).await? {
        spool::CloseOutcome::Closed => "closed",
        spool::CloseOutcome::AlreadyClosed => "already_closed",
    };
    Ok(Json(RunClosedResponse {
        run_id: id.to_string(),
        outcome: outcome.into(),
    }))
}

/// Who an operator's action over HTTP records as having asked.
const HTTP_OPERATOR: &str = "http";

/// What `POST /v1/runs/{id}/retry` and `POST /v1/runs/{id}/discard` did.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(crate) struct UnparkedResponse {
    /// The run.
    pub(crate) run_id: String,
    /// Where it is now: `queued` (retried) or `canceled` (discarded).
    pub(crate) state: String,
    /// Why it had been parked (the run keeps this reason).
    pub(crate) parked_reason: Option<String>,
    /// The seq of the run event that records the action (id `cairn:retry:<seq>` or
    /// `cairn:discard:<seq>`).
    pub(crate) event_seq: u64,
    /// When the action happened; for a retry, when the run is due (microseconds since the Unix
    /// epoch).
    pub(crate) at_us: i64,
}

impl From<(RunId, spool::Unparked)> for UnparkedResponse {
    fn from((id, u): (RunId, spool::Unparked)) -> Self {
        Self {
            run_id: id.to_string(),
            state: u.state.to_string(),
            parked_reason: u.parked_reason,
            event_seq: u.event_seq,
            at_us: u.at.as_unix_micros(),
        }
    }
}

/// Sends a parked run back to its queue, due at once with a fresh attempt budget (its reason
/// stays), recorded as an event of the run (`by`: `http`). Wakes the queue's consumers.
#[utoipa::path(
    post, path = "/v1/runs/{id}/retry", tag = "spool",
    params(RunPath),
    responses(
        (status = 200, description = "Retried", body = UnparkedResponse),
        MalformedId,
        NoToken,
        ReadOnly,
        NoSuchRun,
        NotParked,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn retry(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
) -> Result<Json<UnparkedResponse>, ApiError> {
    let id = run_id(&id)?;
    let done = state.spool.retry_parked(id, HTTP_OPERATOR).await?;
    Ok(Json((id, done).into()))
}

/// Gives up on a parked run for good: it ends `canceled` (its reason stays), recorded as an
/// event of the run (`by`: `http`).
#[utoipa::path(
    post, path = "/v1/runs/{id}/discard", tag = "spool",
    params(RunPath),
    responses(
        (status = 200, description = "Discarded", body = UnparkedResponse),
        MalformedId,
        NoToken,
        ReadOnly,
        NoSuchRun,
        NotParked,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn discard(
    State(state): State<AppState>,
    PathArgs(id): PathArgs<String>,
) -> Result<Json<UnparkedResponse>, ApiError> {
    let id = run_id(&id)?;
    let done = state.spool.discard(id, HTTP_OPERATOR).await?;
    Ok(Json((id, done).into()))
}

/// Query of `POST /v1/queues/{queue}/parked/retry`.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct RetryParkedQuery {
    /// Only parked runs whose reason contains this text (default: every parked run).
    pub(crate) reason_like: Option<String>,
}

/// What `POST /v1/queues/{queue}/parked/retry` did.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(crate) struct BulkRetryResponse {
    /// Parked runs retried, each with its own event.
    pub(crate) retried: u64,
    /// Parked runs left parked: their reason does not contain `reason_like`.
    pub(crate) unmatched: u64,
    /// Runs no longer parked when reached (another operator or retention got there first).
    pub(crate) skipped: u64,
    /// Parked runs left parked because their own retry was refused (a conflict: the run holds
    /// an event under the id the retry records with); the pass went on past them.
    pub(crate) failed: u64,
    /// The first 100 of the `failed` runs' ids.
    pub(crate) failed_runs: Vec<String>,
}

/// Retries the queue's parked runs (those whose reason contains `reason_like`, or all), each
/// as `POST /v1/runs/{id}/retry` does, in pages; each retry is atomic, the whole pass is not
/// (on an error the runs retried so far stay retried; repeating the call retries the rest).
#[utoipa::path(
    post, path = "/v1/queues/{queue}/parked/retry", tag = "spool",
    params(QueuePath, RetryParkedQuery),
    responses(
        (status = 200, description = "What was retried", body = BulkRetryResponse),
        InvalidInput,
        NoToken,
        ReadOnly,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn retry_parked(
    State(state): State<AppState>,
    PathArgs(queue): PathArgs<String>,
    Params(q): Params<RetryParkedQuery>,
) -> Result<Json<BulkRetryResponse>, ApiError> {
    let queue = QueueName::new(queue)?;
    let done = spool::retry_parked_runs(
        state.spool.as_ref(),
        &queue,
        q.reason_like.as_deref(),
        HTTP_OPERATOR,
    )
    .await?;
    Ok(Json(BulkRetryResponse {
        retried: done.retried,
        unmatched: done.unmatched,
        skipped: done.skipped,
        failed: done.failed,
        failed_runs: done.failed_runs.iter().map(ToString::to_string).collect(),
    }))
}

//! The flow-control routes (pause, resume and limits of a queue) and the schedule routes:
//! each a thin call of the spool's method of the same name.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use cairn::spool::ScheduleName;
use cairn::QueueName;

use super::error::ApiError;
use super::extract::{Body, PathArgs};
use super::json::{
    QueueFlowOut, QueueFlowsResponse, QueueLimitsIn, QueuePath, ScheduleIn, ScheduleOut,
    SchedulePath, SchedulesResponse,
};
use super::responses::{Busy, InvalidInput, InvalidSchedule, NoSuchSchedule, NoToken, ReadOnly};
use super::state::AppState;

/// Every queue with a stored flow: paused, or with a limit (a queue set back to running and
/// unlimited is not listed).
#[utoipa::path(
    get, path = "/v1/queues", tag = "flow",
    responses(
        (status = 200, description = "The queues' flows, by name", body = QueueFlowsResponse),
        NoToken,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn queues(
    State(state): State<AppState>,
) -> Result<Json<QueueFlowsResponse>, ApiError> {
    let flows = state.spool.queue_flows().await?;
    Ok(Json(QueueFlowsResponse {
        queues: flows.iter().map(|(q, f)| QueueFlowOut::new(q, f)).collect(),
    }))
}

/// One queue's flow (running and unlimited when nothing was set).
#[utoipa::path(
    get, path = "/v1/queues/{queue}/flow", tag = "flow",
    params(QueuePath),
    responses(
        (status = 200, description = "The queue's flow", body = QueueFlowOut),
        InvalidInput,
        NoToken,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn flow(
    State(state): State<AppState>,
    PathArgs(queue): PathArgs<String>,
) -> Result<Json<QueueFlowOut>, ApiError> {
    let queue = QueueName::new(queue)?;
    let flow = state.spool.queue_flow(&queue).await?;
    Ok(Json(QueueFlowOut::new(&queue, &flow)))
}

/// Pauses the queue in every process: claims hand out nothing until it is resumed (claimed
/// runs finish as usual; enqueues still land). Idempotent.
#[utoipa::path(
    post, path = "/v1/queues/{queue}/pause", tag = "flow",
    params(QueuePath),
    responses(
        (status = 200, description = "The queue's flow", body = QueueFlowOut),
        InvalidInput,
        NoToken,
        ReadOnly,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn pause(
    State(state): State<AppState>,
    PathArgs(queue): PathArgs<String>,
) -> Result<Json<QueueFlowOut>, ApiError> {
    set_paused(&state, queue, true).await
}

/// Resumes the queue and wakes its consumers in every process. Idempotent.
#[utoipa::path(
    post, path = "/v1/queues/{queue}/resume", tag = "flow",
    params(QueuePath),
    responses(
        (status = 200, description = "The queue's flow", body = QueueFlowOut),
        InvalidInput,
        NoToken,
        ReadOnly,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn resume(
    State(state): State<AppState>,
    PathArgs(queue): PathArgs<String>,
) -> Result<Json<QueueFlowOut>, ApiError> {
    set_paused(&state, queue, false).await
}

async fn set_paused(
    state: &AppState,
    queue: String,
    paused: bool,
) -> Result<Json<QueueFlowOut>, ApiError> {
    let queue = QueueName::new(queue)?;
    let flow = state.spool.set_queue_paused(&queue, paused).await?;
    Ok(Json(QueueFlowOut::new(&queue, &flow)))
}

/// Replaces the queue's limits as a whole (an absent field removes that limit), enforced by
/// every later claim in every process.
#[utoipa::path(
    put, path = "/v1/queues/{queue}/limits", tag = "flow",
    params(QueuePath),
    request_body = QueueLimitsIn,
    responses(
        (status = 200, description = "The queue's flow", body = QueueFlowOut),
        InvalidInput,
        NoToken,
        ReadOnly,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn limits(
    State(state): State<AppState>,
    PathArgs(queue): PathArgs<String>,
    Body(req): Body<QueueLimitsIn>,
) -> Result<Json<QueueFlowOut>, ApiError> {
    let queue = QueueName::new(queue)?;
    let limits = req.into_limits()?;
    let flow = state.spool.set_queue_limits(&queue, &limits).await?;
    Ok(Json(QueueFlowOut::new(&queue, &flow)))
}

/// Every stored schedule.
#[utoipa::path(
    get, path = "/v1/schedules", tag = "flow",
    responses(
        (status = 200, description = "The schedules, by name", body = SchedulesResponse),
        NoToken,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn schedules(
    State(state): State<AppState>,
) -> Result<Json<SchedulesResponse>, ApiError> {
    let all = state.spool.schedules().await?;
    Ok(Json(SchedulesResponse {
        schedules: all.iter().map(ScheduleOut::from).collect(),
    }))
}

/// One schedule.
#[utoipa::path(
    get, path = "/v1/schedules/{name}", tag = "flow",
    params(SchedulePath),
    responses(
        (status = 200, description = "The schedule", body = ScheduleOut),
        InvalidInput,
        NoToken,
        NoSuchSchedule,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn schedule(
    State(state): State<AppState>,
    PathArgs(name): PathArgs<String>,
) -> Result<Json<ScheduleOut>, ApiError> {
    let name = ScheduleName::from_stored(name)?;
    match state.spool.schedule(&name).await? {
        Some(info) => Ok(Json(ScheduleOut::from(&info))),
        None => Err(no_such_schedule(&name)),
    }
}

/// Creates the schedule (201) or replaces it keeping its progress (200): every tick of the
/// cron expression enqueues one run, exactly once across every process running a scheduler
/// (`cairn serve` runs one).
#[utoipa::path(
    put, path = "/v1/schedules/{name}", tag = "flow",
    params(SchedulePath),
    request_body = ScheduleIn,
    responses(
        (status = 201, description = "Created", body = ScheduleOut),
        (status = 200, description = "Replaced (its high-water mark kept)", body = ScheduleOut),
        InvalidInput,
        NoToken,
        ReadOnly,
        InvalidSchedule,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn put_schedule(
    State(state): State<AppState>,
    PathArgs(name): PathArgs<String>,
    Body(req): Body<ScheduleIn>,
) -> Result<(StatusCode, Json<ScheduleOut>), ApiError> {
    let name = ScheduleName::new(name)?;
    let schedule = req.into_schedule(name)?;
    // Every rule the document states was checked above: what the store refuses now is the
    // expression or the zone, which no schema can state.
    let info = state
        .spool
        .put_schedule(&schedule)
        .await
        .map_err(|e| match e {
            cairn::Error::InvalidInput { .. } => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_schedule",
                e.report().to_string(),
            ),
            other => other.into(),
        })?;
    let status = if info.revision == 1 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(ScheduleOut::from(&info))))
}

/// Removes the schedule (the runs it enqueued stay).
#[utoipa::path(
    delete, path = "/v1/schedules/{name}", tag = "flow",
    params(SchedulePath),
    responses(
        (status = 204, description = "Removed"),
        InvalidInput,
        NoToken,
        ReadOnly,
        NoSuchSchedule,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn remove_schedule(
    State(state): State<AppState>,
    PathArgs(name): PathArgs<String>,
) -> Result<StatusCode, ApiError> {
    let name = ScheduleName::from_stored(name)?;
    if state.spool.remove_schedule(&name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(no_such_schedule(&name))
    }
}

fn no_such_schedule(name: &ScheduleName) -> ApiError {
    cairn::Error::NotFound {
        what: format!("schedule {name}"),
    }
    .into()
}

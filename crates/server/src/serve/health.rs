//! `GET /healthz` and `GET /readyz`: liveness and readiness, open without a token.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::error::{ApiError, STORAGE_FULL};
use super::json::{ErrorBody, Health};
use super::state::AppState;

/// Liveness: the process answers.
#[utoipa::path(
    get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The server is up", body = Health))
)]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// Readiness: the store answers a read, and no write was refused for a full store within the
/// last minute without a write storing something since (`storage_full`).
#[utoipa::path(
    get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "The store answers", body = Health),
        (status = 503, description = "The store does not answer, its file was replaced under the server (`store_replaced`), or its storage is full (`storage_full`: a write was refused for it within the last minute and none has stored anything since)", body = ErrorBody),
    )
)]
pub(crate) async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if let Some(r) = state.doctor.storage.refusals().filter(|r| r.current) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            STORAGE_FULL,
            format!(
                "the store's storage is full: {}; free disk space, then a write that stores \
                 something makes the server ready again",
                r.describe()
            ),
        ));
    }
    // A SQLite file replaced under the server answers 503 `store_replaced` (issue 21, item 13).
    state.diagnostics.check_ready().await?;
    state.epochs.list_spaces(None, 1).await?;
    Ok(Json(Health {
        status: "ok".into(),
    }))
}

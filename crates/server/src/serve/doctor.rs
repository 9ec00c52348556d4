//! `GET /v1/doctor`: `cairn doctor`'s report over HTTP, using the server's own store handles.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::responses::NoToken;
use super::state::AppState;

/// One check of the report.
#[derive(Serialize, ToSchema)]
pub(crate) struct DoctorCheck {
    /// `integrity`, `scratch`, `migrations:cairn`, `storage`, `ready`, `spool`, `retention`,
    /// `head_caches`.
    name: String,
    /// Whether it found no problem (a warning is ok: the store is healthy).
    ok: bool,
    /// `ok`, `warning` (wants a look; the store is healthy, e.g. parked runs up to
    /// `doctor.parked_threshold`) or `problem`.
    #[schema(value_type = String, pattern = "^(ok|warning|problem)$")]
    level: crate::doctor::Level,
    /// What was found; never a URL, a payload or a space id.
    detail: String,
    /// The command that repairs the problem, when one exists.
    repair: Option<String>,
}

/// The report: `healthy` is true when every check is ok.
#[derive(Serialize, ToSchema)]
pub(crate) struct DoctorReport {
    /// No check found a problem.
    healthy: bool,
    /// The checks, in the order they ran.
    checks: Vec<DoctorCheck>,
}

/// The store's health, as `cairn doctor --json` reports it: integrity, leftover scratch
/// stores of the additivity check, migration state, room to write (`storage`: writes refused
/// for a full store, a SQLite file system's free space), spool counts (parked runs are a warning,
/// a problem past `doctor.parked_threshold`),
/// retention usage against the configured cap and a head-cache sample, each problem with the
/// command that repairs it. A read-only token suffices.
#[utoipa::path(
    get, path = "/v1/doctor", tag = "meta",
    responses(
        (status = 200, description = "Healthy: every check is ok", body = DoctorReport),
        (status = 503, description = "Unhealthy: at least one check found a problem (the same report)", body = DoctorReport),
        NoToken,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn doctor(State(state): State<AppState>) -> (StatusCode, Json<DoctorReport>) {
    let report = report(&state).await;
    let status = if report.healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = DoctorReport {
        healthy: report.healthy,
        checks: report
            .checks
            .into_iter()
            .map(|c| DoctorCheck {
                name: c.name,
                ok: c.ok,
                level: c.level,
                detail: c.detail,
                repair: c.repair,
            })
            .collect(),
    };
    (status, Json(body))
}

/// Doctor's report on the store the server serves, through the server's own handles (for
/// `/v1/doctor` and the dashboard's fleet page).
pub(crate) async fn report(state: &AppState) -> crate::doctor::Report {
    crate::doctor::report(
        &state.doctor.url,
        None,
        crate::doctor::Limits {
            retention_cap: state.doctor.retention_max_bytes,
            parked_threshold: state.doctor.parked_threshold,
        },
        Some(crate::doctor::Serving {
            spool: state.spool.as_ref(),
            diagnostics: state.diagnostics.as_ref(),
            store: state.doctor.store.as_ref(),
            migrations: &state.doctor.migrations,
            storage: state.doctor.storage.refusals(),
        }),
    )
    .await
}

//! The queues and schedules page: every queue whose flow was set (paused or running, its
//! limits) with pause and resume buttons for full-access sessions, and the stored schedules
//! with their progress.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use cairn::spool::{CatchUp, QueueFlow};
use cairn::QueueName;
use maud::{html, Markup};

use super::login::{check_csrf, CsrfForm};
use super::page::{layout, read_permit, Nav, UiError};
use super::session::Viewer;
use super::text::{age, encode_query, printable, when};
use crate::serve::state::AppState;

/// `GET /ui/queues`.
pub(crate) async fn queues(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Markup, UiError> {
    let _permit = read_permit(&state).await?;
    let flows = state.spool.queue_flows().await?;
    let schedules = state.spool.schedules().await?;
    let body = html! {
        h1 { "Queues & schedules" }
        h2 { "Queues" }
        @if flows.is_empty() {
            p.empty { "No queue has been paused or limited; every queue runs unlimited." }
        } @else {
            table.queues {
                thead { tr { th { "queue" } th { "state" } th { "max claimed" } th { "per partition" } th { "rate" } th { "" } } }
                tbody {
                    @for (queue, flow) in &flows {
                        tr {
                            td { a href={"/ui/runs?queue=" (encode_query(queue.as_str()))} { (printable(queue.as_str())) } }
                            td { @if flow.paused { span.state.parked { "paused" } } @else { span.state.succeeded { "running" } } }
                            td.num { (limit(flow.limits.max_claimed)) }
                            td.num { (limit(flow.limits.per_partition)) }
                            td { (rate(flow)) }
                            td { @if viewer.can_write() { (toggle(&viewer, queue, flow)) } }
                        }
                    }
                }
            }
        }
        h2 { "Schedules" }
        @if schedules.is_empty() {
            p.empty { "No schedule is stored (" code { "cairn schedule put" } ")." }
        } @else {
            table.schedules {
                thead { tr { th { "name" } th { "cron" } th { "zone" } th { "queue" } th { "catch-up" } th { "last tick" } th.num { "revision" } } }
                tbody {
                    @for s in &schedules {
                        tr {
                            td { (printable(s.schedule.name.as_str())) }
                            td.mono { (printable(&s.schedule.cron)) }
                            td { (printable(&s.schedule.time_zone)) }
                            td { (printable(s.schedule.queue.as_str())) }
                            td { (catch_up(s.schedule.catch_up)) }
                            td { (when(s.high_water)) }
                            td.num { (s.revision) }
                        }
                    }
                }
            }
        }
    };
    Ok(layout(
        Some(&viewer),
        "Queues & schedules",
        Nav::Queues,
        body,
    ))
}

fn limit(n: Option<u32>) -> String {
    n.map_or_else(|| "—".to_owned(), |n| n.to_string())
}

fn rate(flow: &QueueFlow) -> String {
    flow.limits.rate.map_or_else(
        || "—".to_owned(),
        |r| format!("{} per {}", r.claims, age(r.per)),
    )
}

fn catch_up(c: CatchUp) -> String {
    match c {
        CatchUp::None => "none".to_owned(),
        CatchUp::Latest => "latest".to_owned(),
        CatchUp::All { cap } => format!("all (at most {cap})"),
    }
}

fn toggle(viewer: &Viewer, queue: &QueueName, flow: &QueueFlow) -> Markup {
    let (action, label) = if flow.paused {
        ("resume", "Resume")
    } else {
        ("pause", "Pause")
    };
    html! {
        form.inline method="post" action={"/ui/queues/" (encode_query(queue.as_str())) "/" (action)} {
            input type="hidden" name="csrf" value=(viewer.csrf);
            button type="submit" class={"action-" (action)} { (label) }
        }
    }
}

/// `POST /ui/queues/{queue}/{action}`: pause or resume.
pub(crate) async fn act(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path((queue, action)): Path<(String, String)>,
    form: Result<axum::Form<CsrfForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    if let Err(e) = check_csrf(&viewer, form) {
        return e.into_response();
    }
    let queue = match QueueName::new(queue) {
        Ok(q) => q,
        Err(e) => return UiError::bad_request(format!("queue: {e}")).into_response(),
    };
    let paused = match action.as_str() {
        "pause" => true,
        "resume" => false,
        _ => return UiError::not_found().into_response(),
    };
    match state.spool.set_queue_paused(&queue, paused).await {
        Ok(_) => {
            tracing::info!(target: "cairn::ui", action = %action, queue = %queue, by = %viewer.who, "operator action");
            Redirect::to("/ui/queues").into_response()
        }
        Err(e) => UiError::from(e).into_response(),
    }
}

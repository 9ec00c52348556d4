//! The queues and schedules page: every queue with a stored flow (paused, or running with a
//! limit) with pause and resume buttons for full-access sessions, and the stored schedules
//! with their progress.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use cairn::spool::{CatchUp, QueueFlow};
use cairn::QueueName;
use maud::{html, Markup};

use super::page::{layout, read_permit, Nav, UiError};
use super::session::{self, Viewer};
use super::text::{encode_query, printable, when};
use crate::serve::state::AppState;
use crate::shown::format_duration;

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

/// The rate limit as `cairn queue list` prints it (`5/250ms`): exact, never rounded.
fn rate(flow: &QueueFlow) -> String {
    flow.limits.rate.map_or_else(
        || "—".to_owned(),
        |r| format!("{}/{}", r.claims, format_duration(r.per)),
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
    // The queue travels as a form field, never in the path: a name holding `/` or `..` would
    // otherwise be read (or resolved by the browser) as other path segments.
    html! {
        form.inline method="post" action={"/ui/queues/" (action)} {
            input type="hidden" name="csrf" value=(viewer.csrf);
            input type="hidden" name="queue" value=(queue.as_str());
            button type="submit" class={"action-" (action)} { (label) }
        }
    }
}

/// One field of an `application/x-www-form-urlencoded` body: its name (invalid UTF-8 shown as
/// U+FFFD) and its value's bytes, percent-decoded and `+` read as a space.
fn form_fields(body: &[u8]) -> Vec<(String, Vec<u8>)> {
    fn decode(part: &[u8]) -> Vec<u8> {
        let hex = |b: u8| {
            char::from(b)
                .to_digit(16)
                .and_then(|d| u8::try_from(d).ok())
        };
        let mut out = Vec::with_capacity(part.len());
        let mut i = 0;
        while i < part.len() {
            match part[i] {
                b'+' => out.push(b' '),
                b'%' => match (
                    part.get(i + 1).and_then(|b| hex(*b)),
                    part.get(i + 2).and_then(|b| hex(*b)),
                ) {
                    (Some(hi), Some(lo)) => {
                        out.push(hi << 4 | lo);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                },
                b => out.push(b),
            }
            i += 1;
        }
        out
    }
    body.split(|b| *b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = match pair.iter().position(|b| *b == b'=') {
                Some(at) => (&pair[..at], &pair[at + 1..]),
                None => (pair, &pair[..0]),
            };
            (
                String::from_utf8_lossy(&decode(name)).into_owned(),
                decode(value),
            )
        })
        .collect()
}

/// The one field `name` of the form, as text: refused (400) when the form has none, several,
/// or one that is not UTF-8.
fn one_field(fields: &[(String, Vec<u8>)], name: &str) -> Result<String, UiError> {
    let mut found = fields.iter().filter(|(n, _)| n == name).map(|(_, v)| v);
    match (found.next(), found.next()) {
        (None, _) => Err(UiError::bad_request(format!(
            "The form has no `{name}` field."
        ))),
        (Some(_), Some(_)) => Err(UiError::bad_request(format!(
            "The form has more than one `{name}` field; send one."
        ))),
        (Some(v), None) => String::from_utf8(v.clone()).map_err(|_| {
            UiError::bad_request(format!("The form's `{name}` field is not valid UTF-8."))
        }),
    }
}

/// `POST /ui/queues/{action}` (form: `csrf`, `queue`): pause or resume. The CSRF token is
/// checked first (403); then the form must hold exactly one `queue` field of valid UTF-8
/// naming a valid queue (400).
pub(crate) async fn act(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(action): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let fields = form_fields(&body);
    match one_field(&fields, "csrf") {
        Ok(csrf) if session::same_secret(&csrf, &viewer.csrf) => {}
        _ => {
            return UiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "This form's security token is missing or stale; reload the page and try again.",
            )
            .into_response()
        }
    }
    let queue = match one_field(&fields, "queue") {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
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

#[cfg(test)]
mod tests {
    use super::form_fields;

    #[test]
    fn form_fields_are_percent_decoded_to_bytes() {
        assert_eq!(
            form_fields(b"csrf=a%2Bb&queue=x+y%zz&&flag&queue=%FF%fe"),
            vec![
                ("csrf".to_owned(), b"a+b".to_vec()),
                ("queue".to_owned(), b"x y%zz".to_vec()),
                ("flag".to_owned(), vec![]),
                ("queue".to_owned(), vec![0xff, 0xfe]),
            ]
        );
        assert_eq!(form_fields(b"q=%4"), vec![("q".to_owned(), b"%4".to_vec())]);
    }
}

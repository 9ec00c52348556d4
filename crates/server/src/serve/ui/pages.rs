//! The spool's pages: the overview, the run list and one run (with its actions).

use std::collections::BTreeSet;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use cairn::spool::{QueueName, RunFilter, RunId, RunInfo, RunState, Timestamp};
use maud::{html, Markup};
use serde::Deserialize;

use super::login::{check_csrf, CsrfForm};
use super::page::{layout, read_permit, Nav, UiError};
use super::session::Viewer;
use super::text::{age, encode_query, printable, printable_bytes, shown, when};
use crate::serve::state::AppState;

/// Runs per page of the run list.
const PAGE: usize = 50;
/// Most runs one page of a filtered list reads before it stops and offers to go on.
const SCAN: usize = 5_000;
/// Most payload or event bytes a page shows.
pub(crate) const SHOW_BYTES: usize = 4096;
/// Most events a run's page lists.
const EVENTS: usize = 100;
/// Most facts a run's page lists.
const FACTS: usize = 100;
/// Most queues the overview lists.
const QUEUES: usize = 200;

fn state_class(s: RunState) -> &'static str {
    s.as_str()
}

/// `GET /ui`: per queue, runs by state, oldest queued age and parked count; the rates chart.
pub(crate) async fn overview(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Markup, UiError> {
    let permit = read_permit(&state).await?;
    let stats = state.spool.stats().await?;
    drop(permit);
    let now = state.spool.clock().now();
    let chart = state.ui.as_ref().map(|ui| ui.rates.chart());
    let parked_total = stats.runs.get(&RunState::Parked).copied().unwrap_or(0);
    let body = html! {
        h1 { "Overview" }
        section.cards {
            @for s in RunState::ALL {
                div.card.(state_class(s)) {
                    span.n { (stats.runs.get(&s).copied().unwrap_or(0)) }
                    span.l { (s.as_str()) }
                }
            }
            div.card {
                span.n { (stats.oldest_queued.map(|t| age(now.duration_since(t))).unwrap_or_else(|| "–".into())) }
                span.l { "oldest queued" }
            }
            div.card {
                span.n { (stats.events) }
                span.l { "stored run events (" (stats.event_bytes) " bytes)" }
            }
        }
        @if parked_total > 0 {
            p.warn { (parked_total) @if parked_total == 1 { " parked run needs" } @else { " parked runs need" } " an operator: "
                a href="/ui/runs?state=parked" { "see them" } "." }
        }
        h2 { "Rates" }
        @if let Some(c) = chart { (c) }
        h2 { "Queues" }
        @if stats.queues.is_empty() {
            p.empty { "No queue holds a run." }
        } @else {
            table.queues {
                thead { tr {
                    th { "queue" }
                    @for s in RunState::ALL { th.num { (s.as_str()) } }
                    th.num { "oldest queued" }
                } }
                tbody {
                    @for (q, qs) in stats.queues.iter().take(QUEUES) {
                        tr {
                            td { a href={"/ui/runs?queue=" (encode_query(q.as_str()))} { (printable(q.as_str())) } }
                            @for s in RunState::ALL {
                                @let n = qs.runs.get(&s).copied().unwrap_or(0);
                                td.num.alert[s == RunState::Parked && n > 0] {
                                    @if n > 0 {
                                        a href={"/ui/runs?queue=" (encode_query(q.as_str())) "&state=" (s.as_str())} { (n) }
                                    } @else { "0" }
                                }
                            }
                            td.num { (qs.oldest_queued.map(|t| age(now.duration_since(t))).unwrap_or_else(|| "–".into())) }
                        }
                    }
                }
            }
        }
        @if stats.queues.len() > QUEUES {
            p.note { "The first " (QUEUES) " of " (stats.queues.len()) " queues, in name order; the run list filters by any queue." }
        }
        p.note { "Read at " (when(now)) ". " a href="/ui" { "Refresh" } }
    };
    Ok(layout(Some(&viewer), "Overview", Nav::Overview, body))
}

/// The run list's filters, as the form sends them (empty fields are absent).
#[derive(Deserialize, Default, Debug)]
pub(crate) struct RunsQuery {
    #[serde(default)]
    queue: String,
    #[serde(default)]
    state: String,
    /// Part of the dedup key (bytes shown as text), matched anywhere in it.
    #[serde(default)]
    key: String,
    /// Enqueued at or after (`YYYY-MM-DDTHH:MM[:SS]`, UTC).
    #[serde(default)]
    since: String,
    /// Enqueued before.
    #[serde(default)]
    until: String,
    /// The last run id of the previous page.
    #[serde(default)]
    after: String,
}

fn parse_time(field: &str, v: &str) -> Result<Option<Timestamp>, UiError> {
    if v.is_empty() {
        return Ok(None);
    }
    // One range for both ends, the one every time given to cairn is checked against
    // (`Timestamp::check`): 1970-01-01T00:00 to 9999-12-31T23:59:59.999999, UTC.
    let bad = || {
        UiError::bad_request(format!(
            "`{field}` must be a UTC date and time from {} to {}, such as 2026-12-02T10:30",
            Timestamp::EARLIEST,
            Timestamp::LATEST
        ))
    };
    let dt: jiff::civil::DateTime = v.parse().map_err(|_| bad())?;
    let part = |n: i8| u32::try_from(n).map_err(|_| bad());
    let micros = u32::try_from(dt.subsec_nanosecond() / 1000).map_err(|_| bad())?;
    let t = Timestamp::from_utc(
        i64::from(dt.year()),
        part(dt.month())?,
        part(dt.day())?,
        part(dt.hour())?,
        part(dt.minute())?,
        part(dt.second())?,
        micros,
    )
    .ok_or_else(bad)?;
    t.check("time").map_err(|_| bad())?;
    Ok(Some(t))
}

/// The filters, checked.
struct Filters {
    queue: Option<QueueName>,
    state: Option<RunState>,
    key: Option<Vec<u8>>,
    since: Option<Timestamp>,
    until: Option<Timestamp>,
    after: Option<RunId>,
}

impl RunsQuery {
    fn check(&self) -> Result<Filters, UiError> {
        let queue = (!self.queue.is_empty())
            .then(|| QueueName::new(self.queue.clone()))
            .transpose()
            .map_err(|e| UiError::bad_request(format!("queue: {e}")))?;
        let state = (!self.state.is_empty())
            .then(|| RunState::parse(&self.state))
            .transpose()
            .map_err(|e| UiError::bad_request(format!("state: {e}")))?;
        let after = (!self.after.is_empty())
            .then(|| RunId::parse(&self.after))
            .transpose()
            .map_err(|e| UiError::bad_request(format!("after: {e}")))?;
        if self.key.len() > 1024 {
            return Err(UiError::bad_request("key: at most 1024 bytes"));
        }
        Ok(Filters {
            queue,
            state,
            key: (!self.key.is_empty()).then(|| self.key.as_bytes().to_vec()),
            since: parse_time("since", &self.since)?,
            until: parse_time("until", &self.until)?,
            after,
        })
    }

    /// This query with `after` replaced, as a link.
    fn link_after(&self, after: &RunId) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("queue", &self.queue),
            ("state", &self.state),
            ("key", &self.key),
            ("since", &self.since),
            ("until", &self.until),
        ] {
            if !v.is_empty() {
                parts.push(format!("{k}={}", encode_query(v)));
            }
        }
        parts.push(format!("after={after}"));
        format!("/ui/runs?{}", parts.join("&"))
    }
}

impl Filters {
    fn keeps(&self, r: &RunInfo) -> bool {
        let key_ok = self.key.as_ref().is_none_or(|k| {
            let hay = r.dedup_key.as_bytes();
            k.len() <= hay.len() && hay.windows(k.len()).any(|w| w == k.as_slice())
        });
        key_ok
            && self.since.is_none_or(|t| r.enqueued_at >= t)
            && self.until.is_none_or(|t| r.enqueued_at < t)
    }
}

/// `GET /ui/runs`: runs by queue, state, key part and enqueue time, paged by run id.
pub(crate) async fn runs(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    q: Result<Query<RunsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Markup, UiError> {
    let Ok(Query(q)) = q else {
        return Err(UiError::bad_request("The filters could not be read."));
    };
    let f = q.check()?;
    let _permit = read_permit(&state).await?;
    let now = state.spool.clock().now();
    let post_filter = f.key.is_some() || f.since.is_some() || f.until.is_some();
    let mut shown_runs = Vec::new();
    let mut after = f.after;
    let mut scanned = 0usize;
    let mut more = false;
    let mut last_seen = None;
    loop {
        let want = if post_filter { 500 } else { PAGE + 1 };
        let page = state
            .spool
            .runs(
                &RunFilter {
                    queue: f.queue.clone(),
                    state: f.state,
                    after,
                },
                want,
            )
            .await?;
        let full = page.len() == want;
        for r in page {
            if shown_runs.len() == PAGE {
                more = true;
                break;
            }
            scanned += 1;
            last_seen = Some(r.run_id);
            after = Some(r.run_id);
            if f.keeps(&r) {
                shown_runs.push(r);
            }
        }
        if more || !full || !post_filter {
            more = more || (full && !post_filter);
            break;
        }
        if scanned >= SCAN {
            more = true;
            break;
        }
    }
    let states: BTreeSet<&str> = RunState::ALL.iter().map(|s| s.as_str()).collect();
    let body = html! {
        h1 { "Runs" }
        form.filters method="get" action="/ui/runs" {
            label { "queue " input type="text" name="queue" value=(q.queue) maxlength="256"; }
            label { "state "
                select name="state" {
                    option value="" selected[q.state.is_empty()] { "any" }
                    @for s in &states { option value=(s) selected[q.state == *s] { (s) } }
                }
            }
            label { "key contains " input type="text" name="key" value=(q.key) maxlength="1024"; }
            label { "enqueued from " input type="datetime-local" name="since" value=(q.since) step="1"; }
            label { "until " input type="datetime-local" name="until" value=(q.until) step="1"; }
            button type="submit" { "Filter" }
            " " a href="/ui/runs" { "clear" }
        }
        p.note { "Times are UTC. Runs come in run id order (roughly enqueue order)."
            @if post_filter { " Key and time filters read at most " (SCAN) " runs per page (" (scanned) " read for this one)." } }
        @if shown_runs.is_empty() {
            p.empty { "No run matches." }
        } @else {
            table.runs {
                thead { tr { th { "run" } th { "queue" } th { "key" } th { "state" } th.num { "attempts" } th { "enqueued" } th { "updated" } } }
                tbody {
                    @for r in &shown_runs {
                        tr {
                            td.mono { a href={"/ui/runs/" (r.run_id)} { (r.run_id) } }
                            td { (printable(r.queue.as_str())) }
                            td.key { (printable_bytes(r.dedup_key.as_bytes())) }
                            td { span.state.(state_class(r.state)) { (r.state.as_str()) } }
                            td.num { (r.attempts) "/" (r.max_attempts) }
                            td title=(when(r.enqueued_at)) { (age(now.duration_since(r.enqueued_at))) " ago" }
                            td title=(when(r.updated_at)) { (age(now.duration_since(r.updated_at))) " ago" }
                        }
                    }
                }
            }
        }
        @if more {
            @if let Some(last) = last_seen {
                p.pager { a rel="next" href=(q.link_after(&last)) { "Next page →" } }
            }
        }
    };
    Ok(layout(Some(&viewer), "Runs", Nav::Runs, body))
}

fn parse_run(id: &str) -> Result<RunId, UiError> {
    RunId::parse(id).map_err(|_| UiError::new(StatusCode::NOT_FOUND, "No run has that id."))
}

/// The query of a run's page: the action just done, for the notice.
#[derive(Deserialize, Default)]
pub(crate) struct RunQuery {
    done: Option<String>,
}

/// `GET /ui/runs/{id}`: everything about one run, its events and what can be done to it.
pub(crate) async fn run(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    Query(q): Query<RunQuery>,
) -> Result<Markup, UiError> {
    let id = parse_run(&id)?;
    let permit = read_permit(&state).await?;
    let Some(r) = state.spool.run(id).await? else {
        return Err(UiError::new(StatusCode::NOT_FOUND, "No run has that id."));
    };
    let events = state.spool.events(id, 0, EVENTS).await?;
    let payload = state.spool.payload(id).await?;
    drop(permit);
    let now = state.spool.clock().now();
    let done = match q.done.as_deref() {
        Some("cancel") => Some("Cancel requested."),
        Some("retry") => Some("Sent back to its queue."),
        Some("discard") => Some("Discarded."),
        _ => None,
    };
    let timeline = timeline(&r, &events);
    let body = html! {
        h1 { "Run " span.mono { (r.run_id) } }
        @if let Some(d) = done { p.notice role="status" { (d) } }
        p { span.state.big.(state_class(r.state)) #run-state { (r.state.as_str()) }
            @if r.cancel_requested { " " span.badge { "cancel requested" } } }
        @if viewer.can_write() {
            div.actions {
                @if can_cancel(&r) {
                    (action_form(&viewer, &r, "cancel", "Cancel run"))
                }
                @if r.state == RunState::Parked {
                    (action_form(&viewer, &r, "retry", "Retry"))
                    (action_form(&viewer, &r, "discard", "Discard"))
                }
            }
        }
        dl.facts {
            dt { "queue" } dd { a href={"/ui/runs?queue=" (encode_query(r.queue.as_str()))} { (printable(r.queue.as_str())) } }
            dt { "dedup key" } dd { (shown(r.dedup_key.as_bytes(), SHOW_BYTES)) }
            @if let Some(g) = &r.supersede_group { dt { "supersede group" } dd { (printable_bytes(g.as_bytes())) } }
            dt { "attempts" } dd { (r.attempts) " of " (r.max_attempts) }
            dt { "priority" } dd { (r.priority) }
            dt { "enqueued" } dd { (when(r.enqueued_at)) " (" (age(now.duration_since(r.enqueued_at))) " ago)" }
            dt { "last change" } dd { (when(r.updated_at)) }
            @if let Some(due) = r.due_at { dt { "due" } dd { (when(due)) @if due > now { " (in " (age(due.duration_since(now))) ")" } @else { " (now)" } } }
            @if let Some(f) = r.finished_at { dt { "finished" } dd { (when(f)) } }
            @if let Some(l) = &r.lease {
                dt { "lease holder" } dd.mono { (printable(l.consumer.as_str())) }
                dt { "lease expires" } dd { (when(l.expires_at))
                    @if l.expires_at < now { " (expired " (age(now.duration_since(l.expires_at))) " ago)" }
                    @else { " (in " (age(l.expires_at.duration_since(now))) ")" } }
            }
            @if let Some(reason) = &r.reason { dt { "reason" } dd { pre.reason { (reason) } } }
            dt { "payload" } dd {
                (r.payload_bytes) " bytes"
                @if let Some(p) = &payload { @if !p.is_empty() { (shown(p, SHOW_BYTES)) } }
            }
            dt { "event stream" } dd { (format!("{:?}", r.stream).to_lowercase()) ", " (r.events) " stored" }
        }
        h2 { "Facts" }
        @if r.facts.is_empty() { p.empty { "No facts." } }
        @else {
            table.facts { tbody {
                @for (name, value) in r.facts.iter().take(FACTS) { tr { th { (printable(name.as_str())) } td { (shown(value, 512)) } } }
            } }
            @if r.facts.len() > FACTS { p.note { "The first " (FACTS) " of " (r.facts.len()) " facts, in name order." } }
        }
        h2 { "History" }
        ol.timeline {
            @for (t, what) in &timeline { li { span.when { (when(*t)) } " " (what) } }
        }
        p.note { "From what the store keeps about the run: its times, attempts and the operators' recorded actions." }
        h2 { "Events" }
        p.note { "Stored events wait for delivery; delivered events are removed from the run, so a gap in seq is what was delivered (or expired by retention)." }
        @if events.is_empty() { p.empty { "No stored event." } }
        @else {
            table.events {
                thead { tr { th.num { "seq" } th { "event id" } th { "appended" } th { "delivery" } th { "payload" } } }
                tbody {
                    @for e in &events {
                        tr {
                            td.num { (e.seq) }
                            td.mono { (printable_bytes(e.event_id.as_bytes())) }
                            td { (when(e.created_at)) }
                            td { "pending" }
                            td { (shown(&e.payload, 512)) }
                        }
                    }
                }
            }
            @if events.len() == EVENTS { p.note { "The first " (EVENTS) " stored events." } }
        }
    };
    Ok(layout(Some(&viewer), "Run", Nav::Runs, body))
}

/// Whether a cancel would change the run: a queued run, or a claimed one not yet asked to stop
/// (a parked run is discarded instead).
fn can_cancel(r: &RunInfo) -> bool {
    match r.state {
        RunState::Queued => true,
        RunState::Claimed => !r.cancel_requested,
        _ => false,
    }
}

fn action_form(viewer: &Viewer, r: &RunInfo, action: &str, label: &str) -> Markup {
    html! {
        form.inline method="post" action={"/ui/runs/" (r.run_id) "/" (action)} {
            input type="hidden" name="csrf" value=(viewer.csrf);
            button.(action) type="submit" #{"action-" (action)} { (label) }
        }
    }
}

/// What the store records of a run's life, oldest first.
fn timeline(r: &RunInfo, events: &[cairn::spool::RunEvent]) -> Vec<(Timestamp, String)> {
    let mut t = vec![(
        r.enqueued_at,
        format!("enqueued on {}", printable(r.queue.as_str())),
    )];
    for e in events {
        // The spool's own events (an operator's retry or discard) are the ids producers may not use.
        if cairn::spool::check_producer_event_id(&e.event_id).is_err() {
            let v: serde_json::Value = serde_json::from_slice(&e.payload).unwrap_or_default();
            let action = v.get("cairn").and_then(|a| a.as_str()).unwrap_or("action");
            let by = printable(
                v.get("by")
                    .and_then(|b| b.as_str())
                    .unwrap_or("an operator"),
            );
            let spent = v.get("attempts").and_then(serde_json::Value::as_u64);
            t.push((
                e.created_at,
                format!(
                    "{action} by {by}{}",
                    spent
                        .map(|n| format!(" after {n} attempts"))
                        .unwrap_or_default()
                ),
            ));
        }
    }
    if r.updated_at != r.enqueued_at {
        let what = match (r.state, r.attempts) {
            (RunState::Claimed, n) => format!("claimed (attempt {n})"),
            (s, _) => format!("became {}", s.as_str()),
        };
        if r.finished_at != Some(r.updated_at) {
            t.push((r.updated_at, what));
        }
    }
    if let Some(f) = r.finished_at {
        t.push((f, format!("finished {}", r.state.as_str())));
    }
    t.sort_by_key(|(at, _)| *at);
    t
}

/// `POST /ui/runs/{id}/{action}`: cancel, retry (a parked run) or discard (a parked run).
pub(crate) async fn act(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path((id, action)): Path<(String, String)>,
    form: Result<axum::Form<CsrfForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    if let Err(e) = check_csrf(&viewer, form) {
        return e.into_response();
    }
    let id = match parse_run(&id) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    let result = match action.as_str() {
        "cancel" => state.spool.cancel(id).await.map(|_| ()),
        "retry" => state.spool.retry_parked(id, &viewer.who).await.map(|_| ()),
        "discard" => state.spool.discard(id, &viewer.who).await.map(|_| ()),
        _ => return UiError::not_found().into_response(),
    };
    match result {
        Ok(()) => {
            tracing::info!(target: "cairn::ui", action = %action, run = %id, by = %viewer.who, "operator action");
            Redirect::to(&format!("/ui/runs/{id}?done={action}")).into_response()
        }
        Err(e) => UiError::from(e).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_checked_and_links_keep_them() {
        let q = RunsQuery {
            queue: "mail".into(),
            key: "a&b".into(),
            since: "2026-12-02T10:30".into(),
            ..RunsQuery::default()
        };
        let f = q.check().unwrap();
        assert_eq!(f.queue.unwrap().as_str(), "mail");
        assert_eq!(
            f.since.unwrap().as_unix_micros(),
            1_796_207_400_000_000,
            "UTC"
        );
        let id = RunId::parse("01234567-89ab-cdef-0123-456789abcdef").unwrap();
        let link = q.link_after(&id);
        assert!(link.starts_with("/ui/runs?queue=mail&key=a%26b&since=2026-12-02T10%3A30&after="));
        for bad in [
            RunsQuery {
                state: "nope".into(),
                ..RunsQuery::default()
            },
            RunsQuery {
                since: "yesterday".into(),
                ..RunsQuery::default()
            },
            RunsQuery {
                after: "x".into(),
                ..RunsQuery::default()
            },
        ] {
            assert_eq!(bad.check().err().unwrap().status, StatusCode::BAD_REQUEST);
        }
    }
}

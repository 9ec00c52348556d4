//! The fleet and migrations page: the live builds with their revisions per set, each set's
//! stamp, lineage and verdict, the contract revisions waiting on live builds, and doctor's
//! findings with their repair commands.

use std::collections::BTreeSet;

use axum::extract::State;
use axum::Extension;
use cairn::migrate::{cairn_set, contract_blockers, Classification, DEFAULT_EXPIRY};
use maud::{html, Markup};

use super::page::{layout, read_permit, Nav, UiError};
use super::session::Viewer;
use super::text::{age, printable, when};
use crate::doctor::Level;
use crate::serve::state::AppState;

/// `GET /ui/fleet`.
pub(crate) async fn fleet(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Markup, UiError> {
    let _permit = read_permit(&state).await?;
    let m = &state.doctor.migrations;
    let now = state.spool.clock().now();
    let live = m.fleet(now, DEFAULT_EXPIRY).await?;
    let own = cairn_set();
    let mut sets: BTreeSet<String> = live.iter().flat_map(|e| e.heads.keys().cloned()).collect();
    sets.insert(own.name().to_owned());
    let mut rows = Vec::new();
    for name in &sets {
        let stored = m.state(name).await.map_err(|e| {
            UiError::new(axum::http::StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        })?;
        let verdict = if name == own.name() {
            let class = m.classify(&own, &stored);
            let waiting: Vec<(String, Vec<cairn::migrate::Blocker>)> = match &class {
                Classification::Upgrade { pending, .. } => pending
                    .iter()
                    .filter(|r| own.is_contract(r))
                    .map(|r| (r.clone(), contract_blockers(&own, r, &live, None)))
                    .collect(),
                _ => Vec::new(),
            };
            Some((class, waiting))
        } else {
            None
        };
        rows.push((name.clone(), stored, verdict));
    }
    let report = crate::serve::doctor::report(&state).await;
    let body = html! {
        h1 { "Fleet & migrations" }
        h2 { "Live builds" }
        @if live.is_empty() { p.empty { "No build has registered in the last " (age(DEFAULT_EXPIRY)) "." } }
        @else {
            table.fleet {
                thead { tr { th { "build" } th { "host" } th.num { "pid" } th { "revisions" } th { "started" } th { "last seen" } } }
                tbody {
                    @for e in &live {
                        tr {
                            td.mono { (printable(&e.build)) }
                            td { (printable(&e.host)) }
                            td.num { (e.pid) }
                            td { @for (set, rev) in &e.heads { span.rev { (printable(set)) "@" (printable(rev)) } " " } }
                            td { (when(e.started_at)) }
                            td { (age(now.duration_since(e.last_seen))) " ago" }
                        }
                    }
                }
            }
        }
        h2 { "Migration sets" }
        table.sets {
            thead { tr { th { "set" } th { "stamp" } th { "lineage" } th { "verdict" } th { "pending" } } }
            tbody {
                @for (name, stored, verdict) in &rows {
                    tr {
                        td { (name) }
                        td.mono { (stored.stamp.as_deref().unwrap_or("(none)")) }
                        td.mono { @match &stored.lineage {
                            None => "(none)",
                            Some(l) => @for e in l { span.rev { (e.revision) "@" (&e.checksum.to_hex()[..12]) } " " },
                        } }
                        @match verdict {
                            None => { td { "this server does not ship this set" } td { "–" } }
                            Some((class, _)) => {
                                @let (label, pending) = match class {
                                    Classification::AtHead { repair_lineage: false } => ("at head".to_owned(), Vec::new()),
                                    Classification::AtHead { repair_lineage: true } => ("at head; lineage needs `cairn migrate repair`".to_owned(), Vec::new()),
                                    Classification::Upgrade { pending, .. } => ("upgrade".to_owned(), pending.clone()),
                                    Classification::Ahead { stamp } => (format!("ahead (at {stamp})"), Vec::new()),
                                    Classification::Refused(r) => (format!("refused: {r}"), Vec::new()),
                                };
                                td { (label) }
                                td.mono { @if pending.is_empty() { "–" } @else { (pending.join(" ")) } }
                            }
                        }
                    }
                }
            }
        }
        @for (name, _, verdict) in &rows {
            @if let Some((_, waiting)) = verdict {
                @for (rev, blockers) in waiting {
                    p.warn { "Contract revision " code { (rev) } " of " (name) " waits on "
                        @if blockers.is_empty() { "no live build: `cairn migrate up` applies it." }
                        @else { (blockers.len()) " live build" @if blockers.len() != 1 { "s" } " that lack it: "
                            @for b in blockers { span.mono { (b.build) } " on " (b.host) " (pid " (b.pid) ", knows " (b.knows) "); " } }
                    }
                }
            }
        }
        h2 { "Doctor" }
        p { @if report.healthy { span.badge.full { "healthy" } } @else { span.badge.problem { "unhealthy" } } }
        table.doctor {
            thead { tr { th { "check" } th { "level" } th { "finding" } th { "repair" } } }
            tbody {
                @for c in &report.checks {
                    @let level = match c.level { Level::Ok => "ok", Level::Warning => "warning", Level::Problem => "problem" };
                    tr class=(level) {
                        td { (c.name) }
                        td { span.badge.(level) { (level) } }
                        td { (c.detail) }
                        td { @if let Some(r) = &c.repair { code { (r) } } @else { "–" } }
                    }
                }
            }
        }
    };
    Ok(layout(
        Some(&viewer),
        "Fleet & migrations",
        Nav::Fleet,
        body,
    ))
}

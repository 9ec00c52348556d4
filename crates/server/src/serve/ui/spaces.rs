//! The epoch log's pages: the spaces, and one space's recent epochs drawn as a DAG (the same
//! rendering as `cairn graph`, [`crate::graph`]).

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use cairn::{Seq, SpaceId};
use maud::{html, Markup};
use serde::Deserialize;

use super::page::{layout, read_permit, Nav, UiError};
use super::session::Viewer;
use super::text::{age, printable, trusted, when};
use crate::serve::state::AppState;

/// Spaces per page of the list.
const PAGE: usize = 50;
/// Epochs drawn per page of a space's DAG.
const EPOCHS: usize = 40;

/// A space in a URL: its bytes as hex (a space id may hold any bytes).
pub(crate) fn space_path(space: &SpaceId) -> String {
    format!("/ui/spaces/{}", hex::encode(space.as_bytes()))
}

/// A space a page shows: cairn's own (reserved) spaces are refused as the API refuses them
/// (400 with the `reserved` error's message), so the dashboard shows no more than the API.
fn parse_space(hex_id: &str) -> Result<SpaceId, UiError> {
    let space = parse_stored_space(hex_id)?;
    // `SpaceId::new` refuses a reserved id with `Error::Reserved`, the API's 400 `reserved`.
    Ok(SpaceId::new(space.as_bytes().to_vec())?)
}

/// A space id as the store holds it (a list's paging position may be a reserved one).
fn parse_stored_space(hex_id: &str) -> Result<SpaceId, UiError> {
    let nf = || UiError::new(StatusCode::NOT_FOUND, "No space has that id.");
    let bytes = hex::decode(hex_id).map_err(|_| nf())?;
    SpaceId::from_stored(bytes).map_err(|_| nf())
}

/// The list's paging.
#[derive(Deserialize, Default)]
pub(crate) struct ListQuery {
    /// The last space of the previous page, as hex.
    #[serde(default)]
    after: String,
}

/// `GET /ui/spaces`: spaces in id order with their head count and size.
pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Markup, UiError> {
    let Ok(Query(q)) = q else {
        return Err(UiError::bad_request("The page could not be read."));
    };
    let after = (!q.after.is_empty())
        .then(|| parse_stored_space(&q.after))
        .transpose()
        .map_err(|_| UiError::bad_request("after: not a space id"))?;
    let permit = read_permit(&state).await?;
    let spaces = state.epochs.list_spaces(after.as_ref(), PAGE + 1).await?;
    let more = spaces.len() > PAGE;
    let mut rows = Vec::new();
    for s in spaces.into_iter().take(PAGE) {
        let heads = match state.epochs.heads(&s).await {
            Ok(h) => h.len(),
            Err(cairn::Error::NotFound { .. }) => 0,
            Err(e) => return Err(e.into()),
        };
        let next = state.diagnostics.next_seq(&s).await?;
        rows.push((s, heads, next.0.saturating_sub(1)));
    }
    drop(permit);
    let body = html! {
        h1 { "Spaces" }
        @if rows.is_empty() { p.empty { "No space holds an epoch." } }
        @else {
            table.spaces {
                thead { tr { th { "space" } th.num { "heads" } th.num { "epochs" } } }
                tbody {
                    @for (s, heads, epochs) in &rows {
                        tr {
                            td {
                                // A reserved space's page is refused (as the API refuses it):
                                // it is listed, without a link.
                                @if s.is_reserved() { (printable(&s.to_string())) " " span.badge { "cairn's own" } }
                                @else { a href=(space_path(s)) { (printable(&s.to_string())) } } }
                            td.num.alert[*heads > 1] { (heads) @if *heads > 1 { " (forked)" } }
                            td.num { (epochs) }
                        }
                    }
                }
            }
        }
        @if more {
            @if let Some((last, _, _)) = rows.last() {
                p.pager { a rel="next" href={"/ui/spaces?after=" (hex::encode(last.as_bytes()))} { "Next page →" } }
            }
        }
    };
    Ok(layout(Some(&viewer), "Spaces", Nav::Spaces, body))
}

/// A space page's paging: draw the epochs before this seq.
#[derive(Deserialize, Default)]
pub(crate) struct SpaceQuery {
    before: Option<u64>,
}

async fn dag(
    state: &AppState,
    space: &SpaceId,
    q: &SpaceQuery,
) -> Result<crate::graph::Dag, UiError> {
    let before = q.before.map(Seq);
    Ok(crate::graph::load(state.diagnostics.as_ref(), space, before, EPOCHS).await?)
}

/// `GET /ui/spaces/{space}`: the space's heads and its recent epochs as a DAG, paged back.
pub(crate) async fn space(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    q: Result<Query<SpaceQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Markup, UiError> {
    let Ok(Query(q)) = q else {
        return Err(UiError::bad_request("before: expected a seq number"));
    };
    let space = parse_space(&id)?;
    let permit = read_permit(&state).await?;
    let heads = state.epochs.heads(&space).await?;
    let next = state.diagnostics.next_seq(&space).await?;
    let dag = dag(&state, &space, &q).await?;
    let peers = state.epochs.sync_peers(&space).await?;
    drop(permit);
    let now = cairn::spool::Timestamp::from_unix_micros(now_us());
    let svg = crate::graph::svg(&dag);
    let path = space_path(&space);
    let body = html! {
        h1 { "Space " span.space { (printable(&space.to_string())) } }
        p { (next.0.saturating_sub(1)) " epochs, " (heads.len()) " head" @if heads.len() != 1 { "s" }
            @if heads.len() > 1 { " — forked: the next append merges them" } "." }
        table.heads {
            thead { tr { th.num { "seq" } th { "head" } } }
            tbody { @for h in &heads { tr { td.num { (h.seq.0) } td.mono { (hex::encode(h.id.as_bytes())) } } } }
        }
        h2 { "Sync peers" }
        @if peers.is_empty() { p.empty { "No store has synced into this space." } }
        @else {
            table.peers {
                thead { tr { th { "peer store" } th.num { "cursor seq" } th { "cursor epoch" }
                    th.num { "epochs received" } th.num { "bytes received" } th { "last update" } th.num { "age" } } }
                tbody {
                    @for p in &peers {
                        @let at = cairn::spool::Timestamp::from_unix_micros(p.updated_at_us);
                        tr {
                            td.mono { (p.cursor.peer.as_str()) }
                            td.num { (p.cursor.seq.0) }
                            td.mono { (hex::encode(p.cursor.id.as_bytes())) }
                            td.num { (p.epochs) }
                            td.num { (p.bytes) }
                            td { (when(at)) }
                            td.num { (age(now.duration_since(at))) }
                        }
                    }
                }
            }
        }
        h2 { "Recent epochs" }
        p.note { "Newest at the top; an edge runs from an epoch to each of its parents; heads are outlined. "
            a href={(path) "/graph.svg" @if let Some(b) = q.before { "?before=" (b) }} { "SVG file" } }
        div.dag { (trusted(svg)) }
        p.pager {
            @if q.before.is_some() { a href=(path) { "← Newest" } " " }
            @if let Some(older) = dag.older { a rel="next" href={(path) "?before=" (older.0)} { "Older epochs →" } }
        }
    };
    Ok(layout(Some(&viewer), "Space", Nav::Spaces, body))
}

/// Microseconds since the Unix epoch, on this server's clock.
fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// `GET /ui/spaces/{space}/graph.svg`: the same picture as a file.
pub(crate) async fn graph_svg(
    State(state): State<AppState>,
    Path(id): Path<String>,
    q: Result<Query<SpaceQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, UiError> {
    let Ok(Query(q)) = q else {
        return Err(UiError::bad_request("before: expected a seq number"));
    };
    let space = parse_space(&id)?;
    let permit = read_permit(&state).await?;
    let dag = dag(&state, &space, &q).await?;
    drop(permit);
    Ok((
        [(header::CONTENT_TYPE, "image/svg+xml; charset=utf-8")],
        crate::graph::svg(&dag),
    )
        .into_response())
}

//! The epoch log's routes: append, heads, feed, import.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use cairn::{FeedCursor, ImportOutcome, Seq, SpaceId};

use super::error::ApiError;
use super::extract::{Body, Params, PathArgs};
use super::json::{
    events_in, AppendRequest, AppendResponse, ErrorBody, FeedEventOut, FeedQuery, FeedResponse,
    HeadOut, HeadsResponse, ImportRequest, ImportResponse, SpacePath,
};
use super::page;
use super::responses::{Busy, InvalidInputOrReserved, NoEpoch, NoToken, ReadOnly, TooLarge};
use super::state::AppState;

/// Default feed page size.
const DEFAULT_FEED_LIMIT: usize = 100;
/// Largest feed page a request may ask for.
pub(crate) const MAX_FEED_LIMIT: usize = 1000;

fn space(s: String) -> Result<SpaceId, ApiError> {
    Ok(SpaceId::new(s)?)
}

/// Appends one epoch.
#[utoipa::path(
    post, path = "/v1/spaces/{space}/epochs", tag = "epochs",
    params(SpacePath),
    request_body = AppendRequest,
    responses(
        (status = 201, description = "Appended", body = AppendResponse),
        InvalidInputOrReserved,
        NoToken,
        ReadOnly,
        TooLarge,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn append(
    State(state): State<AppState>,
    PathArgs(SpacePath { space: space_id }): PathArgs<SpacePath>,
    Body(req): Body<AppendRequest>,
) -> Result<(StatusCode, Json<AppendResponse>), ApiError> {
    let space = space(space_id)?;
    let events = events_in(req.events)?;
    let appended = state.epochs.append(&space, events).await?;
    state.metrics.appends.inc();
    state.sync.changed();
    Ok((
        StatusCode::CREATED,
        Json(AppendResponse {
            seq: appended.seq.0,
            id: appended.id.to_string(),
            parents: appended.parents.iter().map(ToString::to_string).collect(),
        }),
    ))
}

/// The space's heads.
#[utoipa::path(
    get, path = "/v1/spaces/{space}/heads", tag = "epochs",
    params(SpacePath),
    responses(
        (status = 200, description = "The heads, sorted by id bytes", body = HeadsResponse),
        (status = 400, description = "Invalid space id, or a reserved one (`reserved`)", body = ErrorBody),
        NoToken,
        NoEpoch,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn heads(
    State(state): State<AppState>,
    PathArgs(SpacePath { space: space_id }): PathArgs<SpacePath>,
) -> Result<Json<HeadsResponse>, ApiError> {
    let space = space(space_id)?;
    let heads = state.epochs.heads(&space).await?;
    Ok(Json(HeadsResponse {
        heads: heads.iter().map(HeadOut::from).collect(),
    }))
}

/// One page of the space's feed.
#[utoipa::path(
    get, path = "/v1/spaces/{space}/events", tag = "epochs",
    params(SpacePath, FeedQuery),
    responses(
        (status = 200, description = "A page of whole epochs", body = FeedResponse),
        (status = 400, description = "Bad cursor or limit, or a reserved space id (`reserved`)", body = ErrorBody),
        NoToken,
        NoEpoch,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn feed(
    State(state): State<AppState>,
    PathArgs(SpacePath { space: space_id }): PathArgs<SpacePath>,
    Params(q): Params<FeedQuery>,
) -> Result<Json<FeedResponse>, ApiError> {
    let space = space(space_id)?;
    let limit = q.limit.unwrap_or(DEFAULT_FEED_LIMIT);
    if !(1..=MAX_FEED_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "feed limit",
            &format!("is {limit}; it must be between 1 and {MAX_FEED_LIMIT}"),
        ));
    }
    let cursor = q.cursor.as_deref().map(FeedCursor::parse).transpose()?;
    // Where the page ends so far: after its last whole epoch.
    let mut at = match cursor {
        Some(c) => {
            c.resume_after(&space)?;
            c
        }
        None => FeedCursor::new(&space, Seq(0)),
    };
    // Whole epochs, at most `limit` events (the first epoch goes in whatever its size) and
    // `limits.max_page_bytes`: the store reads no more than that many stored bytes, and the
    // JSON, which can be larger (`page`), is cut at the same budget.
    let read = state
        .epochs
        .events_since_within(&space, Some(&at), limit, state.page_bytes)
        .await?;
    let mut events = page::JsonArray::new(state.page_bytes);
    for epoch in read.events.chunk_by(|a, b| a.seq == b.seq) {
        if !events.offer(&page::unit(epoch.iter().map(FeedEventOut::from))?) {
            break;
        }
        at = FeedCursor::new(&space, epoch[0].seq);
    }
    Ok(Json(FeedResponse {
        events: events.close()?,
        next: at.to_string(),
    }))
}

/// Imports an epoch made elsewhere (replication).
#[utoipa::path(
    post, path = "/v1/spaces/{space}/import", tag = "epochs",
    params(SpacePath),
    request_body = ImportRequest,
    responses(
        (status = 201, description = "Imported", body = ImportResponse),
        (status = 200, description = "Already present; nothing written", body = ImportResponse),
        InvalidInputOrReserved,
        NoToken,
        ReadOnly,
        (status = 422, description = "Hash mismatch or unknown parent", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn import(
    State(state): State<AppState>,
    PathArgs(SpacePath { space: space_id }): PathArgs<SpacePath>,
    Body(req): Body<ImportRequest>,
) -> Result<(StatusCode, Json<ImportResponse>), ApiError> {
    let space = space(space_id)?;
    let epoch = req.into_epoch(space)?;
    let (status, outcome, seq) = match state.epochs.import(epoch).await? {
        ImportOutcome::Imported(seq) => {
            state.sync.changed();
            (StatusCode::CREATED, "imported", seq)
        }
        ImportOutcome::AlreadyPresent(seq) => (StatusCode::OK, "already_present", seq),
    };
    Ok((
        status,
        Json(ImportResponse {
            outcome: outcome.into(),
            seq: seq.0,
        }),
    ))
}

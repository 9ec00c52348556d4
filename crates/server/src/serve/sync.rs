//! The sync protocol's routes: what `cairn sync`'s HTTP side ([`crate::sync::HttpEndpoint`])
//! asks of a served store, one store call per request ([`cairn::sync::SyncEndpoint`]).
//!
//! Reads take a read-only token — `missing` and `epochs` too, reads sent as `POST` because
//! their id lists do not fit a URL (`auth::READING_POSTS`) —; the import needs a full-access
//! token. A refused epoch of an import names its position (`index`) and its id; nothing of the
//! batch is written. The long poll (`wait`) is bounded in time and in concurrent waiters
//! ([`super::wake`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use cairn::sync::{epoch_bytes, MAX_IMPORT_BATCH, MAX_MISSING_IDS};
use cairn::{EpochId, ImportOutcome, Seq, SpaceId, MAX_RECENT_EPOCHS};

use super::error::ApiError;
use super::extract::{Body, Params, PathArgs};
use super::json::{
    EpochOut, EpochsRequest, EpochsResponse, ErrorBody, MissingRequest, MissingResponse,
    OutcomeOut, PeerOut, PeersResponse, SpacePath, SpacesQuery, SpacesResponse, StoreIdResponse,
    SummariesQuery, SummariesResponse, SummaryOut, SyncImportRequest, SyncImportResponse,
    WaitQuery, WaitResponse, MAX_EPOCHS_ASKED,
};
use super::page;
use super::responses::{Busy, InvalidInputOrReserved, NoToken, ReadOnly, TooLarge};
use super::state::AppState;
use super::wake::STORE_CHECK;

/// Spaces per page when the request does not say.
const DEFAULT_SPACES: usize = 500;
/// Largest page of spaces.
const MAX_SPACES: usize = 1000;
/// Summaries per page when the request does not say.
const DEFAULT_SUMMARIES: usize = 100;
/// A long poll's wait when the request does not say, in milliseconds.
const DEFAULT_WAIT_MS: u64 = 25_000;
/// Longest wait a request may ask for, in milliseconds.
const MAX_WAIT_MS: u64 = 30_000;
/// The peer label of an import that carries no cursor.
const NO_PEER: &str = "none";

fn space(s: String) -> Result<SpaceId, ApiError> {
    Ok(SpaceId::new(s)?)
}

fn ids_in(ids: &[String]) -> Result<Vec<EpochId>, ApiError> {
    ids.iter()
        .map(|id| EpochId::from_hex(id).map_err(ApiError::from))
        .collect()
}

fn seq_in(what: &str, n: u64) -> Result<Seq, ApiError> {
    let seq = Seq(n);
    if seq.to_i64().is_err() {
        return Err(ApiError::invalid(what, "must be at most 2^63-1"));
    }
    Ok(seq)
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The space's newest seq; `None` when it has no epoch.
async fn newest(state: &AppState, space: &SpaceId) -> Result<Option<Seq>, ApiError> {
    match state.epochs.heads(space).await {
        Ok(heads) => Ok(heads.iter().map(|h| h.seq).max()),
        Err(cairn::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// This store's id for sync.
#[utoipa::path(
    get, path = "/v1/sync/id", tag = "sync",
    responses(
        (status = 200, description = "The store's id and the body limit", body = StoreIdResponse),
        NoToken,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn store_id(
    State(state): State<AppState>,
) -> Result<Json<StoreIdResponse>, ApiError> {
    let id = state.epochs.store_id().await?;
    Ok(Json(StoreIdResponse {
        id: id.to_string(),
        max_body_bytes: state.sync.max_body_bytes as u64,
    }))
}

/// Non-reserved spaces in byte order.
#[utoipa::path(
    get, path = "/v1/sync/spaces", tag = "sync",
    params(SpacesQuery),
    responses(
        (status = 200, description = "A page of space ids", body = SpacesResponse),
        (status = 400, description = "Bad `after` or `limit`", body = ErrorBody),
        NoToken,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn spaces(
    State(state): State<AppState>,
    Params(q): Params<SpacesQuery>,
) -> Result<Json<SpacesResponse>, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_SPACES);
    if !(1..=MAX_SPACES).contains(&limit) {
        return Err(ApiError::invalid(
            "space limit",
            &format!("is {limit}; it must be between 1 and {MAX_SPACES}"),
        ));
    }
    let mut after = match q.after.as_deref() {
        Some(h) => {
            let bytes = hex::decode(h)
                .map_err(|_| ApiError::invalid("after", "must be a space id's bytes as hex"))?;
            Some(SpaceId::from_stored(bytes)?)
        }
        None => None,
    };
    // Reserved spaces are skipped and the page filled from the next ones, so a short page
    // means the end of the list.
    let mut out = Vec::new();
    loop {
        let want = limit - out.len();
        let page = state.epochs.list_spaces(after.as_ref(), want).await?;
        let full = page.len() == want;
        after = page.last().cloned();
        out.extend(
            page.into_iter()
                .filter(|s| !s.is_reserved())
                .map(|s| hex::encode(s.as_bytes())),
        );
        if !full || out.len() == limit {
            break;
        }
    }
    Ok(Json(SpacesResponse { spaces: out }))
}

/// The space's epochs newest first, without events.
#[utoipa::path(
    get, path = "/v1/spaces/{space}/sync/summaries", tag = "sync",
    params(SpacePath, SummariesQuery),
    responses(
        (status = 200, description = "The epochs, newest first; empty when the space has none", body = SummariesResponse),
        (status = 400, description = "Bad `before` or `limit`, or a reserved space id (`reserved`)", body = ErrorBody),
        NoToken,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn summaries(
    State(state): State<AppState>,
    PathArgs(SpacePath { space: space_id }): PathArgs<SpacePath>,
    Params(q): Params<SummariesQuery>,
) -> Result<Json<SummariesResponse>, ApiError> {
    let space = space(space_id)?;
    let limit = q.limit.unwrap_or(DEFAULT_SUMMARIES);
    if !(1..=MAX_RECENT_EPOCHS).contains(&limit) {
        return Err(ApiError::invalid(
            "summary limit",
            &format!("is {limit}; it must be between 1 and {MAX_RECENT_EPOCHS}"),
        ));
    }
    if q.before == Some(0) {
        return Err(ApiError::invalid("before", "must be at least 1"));
    }
    let before = q.before.map(|b| seq_in("before", b)).transpose()?;
    let epochs = match state.diagnostics.recent_epochs(&space, before, limit).await {
        Ok(e) => e,
        Err(cairn::Error::NotFound { .. }) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    Ok(Json(SummariesResponse {
        epochs: epochs.iter().map(SummaryOut::from).collect(),
    }))
}

/// Whole epochs by id, in the order asked, under the page byte budget (a read: a read-only
/// token may send it).
#[utoipa::path(
    post, path = "/v1/spaces/{space}/sync/epochs", tag = "sync",
    params(SpacePath),
    request_body = EpochsRequest,
    responses(
        (status = 200, description = "The epochs asked for, or the first of them (`limits.max_page_bytes`)", body = EpochsResponse),
        InvalidInputOrReserved,
        NoToken,
        (status = 404, description = "An epoch asked for is not in the space (`not_found`)", body = ErrorBody),
        TooLarge,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn epochs(
    State(state): State<AppState>,
    PathArgs(SpacePath { space: space_id }): PathArgs<SpacePath>,
    Body(req): Body<EpochsRequest>,
) -> Result<Json<EpochsResponse>, ApiError> {
    let space = space(space_id)?;
    if !(1..=MAX_EPOCHS_ASKED).contains(&req.ids.len()) {
        return Err(ApiError::invalid(
            "epoch ids",
            &format!("{} asked; ask for 1 to {MAX_EPOCHS_ASKED}", req.ids.len()),
        ));
    }
    let ids = ids_in(&req.ids)?;
    let mut out = page::JsonArray::new(state.page_bytes);
    for id in &ids {
        let Some(epoch) = state.epochs.epoch(&space, id).await? else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("epoch {id} is not in this space"),
            ));
        };
        if !out.offer(&page::unit([EpochOut::from(&epoch)])?) {
            break;
        }
    }
    Ok(Json(EpochsResponse {
        epochs: out.close()?,
    }))
}

/// Which of the ids the space lacks (a read: a read-only token may send it).
#[utoipa::path(
    post, path = "/v1/spaces/{space}/sync/missing", tag = "sync",
    params(SpacePath),
    request_body = MissingRequest,
    responses(
        (status = 200, description = "The ids the space lacks, in the order asked", body = MissingResponse),
        InvalidInputOrReserved,
        NoToken,
                TooLarge,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn missing(
    State(state): State<AppState>,
    PathArgs(SpacePath { space: space_id }): PathArgs<SpacePath>,
    Body(req): Body<MissingRequest>,
) -> Result<Json<MissingResponse>, ApiError> {
    let space = space(space_id)?;
    if req.ids.len() > MAX_MISSING_IDS {
        return Err(ApiError::invalid(
            "epoch ids",
            &format!("{} asked; at most {MAX_MISSING_IDS}", req.ids.len()),
        ));
    }
    let ids = ids_in(&req.ids)?;
    let missing = state.epochs.missing(&space, &ids).await?;
    Ok(Json(MissingResponse {
        missing: missing.iter().map(ToString::to_string).collect(),
    }))
}

/// The sync cursors this store keeps for the space.
#[utoipa::path(
    get, path = "/v1/spaces/{space}/sync/peers", tag = "sync",
    params(SpacePath),
    responses(
        (status = 200, description = "The cursors, by peer id", body = PeersResponse),
        (status = 400, description = "Invalid space id, or a reserved one (`reserved`)", body = ErrorBody),
        NoToken,
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn peers(
    State(state): State<AppState>,
    PathArgs(SpacePath { space: space_id }): PathArgs<SpacePath>,
) -> Result<Json<PeersResponse>, ApiError> {
    let space = space(space_id)?;
    let peers = state.epochs.sync_peers(&space).await?;
    Ok(Json(PeersResponse {
        peers: peers.iter().map(PeerOut::from).collect(),
    }))
}

/// The answer to a refused epoch of a batch: the inner error's status and code, the epoch's
/// position and id.
fn refused(index: usize, id: Option<EpochId>, error: cairn::Error) -> ApiError {
    let inner = ApiError::from(error);
    let (status, code) = match inner.code {
        "invalid_input" | "reserved" => (StatusCode::BAD_REQUEST, "invalid_batch_item"),
        _ => (inner.status, inner.code),
    };
    let named = id.map_or_else(String::new, |id| format!(" ({id})"));
    ApiError {
        index: Some(index),
        ..ApiError::new(
            status,
            code,
            format!(
                "epoch {index}{named} of the batch: {}; nothing of the batch was written",
                inner.message
            ),
        )
    }
}

/// Imports a batch of epochs, with the sender's cursor, in one transaction.
#[utoipa::path(
    post, path = "/v1/spaces/{space}/sync/import", tag = "sync",
    params(SpacePath),
    request_body = SyncImportRequest,
    responses(
        (status = 201, description = "Imported (at least one epoch was new)", body = SyncImportResponse),
        (status = 200, description = "Every epoch was present already (the cursor, if any, recorded)", body = SyncImportResponse),
        (status = 400, description = "Invalid input, a reserved space id (`reserved`), or an epoch that does not read (`invalid_batch_item`, with its `index`); nothing was written", body = ErrorBody),
        NoToken,
        ReadOnly,
        TooLarge,
        (status = 422, description = "An epoch whose id does not recompute (`hash_mismatch`) or whose parent is neither in the space nor earlier in the batch (`unknown_parent`), with its `index`; nothing was written", body = ErrorBody),
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn import(
    State(state): State<AppState>,
    PathArgs(SpacePath { space: space_id }): PathArgs<SpacePath>,
    Body(req): Body<SyncImportRequest>,
) -> Result<(StatusCode, Json<SyncImportResponse>), ApiError> {
    let space = space(space_id)?;
    if req.epochs.len() > MAX_IMPORT_BATCH {
        return Err(ApiError::invalid(
            "import batch",
            &format!(
                "holds {} epochs; at most {MAX_IMPORT_BATCH} go in one batch",
                req.epochs.len()
            ),
        ));
    }
    let cursor = req.cursor.as_ref().map(|c| c.cursor()).transpose()?;
    let mut epochs = Vec::with_capacity(req.epochs.len());
    for (index, e) in req.epochs.into_iter().enumerate() {
        let id = EpochId::from_hex(&e.id).ok();
        let epoch = e.into_epoch(space.clone()).map_err(|e| ApiError {
            index: Some(index),
            message: format!(
                "epoch {index}{} of the batch: {}; nothing of the batch was written",
                id.map_or_else(String::new, |id| format!(" ({id})")),
                e.message
            ),
            code: if e.code == "invalid_input" {
                "invalid_batch_item"
            } else {
                e.code
            },
            ..e
        })?;
        epochs.push(epoch);
    }
    let sizes: Vec<(EpochId, u64)> = epochs.iter().map(|e| (e.id, epoch_bytes(e))).collect();
    let item = |e: cairn::Error| match e {
        cairn::Error::InvalidBatchItem { index, error } => {
            refused(index, sizes.get(index).map(|s| s.0), *error)
        }
        other => ApiError::from(other),
    };
    let outcomes = state
        .epochs
        .import_batch(&space, epochs, cursor.as_ref(), now_us())
        .await
        .map_err(item)?;
    let (mut count, mut bytes) = (0u64, 0u64);
    let outcomes: Vec<OutcomeOut> = outcomes
        .iter()
        .zip(&sizes)
        .map(|(o, (_, b))| match o {
            ImportOutcome::Imported(seq) => {
                count += 1;
                bytes += b;
                OutcomeOut {
                    outcome: "imported".into(),
                    seq: seq.0,
                }
            }
            ImportOutcome::AlreadyPresent(seq) => OutcomeOut {
                outcome: "already_present".into(),
                seq: seq.0,
            },
        })
        .collect();
    let peer = cursor.as_ref().map_or(NO_PEER, |c| c.peer.as_str());
    state.metrics.sync.imported(peer, count, bytes);
    let status = if count > 0 {
        state.sync.changed();
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(SyncImportResponse { outcomes })))
}

/// Waits until the space holds an epoch above `seen`.
#[utoipa::path(
    get, path = "/v1/spaces/{space}/sync/wait", tag = "sync",
    params(SpacePath, WaitQuery),
    responses(
        (status = 200, description = "The space holds an epoch above `seen` (`changed`), or the wait ended", body = WaitResponse),
        (status = 400, description = "Bad `seen` or `timeout_ms`, or a reserved space id (`reserved`)", body = ErrorBody),
        NoToken,
        (status = 429, description = "Too many long polls wait already (`too_many_waiters`); retry later", body = ErrorBody),
        Busy,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn wait(
    State(state): State<AppState>,
    PathArgs(SpacePath { space: space_id }): PathArgs<SpacePath>,
    Params(q): Params<WaitQuery>,
) -> Result<Json<WaitResponse>, ApiError> {
    let space = space(space_id)?;
    let seen = q.seen.map(|s| seq_in("seen", s)).transpose()?;
    let ms = q.timeout_ms.unwrap_or(DEFAULT_WAIT_MS);
    if ms > MAX_WAIT_MS {
        return Err(ApiError::invalid(
            "timeout_ms",
            &format!("is {ms}; it must be at most {MAX_WAIT_MS}"),
        ));
    }
    let Some(_place) = state.sync.try_wait() else {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_waiters",
            "too many long polls are waiting on this server; retry later",
        ));
    };
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(ms).min(state.sync.longest_wait);
    // Subscribed before the first look, so a write between the look and the wait wakes it.
    let mut wake = state.sync.subscribe();
    wake.borrow_and_update();
    loop {
        let newest = newest(&state, &space).await?;
        let changed = newest > seen;
        let now = tokio::time::Instant::now();
        if changed || now >= deadline {
            return Ok(Json(WaitResponse {
                changed,
                newest: newest.map(|s| s.0),
            }));
        }
        let look = deadline.min(now + STORE_CHECK);
        tokio::select! {
            woke = wake.changed() => {
                if woke.is_err() {
                    tokio::time::sleep_until(look).await;
                }
            }
            () = tokio::time::sleep_until(look) => {}
        }
    }
}

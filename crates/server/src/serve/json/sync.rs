//! The sync routes' bodies (`/v1/sync/…`, `/v1/spaces/{space}/sync/…`): what `cairn sync`'s
//! HTTP side ([`crate::sync::HttpEndpoint`]) sends and reads. An epoch travels as the import
//! route's body ([`ImportRequest`]) both ways: [`EpochOut`] is that body with its seq.

use cairn::sync::{StoreId, SyncCursor, SyncPeer};
use cairn::{Epoch, EpochId, EpochSummary, Event, Seq};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::bytes::bytes_out;
use super::epochs::ImportRequest;
use crate::serve::error::ApiError;

/// Most ids one `POST /v1/spaces/{space}/sync/epochs` asks for.
pub(crate) const MAX_EPOCHS_ASKED: usize = 1000;

/// `GET /v1/sync/id`.
#[derive(Serialize, ToSchema)]
pub(crate) struct StoreIdResponse {
    /// The store's id for sync: 32 lowercase hex digits, the same for the store's life.
    pub(crate) id: String,
    /// The largest request body the server takes (`limits.max_body_bytes`): a client splits
    /// its import batches under it.
    pub(crate) max_body_bytes: u64,
}

/// Query of `GET /v1/sync/spaces`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct SpacesQuery {
    /// Only spaces after this one in byte order: the space id's bytes as hex (the last of the
    /// previous page).
    #[param(pattern = r"^(?:[0-9a-fA-F]{2}){1,256}$")]
    pub(crate) after: Option<String>,
    /// Most spaces (1 to 1000, default 500).
    #[param(minimum = 1, maximum = 1000)]
    pub(crate) limit: Option<usize>,
}

/// `GET /v1/sync/spaces`.
#[derive(Serialize, ToSchema)]
pub(crate) struct SpacesResponse {
    /// Non-reserved space ids in byte order, each its bytes as hex; fewer than `limit` when
    /// the list is at its end.
    pub(crate) spaces: Vec<String>,
}

/// Query of `GET /v1/spaces/{space}/sync/summaries`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct SummariesQuery {
    /// Only epochs with a lower seq (all when absent).
    #[param(minimum = 1, maximum = 9_223_372_036_854_775_807_i64)]
    pub(crate) before: Option<u64>,
    /// Most epochs (1 to 1000, default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub(crate) limit: Option<usize>,
}

/// An epoch without its events.
#[derive(Serialize, ToSchema)]
pub(crate) struct SummaryOut {
    /// Its id (64 hex digits).
    pub(crate) id: String,
    /// Its seq in this store.
    pub(crate) seq: u64,
    /// Its parents' ids, sorted by id bytes.
    pub(crate) parents: Vec<String>,
    /// How many events it holds.
    pub(crate) events: u64,
}

impl From<&EpochSummary> for SummaryOut {
    fn from(s: &EpochSummary) -> Self {
        Self {
            id: s.id.to_string(),
            seq: s.seq.0,
            parents: s.parents.iter().map(ToString::to_string).collect(),
            events: s.events,
        }
    }
}

/// `GET /v1/spaces/{space}/sync/summaries`.
#[derive(Serialize, ToSchema)]
pub(crate) struct SummariesResponse {
    /// The epochs, newest first; empty when the space has none (below `before`).
    pub(crate) epochs: Vec<SummaryOut>,
}

/// `POST /v1/spaces/{space}/sync/epochs`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EpochsRequest {
    /// The epochs' ids (64 hex digits each; 1 to 1000).
    #[schema(min_items = 1, max_items = 1000)]
    pub(crate) ids: Vec<String>,
}

/// One event of an epoch a sync reads: the import route's event (`EventIn`).
#[derive(Serialize, ToSchema)]
pub(crate) struct EventOut {
    /// Its kind.
    pub(crate) kind: String,
    /// Its key as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<String>,
    /// Its key, base64 (when not UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key_b64: Option<String>,
    /// Its payload as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload: Option<String>,
    /// Its payload, base64 (when not UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload_b64: Option<String>,
}

impl From<&Event> for EventOut {
    fn from(e: &Event) -> Self {
        let (key, key_b64) = match &e.key {
            Some(k) => bytes_out(k),
            None => (None, None),
        };
        let (payload, payload_b64) = bytes_out(&e.payload);
        Self {
            kind: e.kind.clone(),
            key,
            key_b64,
            payload,
            payload_b64,
        }
    }
}

/// A whole epoch: the import route's body (`ImportRequest`) with the epoch's seq here.
#[derive(Serialize, ToSchema)]
pub(crate) struct EpochOut {
    /// Its id (64 hex digits).
    pub(crate) id: String,
    /// Its seq in this store.
    pub(crate) seq: u64,
    /// Its parents' ids, sorted by id bytes.
    pub(crate) parents: Vec<String>,
    /// Its events, in append order.
    pub(crate) events: Vec<EventOut>,
}

impl From<&Epoch> for EpochOut {
    fn from(e: &Epoch) -> Self {
        Self {
            id: e.id.to_string(),
            seq: e.seq.0,
            parents: e.parents.iter().map(ToString::to_string).collect(),
            events: e.events.iter().map(EventOut::from).collect(),
        }
    }
}

/// `POST /v1/spaces/{space}/sync/epochs`.
#[derive(Serialize, ToSchema)]
pub(crate) struct EpochsResponse {
    /// The epochs asked for, in the order asked: all of them, or the first ones when the next
    /// would take the answer past `limits.max_page_bytes` of JSON (the first always goes out);
    /// ask again for the rest.
    #[schema(value_type = Vec<EpochOut>)]
    pub(crate) epochs: Box<serde_json::value::RawValue>,
}

/// `POST /v1/spaces/{space}/sync/missing`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MissingRequest {
    /// The epochs' ids (64 hex digits each; at most 10000).
    #[schema(max_items = 10000)]
    pub(crate) ids: Vec<String>,
}

/// `POST /v1/spaces/{space}/sync/missing`.
#[derive(Serialize, ToSchema)]
pub(crate) struct MissingResponse {
    /// The ids asked for that the space lacks, in the order asked.
    pub(crate) missing: Vec<String>,
}

/// A sync cursor: the receiving store holds every epoch of `peer` up to `peer`'s seq `seq`,
/// and `peer`'s epoch at `seq` is `id`.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CursorIn {
    /// The sending store's id (32 lowercase hex digits).
    #[schema(pattern = r"^[0-9a-f]{32}$")]
    pub(crate) peer: String,
    /// The sending store's seq.
    #[schema(minimum = 1, maximum = 9_223_372_036_854_775_807_i64)]
    #[serde(deserialize_with = "crate::serve::integer::one")]
    pub(crate) seq: u64,
    /// The sending store's epoch at `seq` (64 hex digits).
    #[schema(pattern = r"^[0-9a-fA-F]{64}$")]
    pub(crate) id: String,
}

impl CursorIn {
    /// The cursor, checked.
    pub(crate) fn cursor(&self) -> Result<SyncCursor, ApiError> {
        let seq = Seq(self.seq);
        if i64::try_from(self.seq).is_err() {
            return Err(ApiError::invalid(
                "sync cursor",
                "its seq must be at most 2^63-1",
            ));
        }
        if seq < Seq::FIRST {
            return Err(ApiError::invalid(
                "sync cursor",
                "its seq must be at least 1",
            ));
        }
        Ok(SyncCursor {
            peer: StoreId::parse(&self.peer)?,
            seq,
            id: EpochId::from_hex(&self.id)?,
        })
    }
}

/// `POST /v1/spaces/{space}/sync/import`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SyncImportRequest {
    /// The epochs, parents first (an epoch's parents are in the space or earlier in the
    /// batch), each as the import route's body; at most 1000.
    #[schema(max_items = 1000)]
    pub(crate) epochs: Vec<ImportRequest>,
    /// The cursor to record for the sending store in the same transaction.
    pub(crate) cursor: Option<CursorIn>,
}

/// What the import did with one epoch.
#[derive(Serialize, ToSchema)]
pub(crate) struct OutcomeOut {
    /// `imported` or `already_present`.
    pub(crate) outcome: String,
    /// The epoch's seq in this store.
    pub(crate) seq: u64,
}

/// `POST /v1/spaces/{space}/sync/import`.
#[derive(Serialize, ToSchema)]
pub(crate) struct SyncImportResponse {
    /// One outcome per epoch, in batch order.
    pub(crate) outcomes: Vec<OutcomeOut>,
}

/// One sending store's cursor in a space, with what this store counted.
#[derive(Serialize, ToSchema)]
pub(crate) struct PeerOut {
    /// The sending store's id.
    pub(crate) peer: String,
    /// The sending store's seq up to which this store holds everything.
    pub(crate) seq: u64,
    /// The sending store's epoch at `seq`.
    pub(crate) id: String,
    /// Epochs imported from it in this space.
    pub(crate) epochs: u64,
    /// Their stored bytes.
    pub(crate) bytes: u64,
    /// When the cursor last moved (microseconds since the Unix epoch, the syncing process's
    /// clock).
    pub(crate) updated_at_us: i64,
}

impl From<&SyncPeer> for PeerOut {
    fn from(p: &SyncPeer) -> Self {
        Self {
            peer: p.cursor.peer.to_string(),
            seq: p.cursor.seq.0,
            id: p.cursor.id.to_string(),
            epochs: p.epochs,
            bytes: p.bytes,
            updated_at_us: p.updated_at_us,
        }
    }
}

/// `GET /v1/spaces/{space}/sync/peers`.
#[derive(Serialize, ToSchema)]
pub(crate) struct PeersResponse {
    /// The cursors, by peer id; empty for a space never synced into this store.
    pub(crate) peers: Vec<PeerOut>,
}

/// Query of `GET /v1/spaces/{space}/sync/wait`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct WaitQuery {
    /// The newest seq the caller has seen; absent for a space it has seen no epoch of.
    #[param(minimum = 0, maximum = 9_223_372_036_854_775_807_i64)]
    pub(crate) seen: Option<u64>,
    /// Longest wait in milliseconds (0 to 30000, default 25000; the server may answer sooner,
    /// and waits at most its own cap, below `limits.request_timeout_secs`).
    #[param(minimum = 0, maximum = 30000)]
    pub(crate) timeout_ms: Option<u64>,
}

/// `GET /v1/spaces/{space}/sync/wait`.
#[derive(Serialize, ToSchema)]
pub(crate) struct WaitResponse {
    /// Whether the space holds an epoch with a seq above `seen` (false: the wait timed out).
    pub(crate) changed: bool,
    /// The space's newest seq, when it has an epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) newest: Option<u64>,
}

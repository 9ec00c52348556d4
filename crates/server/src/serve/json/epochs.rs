//! The epoch routes' bodies (append, heads, feed, import), and what an appended or imported
//! epoch's body becomes.

use cairn::{EpochId, Event, FeedEvent, ForeignEpoch, Head, SpaceId};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::bytes::{bytes_in, bytes_out, opt_bytes_in};
use crate::serve::error::ApiError;

/// One event of an epoch to append or import: `payload` or `payload_b64` (exactly one), and
/// at most one of `key` and `key_b64`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventIn {
    /// The event's kind, e.g. `kv.put`: 1 to 256 bytes of UTF-8 without a NUL character
    /// (U+0000; refused as `invalid_input`, as the core's `Event::validate` does).
    #[schema(min_length = 1, pattern = r"^[^\u0000]*$")]
    pub(crate) kind: String,
    /// The event's optional key, as text (at most 1024 bytes).
    pub(crate) key: Option<String>,
    /// The event's optional key, base64 (at most 1024 bytes decoded).
    #[schema(
        content_encoding = "base64",
        pattern = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
    )]
    pub(crate) key_b64: Option<String>,
    /// The payload, as text (at most 16 MiB).
    pub(crate) payload: Option<String>,
    /// The payload, base64 (at most 16 MiB decoded).
    #[schema(
        content_encoding = "base64",
        pattern = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
    )]
    pub(crate) payload_b64: Option<String>,
}

/// `POST /v1/spaces/{space}/epochs`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AppendRequest {
    /// The epoch's events (1 to 10000).
    #[schema(min_items = 1, max_items = 10000)]
    pub(crate) events: Vec<EventIn>,
}

/// An appended epoch.
#[derive(Serialize, ToSchema)]
pub(crate) struct AppendResponse {
    /// Its seq in the space.
    pub(crate) seq: u64,
    /// Its id (64 hex digits).
    pub(crate) id: String,
    /// Its parents' ids.
    pub(crate) parents: Vec<String>,
}

/// One head of a space.
#[derive(Serialize, ToSchema)]
pub(crate) struct HeadOut {
    /// The head epoch's seq.
    pub(crate) seq: u64,
    /// The head epoch's id.
    pub(crate) id: String,
}

impl From<&Head> for HeadOut {
    fn from(h: &Head) -> Self {
        Self {
            seq: h.seq.0,
            id: h.id.to_string(),
        }
    }
}

/// `GET /v1/spaces/{space}/heads`.
#[derive(Serialize, ToSchema)]
pub(crate) struct HeadsResponse {
    /// The heads, sorted by id bytes.
    pub(crate) heads: Vec<HeadOut>,
}

/// Query of `GET /v1/spaces/{space}/events`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct FeedQuery {
    /// The `next` cursor of a previous page of this space's feed; the start of the feed when
    /// absent. Another space's cursor, or a position above 2^63-1, is 400 `bad_cursor`.
    #[param(pattern = r"^c1\.[0-9a-fA-F]{16}\.(?:0|[1-9][0-9]{0,18})$")]
    pub(crate) cursor: Option<String>,
    /// Most events in the page (1 to 1000, default 100; whole epochs only, and the first epoch
    /// goes out whatever its size). A page also ends before an epoch that would take it past
    /// `limits.max_page_bytes` of JSON (default 8 MiB), so a page can be shorter than `limit`
    /// while more follows: the feed is read to its end when a page is empty.
    #[param(minimum = 1, maximum = 1000)]
    pub(crate) limit: Option<usize>,
}

/// One event of a feed page.
#[derive(Serialize, ToSchema)]
pub(crate) struct FeedEventOut {
    /// Seq of the epoch holding it.
    pub(crate) seq: u64,
    /// The epoch holding it.
    pub(crate) epoch: String,
    /// Its position in the epoch, from 0.
    pub(crate) epoch_seq: u32,
    /// Its id.
    pub(crate) event_id: String,
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

impl From<&FeedEvent> for FeedEventOut {
    fn from(e: &FeedEvent) -> Self {
        let (key, key_b64) = match &e.event.key {
            Some(k) => bytes_out(k),
            None => (None, None),
        };
        let (payload, payload_b64) = bytes_out(&e.event.payload);
        Self {
            seq: e.seq.0,
            epoch: e.epoch.to_string(),
            epoch_seq: e.epoch_seq,
            event_id: e.event_id.to_string(),
            kind: e.event.kind.clone(),
            key,
            key_b64,
            payload,
            payload_b64,
        }
    }
}

/// `GET /v1/spaces/{space}/events`.
#[derive(Serialize, ToSchema)]
pub(crate) struct FeedResponse {
    /// The events, whole epochs only, at most `limit` events and `limits.max_page_bytes` of
    /// JSON (its first epoch excepted); empty when everything committed has been read.
    #[schema(value_type = Vec<FeedEventOut>)]
    pub(crate) events: Box<serde_json::value::RawValue>,
    /// The cursor to pass for the next page.
    pub(crate) next: String,
}

/// `POST /v1/spaces/{space}/import`: an epoch made elsewhere.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImportRequest {
    /// The epoch's claimed id (64 hex digits); it must recompute from the content.
    #[schema(pattern = r"^[0-9a-fA-F]{64}$")]
    pub(crate) id: String,
    /// Its parents' ids (64 hex digits each), each already in the space, in any order (a
    /// repeated id counts once).
    pub(crate) parents: Vec<String>,
    /// Its events (1 to 10000).
    #[schema(min_items = 1, max_items = 10000)]
    pub(crate) events: Vec<EventIn>,
}

/// What an import did.
#[derive(Serialize, ToSchema)]
pub(crate) struct ImportResponse {
    /// `imported` (201) or `already_present` (200).
    pub(crate) outcome: String,
    /// The epoch's local seq.
    pub(crate) seq: u64,
}

/// An epoch's events, each byte field read by the bytes rule, checked as a batch.
pub(crate) fn events_in(events: Vec<EventIn>) -> cairn::Result<Vec<Event>> {
    let events = events
        .into_iter()
        .map(|e| {
            Ok(Event {
                kind: e.kind,
                key: opt_bytes_in("event key", e.key, e.key_b64)?,
                payload: bytes_in("event payload", e.payload, e.payload_b64)?,
            })
        })
        .collect::<cairn::Result<Vec<_>>>()?;
    Event::validate_batch(&events)?;
    Ok(events)
}

impl ImportRequest {
    /// The epoch to import into `space`.
    pub(crate) fn into_epoch(self, space: SpaceId) -> Result<ForeignEpoch, ApiError> {
        Ok(ForeignEpoch {
            space,
            id: EpochId::from_hex(&self.id)?,
            // In any order and a repeated parent once, as the document says: the id is computed
            // over the sorted set.
            parents: {
                let mut parents = self
                    .parents
                    .iter()
                    .map(|p| EpochId::from_hex(p))
                    .collect::<Result<Vec<_>, _>>()?;
                parents.sort_unstable();
                parents.dedup();
                parents
            },
            events: events_in(self.events)?,
        })
    }
}

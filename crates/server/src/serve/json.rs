//! The API's JSON bodies, and the one rule for bytes.
//!
//! Bytes rule: a byte field `x` travels as `x` (a JSON string holding the bytes as UTF-8 text)
//! or as `x_b64` (standard base64 with padding), never both. Requests may use either form;
//! responses use `x` when the bytes are valid UTF-8 and `x_b64` otherwise. Times are
//! microseconds since the Unix epoch (`*_us`), as the spool stores them.

use std::time::Duration;

use base64::Engine as _;
use cairn::spool::{self, EnqueueItem, LeaseInfo, RunEvent};
use cairn::{
    ConsumerId, DedupKey, EnqueueOptions, EpochId, Event, FeedEvent, ForeignEpoch, Head,
    LeaseToken, NackKind, RunEventId, RunInfo, SpaceId, SupersedeGroup, Timestamp,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::ApiError;

/// Reads a byte field given as text (`text`) or base64 (`b64`): exactly one must be present.
pub(crate) fn bytes_in(
    what: &'static str,
    text: Option<String>,
    b64: Option<String>,
) -> cairn::Result<Vec<u8>> {
    match (text, b64) {
        (Some(t), None) => Ok(t.into_bytes()),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_bytes())
            .map_err(|_| cairn::Error::invalid(what, "the `_b64` form is not valid base64")),
        (None, None) => Err(cairn::Error::invalid(
            what,
            "is missing: give it as text or as `_b64` base64",
        )),
        (Some(_), Some(_)) => Err(cairn::Error::invalid(
            what,
            "is given twice: give either the text form or the `_b64` form",
        )),
    }
}

/// An optional byte field: absent when neither form is given.
pub(crate) fn opt_bytes_in(
    what: &'static str,
    text: Option<String>,
    b64: Option<String>,
) -> cairn::Result<Option<Vec<u8>>> {
    if text.is_none() && b64.is_none() {
        return Ok(None);
    }
    bytes_in(what, text, b64).map(Some)
}

/// Splits bytes into the response's text form or base64 form.
pub(crate) fn bytes_out(bytes: &[u8]) -> (Option<String>, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (Some(s.to_owned()), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
    }
}

// The rules the handlers enforce, stated in the OpenAPI document (issue 21, item 11): patterns
// and counts here, on the fields; byte limits, the one-of rules of the bytes rule and what a
// pattern cannot say are added to the document by `openapi::rules`, from the core constants.

/// The `{space}` of the epoch routes.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct SpacePath {
    /// The space: 1 to 256 bytes of UTF-8 (`x-max-bytes`), any characters, but not starting
    /// with NUL + `cairn/` (reserved for cairn's own records: 400 `reserved`). Created by its
    /// first epoch.
    #[param(min_length = 1)]
    pub(crate) space: String,
}

/// The `{queue}` of the queue routes.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Documentation only: the spool's handlers take the segments as strings.
pub(crate) struct QueuePath {
    /// The queue: 1 to 128 bytes of UTF-8 (`x-max-bytes`) without control characters.
    #[param(min_length = 1, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub(crate) queue: String,
}

/// The `{id}` of the run routes.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Documentation only: the spool's handlers take the segments as strings.
pub(crate) struct RunPath {
    /// The run id: 32 hex digits, plain or as a UUID (8-4-4-4-12).
    #[param(
        pattern = r"^(?:[0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    )]
    pub(crate) id: String,
}

/// The `{id}` and `{name}` of a fact route.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Documentation only: the spool's handlers take the segments as strings.
pub(crate) struct FactPath {
    /// The run id: 32 hex digits, plain or as a UUID (8-4-4-4-12).
    #[param(
        pattern = r"^(?:[0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    )]
    pub(crate) id: String,
    /// The fact's name: 1 to 128 bytes of UTF-8 (`x-max-bytes`) without control characters.
    #[param(min_length = 1, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub(crate) name: String,
}

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

/// `POST /v1/queues/{queue}/runs`: exactly one of `key_parts` and `key`, and exactly one of
/// `payload` and `payload_b64`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnqueueRequest {
    /// The dedup key's parts, each length-prefixed (the same key as
    /// `cairn enqueue --key P1 --key-part P2 …`): at least one part, at most 1024 bytes
    /// encoded (`x-max-encoded-bytes`: each part costs its UTF-8 length, the decimal digits of
    /// that length, and 2).
    #[schema(min_items = 1)]
    pub(crate) key_parts: Option<Vec<String>>,
    /// A one-part dedup key: `"key": "k"` is `"key_parts": ["k"]` (at most 1018 bytes, which
    /// encode to 1024).
    pub(crate) key: Option<String>,
    /// The run's payload, as text (at most 1 MiB).
    pub(crate) payload: Option<String>,
    /// The run's payload, base64 (at most 1 MiB decoded).
    #[schema(
        content_encoding = "base64",
        pattern = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
    )]
    pub(crate) payload_b64: Option<String>,
    /// Supersede group parts: older queued runs of the group become `superseded`. At least
    /// one part, at most 1024 bytes encoded as `key_parts` are.
    #[schema(min_items = 1)]
    pub(crate) supersede_group: Option<Vec<String>>,
    /// Higher runs are claimed first (default 0).
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) priority: Option<i32>,
    /// Attempts before the run is parked (1 to 1000, default 10).
    #[schema(minimum = 1, maximum = 1000)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) max_attempts: Option<u32>,
    /// No claim takes the run before this time (microseconds since the Unix epoch, from
    /// 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z).
    #[schema(minimum = 0, maximum = 253_402_300_799_999_999_i64)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) not_before_us: Option<i64>,
}

/// What an enqueue did.
#[derive(Serialize, ToSchema)]
pub(crate) struct EnqueueResponse {
    /// The run's id: new (201), or the existing run's for this key (200).
    pub(crate) run_id: String,
    /// Whether this request created the run.
    pub(crate) created: bool,
}

/// A run's lease.
#[derive(Serialize, ToSchema)]
pub(crate) struct LeaseOut {
    /// Who holds it.
    pub(crate) consumer: String,
    /// When it expires.
    pub(crate) expires_at_us: i64,
}

impl From<&LeaseInfo> for LeaseOut {
    fn from(l: &LeaseInfo) -> Self {
        Self {
            consumer: l.consumer.to_string(),
            expires_at_us: l.expires_at.as_unix_micros(),
        }
    }
}

/// `GET /v1/runs/{id}`: everything about a run but its payload and events.
#[derive(Serialize, ToSchema)]
pub(crate) struct RunOut {
    /// The run's id.
    pub(crate) run_id: String,
    /// Its queue.
    pub(crate) queue: String,
    /// Its dedup key's parts, when the key is a part encoding of UTF-8 parts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key_parts: Option<Vec<String>>,
    /// Its dedup key's stored bytes, base64.
    pub(crate) dedup_key_b64: String,
    /// `queued`, `claimed`, `succeeded`, `failed`, `canceled`, `superseded` or `parked`.
    pub(crate) state: String,
    /// Claims so far.
    pub(crate) attempts: u32,
    /// Claims allowed before it is parked.
    pub(crate) max_attempts: u32,
    /// Its priority.
    pub(crate) priority: i32,
    /// Size of its payload.
    pub(crate) payload_bytes: u64,
    /// When it was enqueued.
    pub(crate) enqueued_at_us: i64,
    /// When it last changed state.
    pub(crate) updated_at_us: i64,
    /// For a live run, the earliest time a claim may take it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) due_at_us: Option<i64>,
    /// When it reached a terminal state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) finished_at_us: Option<i64>,
    /// The lease, while claimed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lease: Option<LeaseOut>,
    /// Whether a cancel was requested.
    pub(crate) cancel_requested: bool,
    /// The last nack's (or the spool's) reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// How many facts it holds.
    pub(crate) facts: usize,
    /// How many events it holds.
    pub(crate) events: u64,
    /// Whether its producer may still append events: `open`, `closed`, or `unmarked` (written
    /// by an older build; the delivery worker closes it when it takes it).
    pub(crate) stream: &'static str,
}

fn utf8_parts(parts: Option<Vec<Vec<u8>>>) -> Option<Vec<String>> {
    parts?
        .into_iter()
        .map(|p| String::from_utf8(p).ok())
        .collect()
}

impl From<&RunInfo> for RunOut {
    fn from(r: &RunInfo) -> Self {
        Self {
            run_id: r.run_id.to_string(),
            queue: r.queue.to_string(),
            key_parts: utf8_parts(r.dedup_key.parts()),
            dedup_key_b64: base64::engine::general_purpose::STANDARD.encode(r.dedup_key.as_bytes()),
            state: r.state.to_string(),
            attempts: r.attempts,
            max_attempts: r.max_attempts,
            priority: r.priority,
            payload_bytes: r.payload_bytes,
            enqueued_at_us: r.enqueued_at.as_unix_micros(),
            updated_at_us: r.updated_at.as_unix_micros(),
            due_at_us: r.due_at.map(|t| t.as_unix_micros()),
            finished_at_us: r.finished_at.map(|t| t.as_unix_micros()),
            lease: r.lease.as_ref().map(LeaseOut::from),
            cancel_requested: r.cancel_requested,
            reason: r.reason.clone(),
            facts: r.facts.len(),
            events: r.events,
            stream: r.stream.as_str(),
        }
    }
}

/// `POST /v1/runs/{id}/events`: exactly one of `event_id` and `event_id_b64`, and exactly one
/// of `payload` and `payload_b64`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunEventIn {
    /// The caller's event id, as text, 1 to 256 bytes (re-appending an id the run holds is a
    /// no-op); ids starting with `cairn:` are the spool's own, refused (400 `reserved`).
    #[schema(min_length = 1)]
    pub(crate) event_id: Option<String>,
    /// The caller's event id, base64 (1 to 256 bytes decoded).
    #[schema(
        min_length = 4,
        content_encoding = "base64",
        pattern = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
    )]
    pub(crate) event_id_b64: Option<String>,
    /// The payload, as text (at most 1 MiB).
    pub(crate) payload: Option<String>,
    /// The payload, base64 (at most 1 MiB decoded).
    #[schema(
        content_encoding = "base64",
        pattern = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
    )]
    pub(crate) payload_b64: Option<String>,
}

/// What appending a run event did.
#[derive(Serialize, ToSchema)]
pub(crate) struct RunEventAppended {
    /// The event's seq in the run.
    pub(crate) seq: u64,
    /// False when the run already held this event id (200).
    pub(crate) created: bool,
}

/// Query of `GET /v1/runs/{id}/events`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct RunEventsQuery {
    /// Only events with a greater seq (default 0).
    pub(crate) after: Option<u64>,
    /// Most events (1 to 1000, default 100). A page also ends before an event that would take
    /// it past `limits.max_page_bytes` of JSON (default 8 MiB; the first event goes out whatever
    /// its size), so a page can be shorter than `limit` while more follows: the stream is read
    /// to its end when a page is empty.
    #[param(minimum = 1, maximum = 1000)]
    pub(crate) limit: Option<usize>,
}

/// One stored run event.
#[derive(Serialize, ToSchema)]
pub(crate) struct RunEventOut {
    /// Its seq in the run.
    pub(crate) seq: u64,
    /// Its id as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) event_id: Option<String>,
    /// Its id, base64 (when not UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) event_id_b64: Option<String>,
    /// Its payload as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload: Option<String>,
    /// Its payload, base64 (when not UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload_b64: Option<String>,
    /// When it was appended.
    pub(crate) created_at_us: i64,
}

impl From<&RunEvent> for RunEventOut {
    fn from(e: &RunEvent) -> Self {
        let (event_id, event_id_b64) = bytes_out(e.event_id.as_bytes());
        let (payload, payload_b64) = bytes_out(&e.payload);
        Self {
            seq: e.seq,
            event_id,
            event_id_b64,
            payload,
            payload_b64,
            created_at_us: e.created_at.as_unix_micros(),
        }
    }
}

/// `GET /v1/runs/{id}/events`.
#[derive(Serialize, ToSchema)]
pub(crate) struct RunEventsResponse {
    /// The events in seq order, at most `limit` of them and `limits.max_page_bytes` of JSON
    /// (the first event excepted).
    #[schema(value_type = Vec<RunEventOut>)]
    pub(crate) events: Box<serde_json::value::RawValue>,
}

/// `PUT /v1/runs/{id}/facts/{name}`: exactly one of `value` and `value_b64`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FactIn {
    /// The value, as text (at most 64 KiB).
    pub(crate) value: Option<String>,
    /// The value, base64 (at most 64 KiB decoded).
    #[schema(
        content_encoding = "base64",
        pattern = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
    )]
    pub(crate) value_b64: Option<String>,
}

/// What setting a fact did.
#[derive(Serialize, ToSchema)]
pub(crate) struct FactSet {
    /// `set` (201) or `already_set` (200: the same value was there).
    pub(crate) outcome: String,
}

/// One fact of a run.
#[derive(Serialize, ToSchema)]
pub(crate) struct FactOut {
    /// Its name.
    pub(crate) name: String,
    /// Its value as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<String>,
    /// Its value, base64 (when not UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) value_b64: Option<String>,
}

/// `GET /v1/runs/{id}/facts`.
#[derive(Serialize, ToSchema)]
pub(crate) struct FactsResponse {
    /// The facts, by name.
    pub(crate) facts: Vec<FactOut>,
}

/// `POST /v1/queues/{queue}/claim`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClaimRequest {
    /// Who claims (recorded on the run), e.g. `host/pid/worker`: 1 to 256 bytes of UTF-8
    /// without control characters.
    #[schema(min_length = 1, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub(crate) consumer: String,
    /// Lease length in milliseconds (1 s to 24 h, default 30 s).
    #[schema(minimum = 1000, maximum = 86_400_000)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) lease_ms: Option<u64>,
    /// Most runs to claim (1 to 1000, default 1).
    #[schema(minimum = 1, maximum = 1000)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) limit: Option<usize>,
}

/// One claimed run.
#[derive(Serialize, ToSchema)]
pub(crate) struct ClaimedOut {
    /// The run.
    pub(crate) run_id: String,
    /// Its dedup key's parts, when they are UTF-8 parts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key_parts: Option<Vec<String>>,
    /// The payload as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload: Option<String>,
    /// The payload, base64 (when not UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload_b64: Option<String>,
    /// Which claim this is (1 for the first).
    pub(crate) attempt: u32,
    /// The lease token for heartbeat, ack and nack.
    pub(crate) token: String,
    /// When the lease expires unless extended.
    pub(crate) expires_at_us: i64,
}

impl From<&cairn::Claimed> for ClaimedOut {
    fn from(c: &cairn::Claimed) -> Self {
        let (payload, payload_b64) = bytes_out(&c.payload);
        Self {
            run_id: c.run_id.to_string(),
            key_parts: utf8_parts(c.dedup_key.parts()),
            payload,
            payload_b64,
            attempt: c.attempt,
            token: c.token.to_string(),
            expires_at_us: c.expires_at.as_unix_micros(),
        }
    }
}

/// What a claim handed out.
#[derive(Serialize, ToSchema)]
pub(crate) struct ClaimResponse {
    /// The claimed runs; empty when nothing is due.
    pub(crate) runs: Vec<ClaimedOut>,
}

/// `POST /v1/runs/{id}/heartbeat`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeartbeatRequest {
    /// The lease token the claim returned.
    #[schema(
        pattern = r"^(?:[0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    )]
    pub(crate) token: String,
    /// New lease length in milliseconds (1 s to 24 h, default 30 s).
    #[schema(minimum = 1000, maximum = 86_400_000)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) lease_ms: Option<u64>,
}

/// What a heartbeat did.
#[derive(Serialize, ToSchema)]
pub(crate) struct HeartbeatResponse {
    /// The lease's new expiry.
    pub(crate) expires_at_us: i64,
    /// Whether a cancel was requested: stop and nack.
    pub(crate) cancel_requested: bool,
}

/// `POST /v1/runs/{id}/ack`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AckRequest {
    /// The lease token the claim returned.
    #[schema(
        pattern = r"^(?:[0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    )]
    pub(crate) token: String,
}

/// `POST /v1/runs/{id}/nack`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NackRequest {
    /// The lease token the claim returned.
    #[schema(
        pattern = r"^(?:[0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    )]
    pub(crate) token: String,
    /// `retryable` (default), `permanent` or `failed`.
    pub(crate) kind: Option<String>,
    /// Why (recorded on the run with each NUL character replaced by U+FFFD, cut to 4096
    /// bytes; never refused).
    pub(crate) reason: Option<String>,
}

/// A run's state after ack, nack or cancel.
#[derive(Serialize, ToSchema)]
pub(crate) struct RunStateResponse {
    /// The run.
    pub(crate) run_id: String,
    /// Its state now (`claimed` after a cancel only requested it).
    pub(crate) state: String,
    /// For a retry, when the next claim may take the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) retry_at_us: Option<i64>,
    /// Whether a cancel is requested (cancel of a claimed run).
    pub(crate) cancel_requested: bool,
}

/// `GET /healthz` and `GET /readyz`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Health {
    /// `ok`.
    pub(crate) status: String,
}

/// The body of every error response.
#[derive(Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// The error.
    pub(crate) error: ErrorDetail,
}

/// What went wrong.
#[derive(Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// A stable, machine-readable code (`invalid_input`, `invalid_batch_item`, `bad_cursor`,
    /// `reserved`, `unauthorized`, `forbidden`, `not_found`, `unknown_run`, `conflict`,
    /// `lease_lost`, `fact_conflict`, `invalid_transition`, `run_closed`, `body_too_large`,
    /// `hash_mismatch`, `unknown_parent`, `retryable`, `unavailable`, `store_replaced`,
    /// `timeout`, `method_not_allowed`, `internal`).
    pub(crate) code: String,
    /// What happened and what to do, for people.
    pub(crate) message: String,
    /// For an error about one item of a batch (`invalid_batch_item`, or an op of
    /// `POST /v1/batch` the store refused): the item's position in the batch, from 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) index: Option<usize>,
}

// What the request bodies become: the handlers call these, after decoding, to turn a body into
// the core types they hand to the store (and `crate::fuzzing` calls the same ones).

/// A lease length in milliseconds, or the default, checked as the spool checks it.
pub(crate) fn lease(ms: Option<u64>) -> Result<Duration, ApiError> {
    let lease = ms.map_or(DEFAULT_LEASE, Duration::from_millis);
    spool::check_lease(lease)?;
    Ok(lease)
}

/// The lease a claim or heartbeat gets without `lease_ms`.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// A lease token as the claim returned it.
pub(crate) fn lease_token(s: &str) -> Result<LeaseToken, ApiError> {
    Ok(LeaseToken::parse(s)?)
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

impl EnqueueRequest {
    /// Reads one enqueue item from its JSON text: an item of
    /// `POST /v1/queues/{queue}/runs/batch`, an enqueue op of `POST /v1/batch` (less its `op`
    /// and `queue`) or a line of `cairn enqueue --from-file`. The same shape as the body of
    /// `POST /v1/queues/{queue}/runs`, read by the same rules from the text itself (never
    /// through a `serde_json::Value`, whose map would keep the last of a key written twice),
    /// so a duplicate field is refused as the single route refuses it.
    pub(crate) fn from_json(text: &str) -> cairn::Result<Self> {
        serde_json::from_str(text).map_err(|e| cairn::Error::invalid("enqueue item", e.to_string()))
    }

    /// The key, payload and options to enqueue, checked as the spool checks them (payload
    /// size, attempts).
    pub(crate) fn into_enqueue(self) -> cairn::Result<EnqueueItem> {
        let key = match (self.key_parts, self.key) {
            (Some(parts), None) => DedupKey::from_parts(parts)?,
            (None, Some(key)) => DedupKey::from_parts([key])?,
            _ => {
                return Err(cairn::Error::invalid(
                    "dedup key",
                    "give exactly one of `key_parts` and `key`",
                ))
            }
        };
        let payload = bytes_in("run payload", self.payload, self.payload_b64)?;
        spool::check_payload("run payload", spool::MAX_RUN_PAYLOAD, &payload)?;
        let options = EnqueueOptions {
            supersede_group: self
                .supersede_group
                .map(SupersedeGroup::from_parts)
                .transpose()?,
            not_before: self.not_before_us.map(Timestamp::from_unix_micros),
            max_attempts: self.max_attempts,
            priority: self.priority.unwrap_or(0),
        };
        options.effective_max_attempts()?;
        Ok(EnqueueItem {
            key,
            payload,
            options,
        })
    }
}

impl RunEventIn {
    /// The event id and payload (within the spool's limit).
    pub(crate) fn into_event(self) -> cairn::Result<(RunEventId, Vec<u8>)> {
        let event_id =
            RunEventId::new(bytes_in("run event id", self.event_id, self.event_id_b64)?)?;
        let payload = bytes_in("run event payload", self.payload, self.payload_b64)?;
        spool::check_payload("run event payload", spool::MAX_RUN_EVENT_PAYLOAD, &payload)?;
        Ok((event_id, payload))
    }
}

impl FactIn {
    /// The fact's value (within the spool's limit).
    pub(crate) fn into_value(self) -> Result<Vec<u8>, ApiError> {
        let value = bytes_in("fact value", self.value, self.value_b64)?;
        spool::check_payload("fact value", spool::MAX_FACT_VALUE, &value)?;
        Ok(value)
    }
}

impl ClaimRequest {
    /// Who claims, the lease and the most runs to claim.
    pub(crate) fn into_claim(self) -> Result<(ConsumerId, Duration, usize), ApiError> {
        let consumer = ConsumerId::new(self.consumer)?;
        let lease = lease(self.lease_ms)?;
        let limit = self.limit.unwrap_or(1);
        spool::check_limit(limit)?;
        Ok((consumer, lease, limit))
    }
}

impl HeartbeatRequest {
    /// The token and the new lease.
    pub(crate) fn into_heartbeat(self) -> Result<(LeaseToken, Duration), ApiError> {
        Ok((lease_token(&self.token)?, lease(self.lease_ms)?))
    }
}

/// A nack body in core types.
#[derive(Debug)]
pub(crate) struct Nack {
    /// The lease token.
    pub(crate) token: LeaseToken,
    /// Where the run goes.
    pub(crate) kind: NackKind,
    /// The kind as the request named it (the metrics label).
    pub(crate) label: &'static str,
    /// Why (empty when not given).
    pub(crate) reason: String,
}

impl NackRequest {
    /// The token, the kind and the reason.
    pub(crate) fn into_nack(self) -> Result<Nack, ApiError> {
        let token = lease_token(&self.token)?;
        let (kind, label) = match self.kind.as_deref().unwrap_or("retryable") {
            "retryable" => (NackKind::Retryable, "retryable"),
            "permanent" => (NackKind::Permanent, "permanent"),
            "failed" => (NackKind::Failed, "failed"),
            _ => {
                return Err(ApiError::invalid(
                    "nack kind",
                    "expected one of retryable, permanent, failed",
                ))
            }
        };
        Ok(Nack {
            token,
            kind,
            label,
            reason: self.reason.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_travel_as_text_or_base64_never_both() {
        assert_eq!(
            bytes_in("p", Some("hé".into()), None).unwrap(),
            "hé".as_bytes()
        );
        assert_eq!(
            bytes_in("p", None, Some("/wA=".into())).unwrap(),
            vec![0xff, 0x00]
        );
        assert!(bytes_in("p", None, None).is_err());
        assert!(bytes_in("p", Some("a".into()), Some("YQ==".into())).is_err());
        assert!(bytes_in("p", None, Some("not base64!".into())).is_err());
        assert_eq!(bytes_out(b"text"), (Some("text".into()), None));
        assert_eq!(bytes_out(&[0xff, 0x00]), (None, Some("/wA=".into())));
        assert_eq!(opt_bytes_in("k", None, None).unwrap(), None);
    }
}

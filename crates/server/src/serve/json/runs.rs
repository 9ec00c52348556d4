//! The bodies of a run's routes: enqueue, the run, its events and its facts, and what the
//! request bodies become.

use base64::Engine as _;
use cairn::spool::{self, EnqueueItem, PartitionKey, RunEvent};
use cairn::{DedupKey, EnqueueOptions, RunEventId, RunInfo, SupersedeGroup, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::bytes::{bytes_in, bytes_out, utf8_parts};
use super::lease::LeaseOut;
use crate::serve::error::ApiError;

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
    /// The run's partition key (printable text without bidirectional controls, at most 256
    /// bytes): a queue's per-partition limit caps how many runs sharing it are claimed at once.
    #[serde(default)]
    #[schema(
        min_length = 1,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]*$"
    )]
    pub(crate) partition_key: Option<String>,
}

/// What an enqueue did.
#[derive(Serialize, ToSchema)]
pub(crate) struct EnqueueResponse {
    /// The run's id: new (201), or the existing run's for this key (200).
    pub(crate) run_id: String,
    /// Whether this request created the run.
    pub(crate) created: bool,
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
    /// Its partition key, when it was enqueued with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partition_key: Option<String>,
    /// The enqueuer's trace context (W3C `traceparent`), when it sent one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) traceparent: Option<String>,
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
            partition_key: r.partition_key.as_ref().map(|p| p.to_string()),
            traceparent: r.traceparent.as_ref().map(ToString::to_string),
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
            partition_key: self.partition_key.map(PartitionKey::new).transpose()?,
            traceparent: None,
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

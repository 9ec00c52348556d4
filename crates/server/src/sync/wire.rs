//! The sync routes' bodies as the client writes and reads them (the server's side is
//! `serve::json::sync`; `tests/sync_http.rs` runs one against the other). Byte fields follow the
//! API's bytes rule: text when UTF-8, else `_b64`.

use base64::Engine as _;
use cairn::sync::{StoreId, SyncCursor, SyncPeer};
use cairn::{Epoch, EpochId, EpochSummary, Event, ForeignEpoch, ImportOutcome, Seq, SpaceId};
use serde::{Deserialize, Serialize};

/// `GET /v1/sync/id`.
#[derive(Deserialize)]
pub(super) struct StoreIdOut {
    pub(super) id: String,
    pub(super) max_body_bytes: u64,
}

/// `GET /v1/sync/spaces`.
#[derive(Deserialize)]
pub(super) struct SpacesOut {
    pub(super) spaces: Vec<String>,
}

/// `GET /v1/spaces/{space}/heads`.
#[derive(Deserialize)]
pub(super) struct HeadsOut {
    pub(super) heads: Vec<HeadOut>,
}

#[derive(Deserialize)]
pub(super) struct HeadOut {
    pub(super) seq: u64,
    pub(super) id: String,
}

/// `GET /v1/spaces/{space}/sync/summaries`.
#[derive(Deserialize)]
pub(super) struct SummariesOut {
    pub(super) epochs: Vec<SummaryOut>,
}

#[derive(Deserialize)]
pub(super) struct SummaryOut {
    pub(super) id: String,
    pub(super) seq: u64,
    pub(super) parents: Vec<String>,
    pub(super) events: u64,
}

/// A body of ids (`sync/epochs`, `sync/missing`).
#[derive(Serialize)]
pub(super) struct IdsIn {
    pub(super) ids: Vec<String>,
}

/// `POST /v1/spaces/{space}/sync/epochs`.
#[derive(Deserialize)]
pub(super) struct EpochsOut {
    pub(super) epochs: Vec<EpochOut>,
}

#[derive(Deserialize)]
pub(super) struct EpochOut {
    pub(super) id: String,
    pub(super) seq: u64,
    pub(super) parents: Vec<String>,
    pub(super) events: Vec<EventWire>,
}

/// An event both ways.
#[derive(Serialize, Deserialize)]
pub(super) struct EventWire {
    pub(super) kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) key_b64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) payload: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) payload_b64: Option<String>,
}

/// `POST /v1/spaces/{space}/sync/missing`.
#[derive(Deserialize)]
pub(super) struct MissingOut {
    pub(super) missing: Vec<String>,
}

/// `GET /v1/spaces/{space}/sync/peers`.
#[derive(Deserialize)]
pub(super) struct PeersOut {
    pub(super) peers: Vec<PeerOut>,
}

#[derive(Deserialize)]
pub(super) struct PeerOut {
    pub(super) peer: String,
    pub(super) seq: u64,
    pub(super) id: String,
    pub(super) epochs: u64,
    pub(super) bytes: u64,
    pub(super) updated_at_us: i64,
}

/// One epoch of `POST /v1/spaces/{space}/sync/import` (the import route's body).
#[derive(Serialize)]
pub(super) struct EpochIn {
    pub(super) id: String,
    pub(super) parents: Vec<String>,
    pub(super) events: Vec<EventWire>,
}

#[derive(Serialize)]
pub(super) struct CursorIn {
    pub(super) peer: String,
    pub(super) seq: u64,
    pub(super) id: String,
}

/// `POST /v1/spaces/{space}/sync/import`: the epochs as already-serialized JSON.
#[derive(Serialize)]
pub(super) struct ImportIn<'a> {
    pub(super) epochs: Vec<&'a serde_json::value::RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cursor: Option<CursorIn>,
}

#[derive(Deserialize)]
pub(super) struct ImportOut {
    pub(super) outcomes: Vec<OutcomeOut>,
}

#[derive(Deserialize)]
pub(super) struct OutcomeOut {
    pub(super) outcome: String,
    pub(super) seq: u64,
}

/// `GET /v1/spaces/{space}/sync/wait`.
#[derive(Deserialize)]
pub(super) struct WaitOut {
    #[allow(dead_code)] // Read for its presence: the answer is a wait's.
    pub(super) changed: bool,
}

/// An error answer.
#[derive(Deserialize)]
pub(super) struct ErrorOut {
    pub(super) error: ErrorDetailOut,
}

#[derive(Deserialize)]
pub(super) struct ErrorDetailOut {
    pub(super) code: String,
    pub(super) message: String,
    #[serde(default)]
    pub(super) index: Option<usize>,
}

/// A malformed answer.
pub(super) fn bad_answer(what: &str) -> cairn::Error {
    cairn::Error::corrupt(format!("the server's answer does not read: {what}"))
}

pub(super) fn id_out(s: &str) -> cairn::Result<EpochId> {
    EpochId::from_hex(s).map_err(|_| bad_answer("an epoch id"))
}

fn ids_out(ids: &[String]) -> cairn::Result<Vec<EpochId>> {
    ids.iter().map(|s| id_out(s)).collect()
}

fn seq_out(n: u64) -> cairn::Result<Seq> {
    let seq = Seq(n);
    seq.to_i64().map_err(|_| bad_answer("a seq"))?;
    Ok(seq)
}

fn bytes_of(text: Option<String>, b64: Option<String>) -> cairn::Result<Option<Vec<u8>>> {
    match (text, b64) {
        (Some(t), None) => Ok(Some(t.into_bytes())),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_bytes())
            .map(Some)
            .map_err(|_| bad_answer("a base64 field")),
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(bad_answer("a byte field given twice")),
    }
}

fn split(bytes: &[u8]) -> (Option<String>, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (Some(s.to_owned()), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
    }
}

impl EventWire {
    pub(super) fn from_event(e: &Event) -> Self {
        let (key, key_b64) = match &e.key {
            Some(k) => split(k),
            None => (None, None),
        };
        let (payload, payload_b64) = split(&e.payload);
        Self {
            kind: e.kind.clone(),
            key,
            key_b64,
            payload,
            payload_b64,
        }
    }

    fn into_event(self) -> cairn::Result<Event> {
        Ok(Event {
            kind: self.kind,
            key: bytes_of(self.key, self.key_b64)?,
            payload: bytes_of(self.payload, self.payload_b64)?
                .ok_or_else(|| bad_answer("an event without a payload"))?,
        })
    }
}

impl EpochIn {
    pub(super) fn from_epoch(e: &ForeignEpoch) -> Self {
        Self {
            id: e.id.to_string(),
            parents: e.parents.iter().map(ToString::to_string).collect(),
            events: e.events.iter().map(EventWire::from_event).collect(),
        }
    }
}

impl CursorIn {
    pub(super) fn from_cursor(c: &SyncCursor) -> Self {
        Self {
            peer: c.peer.to_string(),
            seq: c.seq.0,
            id: c.id.to_string(),
        }
    }
}

impl StoreIdOut {
    pub(super) fn store_id(&self) -> cairn::Result<StoreId> {
        StoreId::parse(&self.id).map_err(|_| bad_answer("the store id"))
    }
}

impl HeadOut {
    pub(super) fn head(&self) -> cairn::Result<cairn::Head> {
        Ok(cairn::Head {
            id: id_out(&self.id)?,
            seq: seq_out(self.seq)?,
        })
    }
}

impl SummaryOut {
    pub(super) fn summary(&self) -> cairn::Result<EpochSummary> {
        Ok(EpochSummary {
            id: id_out(&self.id)?,
            seq: seq_out(self.seq)?,
            parents: ids_out(&self.parents)?,
            events: self.events,
        })
    }
}

impl EpochOut {
    pub(super) fn epoch(self, space: &SpaceId) -> cairn::Result<Epoch> {
        Ok(Epoch {
            space: space.clone(),
            id: id_out(&self.id)?,
            seq: seq_out(self.seq)?,
            parents: ids_out(&self.parents)?,
            events: self
                .events
                .into_iter()
                .map(EventWire::into_event)
                .collect::<cairn::Result<_>>()?,
        })
    }
}

impl MissingOut {
    pub(super) fn ids(&self) -> cairn::Result<Vec<EpochId>> {
        ids_out(&self.missing)
    }
}

impl PeerOut {
    pub(super) fn peer(&self) -> cairn::Result<SyncPeer> {
        Ok(SyncPeer {
            cursor: SyncCursor {
                peer: StoreId::parse(&self.peer).map_err(|_| bad_answer("a peer id"))?,
                seq: seq_out(self.seq)?,
                id: id_out(&self.id)?,
            },
            epochs: self.epochs,
            bytes: self.bytes,
            updated_at_us: self.updated_at_us,
        })
    }
}

impl OutcomeOut {
    pub(super) fn outcome(&self) -> cairn::Result<ImportOutcome> {
        let seq = seq_out(self.seq)?;
        match self.outcome.as_str() {
            "imported" => Ok(ImportOutcome::Imported(seq)),
            "already_present" => Ok(ImportOutcome::AlreadyPresent(seq)),
            _ => Err(bad_answer("an import outcome")),
        }
    }
}

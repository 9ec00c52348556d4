//! Domain types of the epoch log.

use std::fmt;

use crate::error::{Error, Result};
use crate::ids::{EpochId, EventId};

/// Largest space id, in bytes.
pub const MAX_SPACE_LEN: usize = 256;
/// Largest event kind, in bytes.
pub const MAX_KIND_LEN: usize = 256;
/// Largest event key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// Largest event payload, in bytes (16 MiB).
pub const MAX_EVENT_PAYLOAD: usize = 16 * 1024 * 1024;
/// Most events in one epoch.
pub const MAX_EPOCH_EVENTS: usize = 10_000;

/// The prefix of the space ids cairn reserves for its own records (the backfill's completion
/// marker, [`crate::backfill::MARKER_SPACE`]): a NUL byte, then `cairn/`. [`SpaceId::new`]
/// refuses such ids, so no application, API client or command can write or read cairn's records
/// as if they were its own.
pub const RESERVED_SPACE_PREFIX: &[u8] = b"\0cairn/";

/// An independent history (tenant, document, repository): a non-empty byte string of at most
/// [`MAX_SPACE_LEN`] bytes that does not start with [`RESERVED_SPACE_PREFIX`].
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SpaceId(Vec<u8>);

impl SpaceId {
    /// Validates and wraps a space id.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the id is empty or longer than [`MAX_SPACE_LEN`];
    /// [`Error::Reserved`] when it starts with [`RESERVED_SPACE_PREFIX`].
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self> {
        let id = Self::from_stored(bytes)?;
        if id.is_reserved() {
            return Err(Error::Reserved {
                what: "space id",
                name: id.to_string(),
            });
        }
        Ok(id)
    }

    /// Wraps a space id as a store holds it: the bounds of [`SpaceId::new`] without its refusal
    /// of reserved ids, so that a backend can read back every space it stores (cairn's own
    /// included) and cairn can write its own records. Applications use [`SpaceId::new`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the id is empty or longer than [`MAX_SPACE_LEN`].
    #[doc(hidden)]
    pub fn from_stored(bytes: impl Into<Vec<u8>>) -> Result<Self> {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return Err(Error::invalid("space id", "must not be empty"));
        }
        if bytes.len() > MAX_SPACE_LEN {
            return Err(Error::invalid(
                "space id",
                format!("is {} bytes; the limit is {MAX_SPACE_LEN}", bytes.len()),
            ));
        }
        Ok(Self(bytes))
    }

    /// Whether cairn reserves this id for its own records (it starts with
    /// [`RESERVED_SPACE_PREFIX`]).
    pub fn is_reserved(&self) -> bool {
        self.0.starts_with(RESERVED_SPACE_PREFIX)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SpaceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpaceId({self})")
    }
}

impl fmt::Display for SpaceId {
    /// UTF-8 ids print as text, others as `0x…` hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(&self.0) {
            Ok(s) if !s.starts_with("0x") && s.chars().all(|c| !c.is_control()) => f.write_str(s),
            _ => write!(f, "0x{}", hex::encode(&self.0)),
        }
    }
}

impl Error {
    /// [`Error::NotFound`] for a space that has no epoch.
    pub fn space_not_found(space: &SpaceId) -> Self {
        Self::NotFound {
            what: format!("space {space}"),
        }
    }
}

/// Commit-ordered position of an epoch in its space. The first epoch of a space has seq 1.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Seq(pub u64);

impl Seq {
    /// The seq of a space's first epoch.
    pub const FIRST: Seq = Seq(1);

    /// The seq as the signed 64-bit integer SQL engines store.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when the seq does not fit (never for seqs cairn assigns).
    pub fn to_i64(self) -> Result<i64> {
        i64::try_from(self.0).map_err(|_| {
            Error::corrupt(format!(
                "seq {} does not fit a signed 64-bit column",
                self.0
            ))
        })
    }

    /// Reads a seq from a signed 64-bit column.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when the stored value is negative.
    pub fn from_i64(v: i64) -> Result<Self> {
        u64::try_from(v)
            .map(Seq)
            .map_err(|_| Error::corrupt(format!("negative seq {v} in the store")))
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One event: an opaque payload with a kind and an optional key.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Event {
    /// What the payload is (e.g. `kv.put`); 1..=[`MAX_KIND_LEN`] bytes of UTF-8 without a NUL
    /// character (U+0000), which a Postgres `TEXT` column cannot hold ([`Event::validate`]).
    pub kind: String,
    /// Optional key (e.g. the kv key the event touches); at most [`MAX_KEY_LEN`] bytes.
    pub key: Option<Vec<u8>>,
    /// Opaque bytes; at most [`MAX_EVENT_PAYLOAD`].
    pub payload: Vec<u8>,
}

impl Event {
    /// The bytes it stores: its kind, key and payload (what a byte-bounded read counts,
    /// [`crate::EpochStore::events_since_within`]).
    pub fn stored_bytes(&self) -> usize {
        self.kind.len() + self.key.as_ref().map_or(0, Vec::len) + self.payload.len()
    }

    /// An event without a key.
    pub fn new(kind: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            kind: kind.into(),
            key: None,
            payload: payload.into(),
        }
    }

    /// An event with a key.
    pub fn with_key(
        kind: impl Into<String>,
        key: impl Into<Vec<u8>>,
        payload: impl Into<Vec<u8>>,
    ) -> Self {
        Self {
            kind: kind.into(),
            key: Some(key.into()),
            payload: payload.into(),
        }
    }

    /// Checks the size limits, and that the kind holds no NUL character.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the field that is out of bounds, or the kind when it
    /// holds a NUL character (U+0000): every backend refuses it alike, since Postgres cannot
    /// store one in the kind's `TEXT` column.
    pub fn validate(&self) -> Result<()> {
        if self.kind.is_empty() || self.kind.len() > MAX_KIND_LEN {
            return Err(Error::invalid(
                "event kind",
                format!("must be 1..={MAX_KIND_LEN} bytes"),
            ));
        }
        if self.kind.contains('\0') {
            return Err(Error::invalid(
                "event kind",
                "must not contain a NUL character (U+0000)",
            ));
        }
        if self.key.as_ref().is_some_and(|k| k.len() > MAX_KEY_LEN) {
            return Err(Error::invalid(
                "event key",
                format!("must be at most {MAX_KEY_LEN} bytes"),
            ));
        }
        if self.payload.len() > MAX_EVENT_PAYLOAD {
            return Err(Error::invalid(
                "event payload",
                format!(
                    "is {} bytes; the limit is {MAX_EVENT_PAYLOAD}",
                    self.payload.len()
                ),
            ));
        }
        Ok(())
    }

    /// Validates a batch of events for one epoch: non-empty, bounded, each event valid.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty or oversized batch or an invalid event.
    pub fn validate_batch(events: &[Event]) -> Result<()> {
        if events.is_empty() {
            return Err(Error::invalid("epoch", "must contain at least one event"));
        }
        if events.len() > MAX_EPOCH_EVENTS {
            return Err(Error::invalid(
                "epoch",
                format!(
                    "has {} events; the limit is {MAX_EPOCH_EVENTS}",
                    events.len()
                ),
            ));
        }
        events.iter().try_for_each(Event::validate)
    }
}

/// A head of a space: an epoch no other epoch names as a parent.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Head {
    /// The epoch.
    pub id: EpochId,
    /// Its seq.
    pub seq: Seq,
}

/// A stored epoch with its events.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Epoch {
    /// The space it belongs to.
    pub space: SpaceId,
    /// Its content address.
    pub id: EpochId,
    /// Its position in the space.
    pub seq: Seq,
    /// Its parents, sorted by id bytes.
    pub parents: Vec<EpochId>,
    /// Its events, in append order.
    pub events: Vec<Event>,
}

impl Epoch {
    /// This epoch as a [`ForeignEpoch`], ready to import into another store.
    pub fn to_foreign(&self) -> ForeignEpoch {
        ForeignEpoch {
            space: self.space.clone(),
            id: self.id,
            parents: self.parents.clone(),
            events: self.events.clone(),
        }
    }
}

/// Most epochs one [`crate::EpochDiagnostics::recent_epochs`] call returns.
pub const MAX_RECENT_EPOCHS: usize = 1000;

/// One epoch without its events: what [`crate::EpochDiagnostics::recent_epochs`] returns, to
/// draw a space's DAG.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct EpochSummary {
    /// Its content address.
    pub id: EpochId,
    /// Its position in the space.
    pub seq: Seq,
    /// Its parents, sorted by id bytes (as [`Epoch::parents`]).
    pub parents: Vec<EpochId>,
    /// How many events it holds.
    pub events: u64,
}

impl EpochSummary {
    /// Checks the `limit` of a [`crate::EpochDiagnostics::recent_epochs`] call, as every
    /// backend must before reading.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `limit` is 0 or above [`MAX_RECENT_EPOCHS`].
    pub fn check_limit(limit: usize) -> Result<()> {
        if (1..=MAX_RECENT_EPOCHS).contains(&limit) {
            Ok(())
        } else {
            Err(Error::invalid(
                "recent epochs limit",
                format!("is {limit}; it must be between 1 and {MAX_RECENT_EPOCHS}"),
            ))
        }
    }
}

/// What [`crate::EpochStore::append`] returns.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Appended {
    /// The new epoch's id.
    pub id: EpochId,
    /// The new epoch's seq.
    pub seq: Seq,
    /// Its parents (the space's heads before the append), sorted by id bytes.
    pub parents: Vec<EpochId>,
}

impl Appended {
    /// The new epoch as a head (what the space's only head is right after the append).
    pub fn head(&self) -> Head {
        Head {
            id: self.id,
            seq: self.seq,
        }
    }
}

/// An epoch produced elsewhere (another store, a replica), offered to
/// [`crate::EpochStore::import`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ForeignEpoch {
    /// The space.
    pub space: SpaceId,
    /// The claimed id; it must recompute from the other fields.
    pub id: EpochId,
    /// Parents, sorted by id bytes, each already known in this space.
    pub parents: Vec<EpochId>,
    /// Events, non-empty.
    pub events: Vec<Event>,
}

/// Result of an import.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ImportOutcome {
    /// The epoch was new and now has this local seq.
    Imported(Seq),
    /// The epoch was already present with this seq; nothing was written.
    AlreadyPresent(Seq),
}

/// Result of [`crate::EpochStore::repair_heads`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum RepairOutcome {
    /// The cache already held exactly the heads; nothing was written.
    Unchanged,
    /// The cache was rewritten to hold these heads.
    Rewritten {
        /// Rows the cache held before.
        before: Vec<Head>,
        /// Rows it holds now (the anti-join's heads).
        after: Vec<Head>,
    },
}

/// One event as the feed returns it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FeedEvent {
    /// Seq of the epoch holding the event.
    pub seq: Seq,
    /// The epoch holding the event.
    pub epoch: EpochId,
    /// Position of the event inside its epoch, from 0.
    pub epoch_seq: u32,
    /// The event's id.
    pub event_id: EventId,
    /// The event.
    pub event: Event,
}

/// An opaque position in a space's feed. Only cursors returned by the same space's feed are
/// accepted; print it with `Display` and read it back with [`FeedCursor::parse`].
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct FeedCursor {
    space_tag: [u8; 8],
    after: Seq,
}

const CURSOR_PREFIX: &str = "c1.";

impl FeedCursor {
    /// The cursor that resumes after the epoch with seq `after` in `space`. Backends build the
    /// cursors their feed returns with it; users treat cursors as opaque (print them with
    /// `Display`, read them back with [`FeedCursor::parse`]).
    #[doc(hidden)]
    pub fn new(space: &SpaceId, after: Seq) -> Self {
        Self {
            space_tag: space_tag(space),
            after,
        }
    }

    /// The last seq this cursor has delivered.
    pub fn after(&self) -> Seq {
        self.after
    }

    /// Checks the cursor belongs to `space` and returns the seq to resume after.
    ///
    /// # Errors
    /// [`Error::BadCursor`] when it was issued for another space, or when its position cannot
    /// be a stored seq (above `i64::MAX`, which no engine stores).
    pub fn resume_after(&self, space: &SpaceId) -> Result<Seq> {
        if self.space_tag != space_tag(space) {
            return Err(Error::BadCursor {
                reason: "the cursor was issued for another space".into(),
            });
        }
        if i64::try_from(self.after.0).is_err() {
            return Err(Error::BadCursor {
                reason: "cursor position out of range".into(),
            });
        }
        Ok(self.after)
    }

    /// Where a feed read starts: after `cursor`'s seq, or from the beginning (seq 0).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `limit` is 0; [`Error::BadCursor`] for a cursor issued for
    /// another space.
    pub fn start_after(space: &SpaceId, cursor: Option<&FeedCursor>, limit: usize) -> Result<Seq> {
        if limit == 0 {
            return Err(Error::invalid("feed limit", "must be at least 1"));
        }
        cursor.map_or(Ok(Seq(0)), |c| c.resume_after(space))
    }

    /// Reads a cursor back from its printed form.
    ///
    /// # Errors
    /// [`Error::BadCursor`] for anything that is not a printed cursor.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = |reason: &str| Error::BadCursor {
            reason: reason.into(),
        };
        let rest = s
            .strip_prefix(CURSOR_PREFIX)
            .ok_or_else(|| bad("unknown cursor format"))?;
        let (tag, seq) = rest
            .split_once('.')
            .ok_or_else(|| bad("malformed cursor"))?;
        let tag = hex::decode(tag).map_err(|_| bad("malformed cursor"))?;
        let space_tag: [u8; 8] = tag.try_into().map_err(|_| bad("malformed cursor"))?;
        if seq.is_empty()
            || !seq.bytes().all(|b| b.is_ascii_digit())
            || (seq.len() > 1 && seq.starts_with('0'))
        {
            return Err(bad("malformed cursor"));
        }
        let after: u64 = seq.parse().map_err(|_| bad("malformed cursor"))?;
        if i64::try_from(after).is_err() {
            return Err(bad("cursor position out of range"));
        }
        Ok(Self {
            space_tag,
            after: Seq(after),
        })
    }
}

impl fmt::Display for FeedCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{CURSOR_PREFIX}{}.{}",
            hex::encode(self.space_tag),
            self.after.0
        )
    }
}

fn space_tag(space: &SpaceId) -> [u8; 8] {
    let mut h = blake3::Hasher::new_derive_key("cairn 2026-11 feed cursor space tag v1");
    h.update(space.as_bytes());
    let mut out = [0u8; 8];
    out.copy_from_slice(&h.finalize().as_bytes()[..8]);
    out
}

/// One page of a space's feed.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FeedPage {
    /// Events in `(seq, epoch, epoch_seq)` order; whole epochs only.
    pub events: Vec<FeedEvent>,
    /// Where the next page starts. When `events` is empty it equals the cursor passed in (or the
    /// start of the feed).
    pub next: FeedCursor,
}

impl FeedPage {
    /// Keeps the longest run of whole epochs from the start whose events' stored bytes
    /// ([`Event::stored_bytes`]) stay within `max_bytes`, and at least the first epoch; `next`
    /// then points after the last epoch kept (`space` is the page's space).
    pub fn keep_within(&mut self, space: &SpaceId, max_bytes: usize) {
        let mut bytes = 0usize;
        let mut keep = 0;
        for epoch in self.events.chunk_by(|a, b| a.seq == b.seq) {
            let size = epoch.iter().map(|e| e.event.stored_bytes()).sum::<usize>();
            bytes = bytes.saturating_add(size);
            if keep > 0 && bytes > max_bytes {
                break;
            }
            keep += epoch.len();
        }
        if keep < self.events.len() {
            self.events.truncate(keep);
            if let Some(last) = self.events.last() {
                self.next = FeedCursor::new(space, last.seq);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_space_ids_are_refused_but_readable_as_stored() {
        let marker = crate::backfill::MARKER_SPACE;
        assert!(marker.starts_with(RESERVED_SPACE_PREFIX));
        for reserved in [marker, b"\0cairn/", b"\0cairn/anything else"] {
            let err = SpaceId::new(reserved).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Reserved {
                        what: "space id",
                        ..
                    }
                ),
                "{err:?}"
            );
            // The message names the id printably (no raw NUL on a terminal or in a log).
            assert!(!err.to_string().contains('\0'), "{err}");
            let stored = SpaceId::from_stored(reserved).unwrap();
            assert!(stored.is_reserved());
        }
        for fine in [&b"\0cairn"[..], b"cairn/backfill", b"\0cairnx", b"\0"] {
            let id = SpaceId::new(fine).unwrap();
            assert!(!id.is_reserved());
        }
        assert!(SpaceId::from_stored(Vec::new()).is_err());
    }

    #[test]
    fn recent_epochs_limits_are_one_to_the_maximum() {
        for ok in [1, 2, MAX_RECENT_EPOCHS] {
            EpochSummary::check_limit(ok).unwrap();
        }
        for bad in [0, MAX_RECENT_EPOCHS + 1, usize::MAX] {
            let err = EpochSummary::check_limit(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidInput { .. }), "{bad}: {err:?}");
        }
    }

    #[test]
    fn a_cursor_past_any_stored_seq_is_a_bad_cursor() {
        let space = SpaceId::new("s").unwrap();
        let cursor = FeedCursor::new(&space, Seq(u64::MAX));
        assert!(matches!(
            FeedCursor::start_after(&space, Some(&cursor), 10),
            Err(Error::BadCursor { .. })
        ));
        let last = FeedCursor::new(&space, Seq(i64::MAX.unsigned_abs()));
        assert_eq!(
            FeedCursor::start_after(&space, Some(&last), 10).unwrap(),
            Seq(i64::MAX.unsigned_abs())
        );
    }

    #[test]
    fn a_kind_holding_a_nul_is_refused_as_invalid_input() {
        for kind in ["k\0", "\0", "a\0b"] {
            let err = Event::new(kind, "p").validate().unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidInput {
                        what: "event kind",
                        ..
                    }
                ),
                "{kind:?}: {err:?}"
            );
            assert!(Event::validate_batch(&[Event::new(kind, "p")]).is_err());
        }
        assert!(Event::new("k\u{1}\u{FFFD}", "p").validate().is_ok());
    }
}

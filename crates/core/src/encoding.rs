//! Canonical encodings and content addresses.
//!
//! Every field is length-prefixed (u64 little-endian) and the hash is BLAKE3 in key-derivation
//! mode with a versioned context string, so an encoding can never be read as another and every
//! backend derives the same id for the same epoch. The golden vectors in the tests pin the
//! encoding: changing it is a breaking change.

use crate::error::{Error, Result};
use crate::ids::{EpochId, EventId};
use crate::types::{Event, ForeignEpoch, SpaceId};

const EVENT_CONTEXT: &str = "cairn 2026-11 event id v1";
const EPOCH_CONTEXT: &str = "cairn 2026-11 epoch id v1";

fn put(h: &mut blake3::Hasher, bytes: &[u8]) {
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// The content address of an event: BLAKE3 over (kind, key presence, key, payload).
pub fn event_id(event: &Event) -> EventId {
    let mut h = blake3::Hasher::new_derive_key(EVENT_CONTEXT);
    put(&mut h, event.kind.as_bytes());
    match &event.key {
        None => {
            h.update(&[0]);
        }
        Some(k) => {
            h.update(&[1]);
            put(&mut h, k);
        }
    }
    put(&mut h, &event.payload);
    EventId(*h.finalize().as_bytes())
}

/// The content address of an epoch: BLAKE3 over (space, parents sorted by id bytes, event ids
/// in order).
///
/// Parents are sorted (and de-duplicated) here, so callers may pass them in any order.
pub fn epoch_id(space: &SpaceId, parents: &[EpochId], events: &[EventId]) -> EpochId {
    let mut sorted = parents.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut h = blake3::Hasher::new_derive_key(EPOCH_CONTEXT);
    put(&mut h, space.as_bytes());
    h.update(&(sorted.len() as u64).to_le_bytes());
    for p in &sorted {
        h.update(p.as_bytes());
    }
    h.update(&(events.len() as u64).to_le_bytes());
    for e in events {
        h.update(e.as_bytes());
    }
    EpochId(*h.finalize().as_bytes())
}

/// Recomputes a foreign epoch's id and checks its shape.
///
/// # Errors
/// - [`Error::InvalidInput`] when the events are empty or out of bounds, or the parents are not
///   strictly sorted by id bytes (duplicates included);
/// - [`Error::HashMismatch`] when the claimed id is not the recomputed one.
pub fn verify_epoch(epoch: &ForeignEpoch) -> Result<()> {
    Event::validate_batch(&epoch.events)?;
    if !epoch.parents.windows(2).all(|w| w[0] < w[1]) {
        return Err(Error::invalid(
            "epoch parents",
            "must be sorted by id bytes without duplicates",
        ));
    }
    let ids: Vec<EventId> = epoch.events.iter().map(event_id).collect();
    let actual = epoch_id(&epoch.space, &epoch.parents, &ids);
    if actual != epoch.id {
        return Err(Error::HashMismatch {
            claimed: epoch.id,
            actual,
        });
    }
    Ok(())
}

impl Event {
    /// The event's content address.
    pub fn id(&self) -> EventId {
        event_id(self)
    }
}

macro_rules! hash_id_from_bytes {
    ($name:ident) => {
        impl $name {
            /// Reads an id from exactly 32 bytes.
            ///
            /// # Errors
            /// [`Error::InvalidInput`] when `bytes` is not 32 bytes long.
            pub fn from_slice(bytes: &[u8]) -> Result<Self> {
                let arr: [u8; 32] = bytes.try_into().map_err(|_| {
                    Error::invalid(
                        stringify!($name),
                        format!("must be 32 bytes, got {}", bytes.len()),
                    )
                })?;
                Ok(Self(arr))
            }

            /// Parses the 64-character lowercase or uppercase hex form.
            ///
            /// # Errors
            /// [`Error::InvalidInput`] when `s` is not 64 hex digits.
            pub fn from_hex(s: &str) -> Result<Self> {
                let bytes =
                    hex::decode(s).map_err(|e| Error::invalid(stringify!($name), e.to_string()))?;
                Self::from_slice(&bytes)
            }
        }
    };
}

hash_id_from_bytes!(EventId);
hash_id_from_bytes!(EpochId);

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> SpaceId {
        SpaceId::new(b"golden".to_vec()).unwrap()
    }

    #[test]
    fn golden_event_id() {
        let e = Event::with_key("kv.put", b"k".to_vec(), b"v".to_vec());
        assert_eq!(event_id(&e).to_string(), GOLDEN_EVENT);
        let nokey = Event::new("kv.put", b"v".to_vec());
        assert_ne!(event_id(&nokey), event_id(&e));
        // An empty key is not the same as no key.
        let empty_key = Event::with_key("kv.put", Vec::new(), b"v".to_vec());
        assert_ne!(event_id(&nokey), event_id(&empty_key));
    }

    #[test]
    fn golden_epoch_id() {
        let e = Event::with_key("kv.put", b"k".to_vec(), b"v".to_vec());
        let root = epoch_id(&space(), &[], &[event_id(&e)]);
        assert_eq!(root.to_string(), GOLDEN_ROOT);
        let child = epoch_id(&space(), &[root], &[event_id(&e)]);
        assert_eq!(child.to_string(), GOLDEN_CHILD);
    }

    #[test]
    fn parent_order_does_not_change_the_id() {
        let a = EpochId([1; 32]);
        let b = EpochId([2; 32]);
        let ev = [EventId([9; 32])];
        assert_eq!(
            epoch_id(&space(), &[a, b], &ev),
            epoch_id(&space(), &[b, a], &ev)
        );
    }

    #[test]
    fn fields_cannot_be_shifted_into_each_other() {
        let ev = [EventId([9; 32])];
        let s1 = SpaceId::new(b"ab".to_vec()).unwrap();
        let s2 = SpaceId::new(b"a".to_vec()).unwrap();
        assert_ne!(epoch_id(&s1, &[], &ev), epoch_id(&s2, &[], &ev));
        let e1 = Event::new("ab", b"c".to_vec());
        let e2 = Event::new("a", b"bc".to_vec());
        assert_ne!(event_id(&e1), event_id(&e2));
    }

    #[test]
    fn verify_catches_a_wrong_id_and_unsorted_parents() {
        let e = Event::new("k", b"p".to_vec());
        let (a, b) = (EpochId([1; 32]), EpochId([2; 32]));
        let id = epoch_id(&space(), &[a, b], &[event_id(&e)]);
        let good = ForeignEpoch {
            space: space(),
            id,
            parents: vec![a, b],
            events: vec![e.clone()],
        };
        verify_epoch(&good).unwrap();
        let unsorted = ForeignEpoch {
            parents: vec![b, a],
            ..good.clone()
        };
        assert!(matches!(
            verify_epoch(&unsorted),
            Err(Error::InvalidInput { .. })
        ));
        let wrong = ForeignEpoch {
            id: EpochId([0; 32]),
            ..good.clone()
        };
        assert!(matches!(
            verify_epoch(&wrong),
            Err(Error::HashMismatch { .. })
        ));
        let empty = ForeignEpoch {
            events: vec![],
            ..good
        };
        assert!(matches!(
            verify_epoch(&empty),
            Err(Error::InvalidInput { .. })
        ));
    }

    const GOLDEN_EVENT: &str = "54205a6f7f310979c12cb606a80c1129536cf8d8e181f9a75fc057b4705baab8";
    const GOLDEN_ROOT: &str = "c29f5e2ff2b59adf9585c63212a00b53b83ee1da5b0bbf90d911da520231c79c";
    const GOLDEN_CHILD: &str = "f9471290975e992b8c57dca40183382e02e651a41f28b12f9369b32b3306f48c";
}

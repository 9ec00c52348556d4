//! Targets for cairn-core's outside-facing types: feed cursors, dedup keys and supersede
//! groups, foreign epochs offered for import, and the text ids and names of the spool.

use arbitrary::Unstructured;
use cairn_core::spool::{
    ConsumerId, DedupKey, FactName, LeaseToken, QueueName, RunEventId, RunId, RunState,
    SupersedeGroup, MAX_DEDUP_KEY, MAX_SUPERSEDE_GROUP,
};
use cairn_core::{
    epoch_id, event_id, verify_epoch, EpochId, Error, Event, EventId, FeedCursor, ForeignEpoch,
    Seq, SpaceId,
};

use super::signature::{mix, sig};
use super::target::Target;

/// Printed cursors and the pieces of one.
const CURSOR_DICT: &[&[u8]] = &[
    b"c1.",
    b"c2.",
    b".",
    b"0011223344556677",
    b"AABBCCDDEEFF0011",
    b"9223372036854775807",
    b"9223372036854775808",
];

pub(super) const FEED_CURSOR: Target = Target {
    name: "feed_cursor",
    about: "FeedCursor::parse on text; parse -> print -> parse; cursors built for a space resume only in it",
    run: feed_cursor,
    dictionary: CURSOR_DICT,
    max_len: 256,
};

fn feed_cursor(data: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(data);
    let parsed = FeedCursor::parse(&text);
    if let Ok(cursor) = &parsed {
        let printed = cursor.to_string();
        // The printed form is canonical: only the hex digits' case may differ from the input.
        assert_eq!(
            printed,
            text.to_ascii_lowercase(),
            "a cursor prints its input"
        );
        assert_eq!(&FeedCursor::parse(&printed).unwrap(), cursor);
        assert!(i64::try_from(cursor.after().0).is_ok());
    } else {
        assert!(matches!(parsed, Err(Error::BadCursor { .. })));
    }

    // A cursor made for a space, printed and read back, resumes in that space only.
    let mut u = Unstructured::new(data);
    let (Ok(space), Ok(other), Ok(after), Ok(limit)) = (
        u.arbitrary::<Vec<u8>>(),
        u.arbitrary::<Vec<u8>>(),
        u.arbitrary::<u64>(),
        u.int_in_range(0..=3usize),
    ) else {
        return sig(1, &parsed);
    };
    let (Ok(space), Ok(other)) = (SpaceId::new(space), SpaceId::new(other)) else {
        return sig(2, &parsed);
    };
    let cursor = FeedCursor::new(&space, Seq(after));
    let storable = i64::try_from(after).is_ok();
    let reread = FeedCursor::parse(&cursor.to_string());
    assert_eq!(reread.as_ref().ok(), storable.then_some(&cursor));
    let start = FeedCursor::start_after(&space, Some(&cursor), limit);
    match (limit, storable) {
        (0, _) => assert!(matches!(start, Err(Error::InvalidInput { .. }))),
        (_, true) => assert_eq!(start.unwrap(), Seq(after)),
        (_, false) => assert!(matches!(start, Err(Error::BadCursor { .. }))),
    }
    if other != space {
        // Space tags are 64 bits: a collision is not a reachable failure here.
        assert!(matches!(
            cursor.resume_after(&other),
            Err(Error::BadCursor { .. })
        ));
    }
    assert_eq!(
        FeedCursor::start_after(&space, None, limit.max(1)).unwrap(),
        Seq(0)
    );
    mix(sig(3, &parsed), u64::from(storable))
}

const KEY_DICT: &[&[u8]] = &[
    b"0:,", b"1:a,", b"4:gate,", b"01:a,", b"+1:a,", b"1:", b":", b",", b"0x",
];

pub(super) const DEDUP_KEY: Target = Target {
    name: "dedup_key",
    about: "DedupKey/SupersedeGroup from bytes (decode parts -> re-encode is identity) and from parts (parts round-trip, limits exact)",
    run: dedup_key,
    dictionary: KEY_DICT,
    max_len: 2048,
};

/// The netstring encoding's length, computed independently of the library.
fn encoded_len(parts: &[Vec<u8>]) -> usize {
    parts
        .iter()
        .map(|p| p.len().to_string().len() + p.len() + 2)
        .sum()
}

macro_rules! check_part_key {
    ($ty:ident, $max:ident, $data:expr, $parts:expr) => {{
        let data: &[u8] = $data;
        let from_bytes = $ty::from_bytes(data.to_vec());
        assert_eq!(
            from_bytes.is_ok(),
            !data.is_empty() && data.len() <= $max,
            "from_bytes accepts exactly 1..=max bytes"
        );
        let mut s = sig(10, &from_bytes);
        if let Ok(key) = &from_bytes {
            assert_eq!(key.as_bytes(), data);
            let shown = key.to_string();
            assert!(!shown.is_empty());
            if let Some(parts) = key.parts() {
                // Decoding is the exact inverse of encoding.
                let again = $ty::from_parts(&parts).expect("decoded parts re-encode");
                assert_eq!(&again, key);
                s = mix(s, parts.len() as u64);
            }
        }
        if let Some(parts) = $parts {
            let built = $ty::from_parts(parts);
            let fits = !parts.is_empty() && encoded_len(parts) <= $max;
            assert_eq!(
                built.is_ok(),
                fits,
                "from_parts refuses exactly the empty and oversized lists"
            );
            if let Ok(key) = built {
                assert_eq!(key.parts().as_ref(), Some(parts));
                assert_eq!($ty::from_bytes(key.as_bytes().to_vec()).unwrap(), key);
            }
        }
        s
    }};
}

fn dedup_key(data: &[u8]) -> u64 {
    let parts: Option<Vec<Vec<u8>>> = Unstructured::new(data).arbitrary().ok();
    let a = check_part_key!(DedupKey, MAX_DEDUP_KEY, data, parts.as_ref());
    let b = check_part_key!(SupersedeGroup, MAX_SUPERSEDE_GROUP, data, parts.as_ref());
    mix(a, b)
}

pub(super) const FOREIGN_EPOCH: Target = Target {
    name: "foreign_epoch",
    about: "verify_epoch on arbitrary foreign epochs (accepts exactly the valid, correctly addressed ones); id hex round trip; parent order does not change the id",
    run: foreign_epoch,
    dictionary: &[],
    max_len: 4096,
};

fn arbitrary_event(u: &mut Unstructured<'_>) -> arbitrary::Result<Event> {
    let kind: String = u.arbitrary()?;
    let payload: Vec<u8> = u.arbitrary()?;
    Ok(if u.arbitrary()? {
        Event::with_key(kind, u.arbitrary::<Vec<u8>>()?, payload)
    } else {
        Event::new(kind, payload)
    })
}

/// The raw pieces of a foreign epoch: space, mode bits, parents, events, claimed id.
type RawEpoch = (Vec<u8>, u8, Vec<[u8; 32]>, Vec<Event>, [u8; 32]);

fn foreign_epoch(data: &[u8]) -> u64 {
    let mut u = Unstructured::new(data);
    let Ok(epoch) = (|| -> arbitrary::Result<RawEpoch> {
        let space: Vec<u8> = u.arbitrary()?;
        let mode: u8 = u.arbitrary()?;
        let parents: Vec<[u8; 32]> = u.arbitrary()?;
        let n = u.int_in_range(0..=4usize)?;
        let events = (0..n)
            .map(|_| arbitrary_event(&mut u))
            .collect::<arbitrary::Result<Vec<_>>>()?;
        let id: [u8; 32] = u.arbitrary()?;
        Ok((space, mode, parents, events, id))
    })() else {
        return 0;
    };
    let (space, mode, parents, events, claimed) = epoch;
    let Ok(space) = SpaceId::new(space) else {
        return 1;
    };
    let mut parents: Vec<EpochId> = parents.into_iter().map(EpochId).collect();
    if mode & 1 == 1 {
        parents.sort_unstable();
        parents.dedup();
    }
    let ids: Vec<EventId> = events.iter().map(event_id).collect();
    let actual = epoch_id(&space, &parents, &ids);
    // Parent order and repetition never change the id.
    let mut reversed = parents.clone();
    reversed.reverse();
    reversed.extend(parents.first().copied());
    assert_eq!(epoch_id(&space, &reversed, &ids), actual);
    let id = match mode >> 1 & 3 {
        0 => EpochId(claimed),
        1 => {
            let mut flipped = actual.0;
            flipped[usize::from(claimed[0] & 31)] ^= 1 << (claimed[1] & 7);
            EpochId(flipped)
        }
        _ => actual,
    };
    let foreign = ForeignEpoch {
        space: space.clone(),
        id,
        parents: parents.clone(),
        events: events.clone(),
    };
    let verdict = verify_epoch(&foreign);
    let valid = Event::validate_batch(&events).is_ok();
    let sorted = parents.windows(2).all(|w| w[0] < w[1]);
    match &verdict {
        Ok(()) => assert!(valid && sorted && id == actual),
        Err(Error::InvalidInput { .. }) => assert!(!valid || !sorted),
        Err(Error::HashMismatch { claimed, actual: a }) => {
            assert!(valid && sorted);
            assert_eq!((*claimed, *a), (id, actual));
            assert_ne!(id, actual);
        }
        Err(other) => panic!("verify_epoch returned an unexpected error: {other:?}"),
    }
    // Ids print as 64 lowercase hex digits and read back, in either case.
    let hex = id.to_string();
    assert_eq!(hex.len(), 64);
    assert_eq!(EpochId::from_hex(&hex).unwrap(), id);
    assert_eq!(EpochId::from_hex(&hex.to_ascii_uppercase()).unwrap(), id);
    assert_eq!(EpochId::from_slice(&id.0).unwrap(), id);
    let text = String::from_utf8_lossy(data);
    if let Ok(parsed) = EpochId::from_hex(&text) {
        assert_eq!(parsed.to_string(), text.to_ascii_lowercase());
    }
    sig(u64::from(mode & 7), &verdict)
}

const ID_DICT: &[&[u8]] = &[
    b"0190a5c0-0000-7000-8000-000000000001",
    b"0190a5c000007000800000000000000a",
    b"-",
    b"queued",
    b"claimed",
    b"parked",
    b"\x7f",
    b"\xc2\x85",
];

pub(super) const IDS: Target = Target {
    name: "ids",
    about: "RunId/LeaseToken parse -> print -> parse, RunState parse, QueueName/ConsumerId/FactName/RunEventId/SpaceId validation",
    run: ids,
    dictionary: ID_DICT,
    max_len: 512,
};

macro_rules! check_id128 {
    ($ty:ident, $text:expr) => {{
        let text: &str = $text;
        let parsed = $ty::parse(text);
        if let Ok(id) = &parsed {
            let printed = id.to_string();
            assert_eq!(printed.len(), 36);
            assert_eq!(&$ty::parse(&printed).unwrap(), id);
            assert_eq!(&$ty::parse(&printed.replace('-', "")).unwrap(), id);
            assert_eq!(
                printed.replace('-', ""),
                text.replace('-', "").to_ascii_lowercase(),
                "an id prints the digits it was read from"
            );
        }
        sig(20, &parsed)
    }};
}

macro_rules! check_name {
    ($ty:ident, $text:expr) => {{
        let text: &str = $text;
        let made = $ty::new(text);
        if let Ok(name) = &made {
            assert_eq!(name.as_str(), text);
            assert_eq!(name.to_string(), text);
            assert!(!text.is_empty() && !text.chars().any(char::is_control));
        }
        sig(21, &made)
    }};
}

fn ids(data: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(data);
    let mut s = check_id128!(RunId, &text);
    s = mix(s, check_id128!(LeaseToken, &text));
    s = mix(s, check_name!(QueueName, &text));
    s = mix(s, check_name!(ConsumerId, &text));
    s = mix(s, check_name!(FactName, &text));
    let state = RunState::parse(&text);
    if let Ok(st) = state {
        assert_eq!(st.as_str(), text);
    }
    s = mix(s, sig(22, &state));
    let event = RunEventId::new(data.to_vec());
    if let Ok(e) = &event {
        assert_eq!(e.as_bytes(), data);
    }
    let space = SpaceId::new(data.to_vec());
    if let Ok(sp) = &space {
        assert_eq!(sp.as_bytes(), data);
    }
    if data.len() >= 8 {
        let v = i64::from_le_bytes(data[..8].try_into().unwrap());
        let seq = Seq::from_i64(v);
        assert_eq!(seq.is_ok(), v >= 0, "a seq is a non-negative i64");
        if let Ok(seq) = seq {
            assert_eq!(seq.to_i64().unwrap(), v);
        }
    }
    mix(s, mix(sig(23, &event), sig(24, &space)))
}

//! Tests written to kill mutants cargo-mutants found alive in `spool/dedup.rs` (see
//! docs/RELIABILITY.md): the limit on encoded parts is inclusive.

use cairn_core::spool::{DedupKey, SupersedeGroup, MAX_DEDUP_KEY, MAX_SUPERSEDE_GROUP};

/// A part of 1018 bytes encodes to `1018:` + 1018 bytes + `,` = 1024 bytes: exactly the limit.
#[test]
fn an_encoding_of_exactly_the_limit_is_accepted_and_one_byte_more_is_not() {
    assert_eq!(MAX_DEDUP_KEY, 1024);
    let at_limit = DedupKey::from_parts([vec![b'a'; 1018]]).unwrap();
    assert_eq!(at_limit.as_bytes().len(), MAX_DEDUP_KEY);
    assert_eq!(at_limit.parts(), Some(vec![vec![b'a'; 1018]]));
    assert!(DedupKey::from_parts([vec![b'a'; 1019]]).is_err());

    // Two parts: `1:x,` (4) + `1014:` (5) + 1014 bytes + `,` (1) = 1024.
    assert_eq!(MAX_SUPERSEDE_GROUP, 1024);
    let group = SupersedeGroup::from_parts([&b"x"[..], &[b'b'; 1014][..]]).unwrap();
    assert_eq!(group.as_bytes().len(), MAX_SUPERSEDE_GROUP);
    assert!(SupersedeGroup::from_parts([&b"x"[..], &[b'b'; 1015][..]]).is_err());
}

/// Text prints as text; text that holds a control character or starts with `0x` (which would
/// read as hex) prints as hex, so a printed key is never ambiguous or a terminal escape.
#[test]
fn keys_print_as_text_unless_that_would_mislead() {
    let show = |bytes: &[u8]| DedupKey::from_bytes(bytes).unwrap().to_string();
    assert_eq!(show(b"gate/main"), "gate/main");
    assert_eq!(show(b"a\nb"), "0x610a62");
    assert_eq!(show(b"\x1b[31m"), "0x1b5b33316d");
    assert_eq!(show(b"0x12"), "0x30783132");
    assert_eq!(show(b"x0x"), "x0x");
    let group = SupersedeGroup::from_bytes(&b"0xab"[..]).unwrap();
    assert_eq!(group.to_string(), "0x30786162");
    assert_eq!(
        format!("{:?}", DedupKey::from_bytes(&b"a\tb"[..]).unwrap()),
        "DedupKey(0x610962)"
    );
}

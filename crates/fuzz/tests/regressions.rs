//! Inputs the fuzzer found that once panicked, run through the public API they reached. Each
//! test names the target that found it.

use cairn_core::spool::{DedupKey, SupersedeGroup};
use cairn_fuzz::{run_once, targets::by_name};

/// `dedup_key`: a netstring length near `usize::MAX` overflowed `colon + 1 + len` in
/// `decode_parts` (a panic in builds with overflow checks, a wrap otherwise). Such bytes are
/// simply not a part encoding.
#[test]
fn a_part_length_near_usize_max_is_not_a_part_encoding() {
    for bytes in [
        &b"18446744073709551615:a,"[..],
        b"18446744073709551614:,",
        b"1:a,18446744073709551615:",
    ] {
        let key = DedupKey::from_bytes(bytes).unwrap();
        assert_eq!(key.parts(), None, "{bytes:?}");
        let group = SupersedeGroup::from_bytes(bytes).unwrap();
        assert_eq!(group.parts(), None, "{bytes:?}");
        let target = by_name("dedup_key").unwrap();
        assert!(run_once(target, bytes).is_ok(), "{bytes:?}");
    }
}

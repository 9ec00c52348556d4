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

/// `sql_split`: the scanner skipped ASCII whitespace only but trimmed statements with the
/// Unicode-aware `trim_end`, so a statement of a vertical tab or a no-break space came back as
/// `""` (fixed in `split.rs` by trimming exactly what the scanner skips).
#[test]
fn a_statement_of_non_ascii_whitespace_is_never_returned_empty() {
    use cairn_core::schema::Dialect;
    use cairn_migrate::split_statements;
    for sql in ["\x0b;", "\u{a0};SELECT 1", "\x0b;\x001\x00\x00\x00\x00\x00"] {
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let statements = split_statements(sql, dialect).unwrap();
            assert!(
                statements.iter().all(|s| !s.is_empty()),
                "{sql:?}: {statements:?}"
            );
        }
        assert!(
            run_once(by_name("sql_split").unwrap(), sql.as_bytes()).is_ok(),
            "{sql:?}"
        );
    }
}

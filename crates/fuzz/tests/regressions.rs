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

/// `config`: a `log.level` directive whose span filter holds a field value such as
/// `(a|b)*a(a|b)(a|b)…` was compiled by tracing-subscriber into a dense DFA with a state per
/// combination of the last letters: `check_config` ran for minutes and grew to gigabytes (the
/// fuzzer's input took 228 s). Field values now match literally
/// (`EnvFilter::builder().with_regex(false)`), so the check returns at once.
#[test]
fn a_log_filter_with_a_pathological_field_regex_is_checked_at_once() {
    let blowup = format!("(a|b)*a{}", "(a|b)".repeat(22));
    let configs = [
        format!("[auth]\ninsecure_no_auth = true\n[log]\nlevel = \"x[{{f={blowup}}}]=debug\"\n"),
        format!(
            "[auth]\ninsecure_no_auth = true\n[log]\nlevel = \"info,cairn[req{{token=.*.*.*{blowup}}}]=trace\"\n"
        ),
    ];
    for text in configs {
        let (tx, rx) = std::sync::mpsc::channel();
        let checked = text.clone();
        std::thread::spawn(move || {
            let _ = tx.send(cairn_server::fuzzing::check_config(&checked).map(|_| ()));
        });
        let accepted = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("check_config did not return within 60 s: {text:?}"));
        assert_eq!(
            accepted,
            Ok(()),
            "a literal field filter is a valid directive: {text:?}"
        );
        assert!(run_once(by_name("config").unwrap(), text.as_bytes()).is_ok());
    }
}

/// `config`: the target's helper that quotes the values of a built config used `toml`'s
/// serializer, whose run-of-quotes counter (toml_write 0.1.2) overflowed on 256 `"` in a row
/// with overflow checks on — a panic in the harness, not in cairn (which only parses TOML). The
/// helper now escapes by itself; the libFuzzer input is the committed seed `quotes_run_256`.
#[test]
fn a_built_config_value_of_many_quotes_is_quoted_without_panicking() {
    let input = include_bytes!("../corpus/config/quotes_run_256");
    assert!(run_once(by_name("config").unwrap(), input).is_ok());
}

/// `config`: tracing-subscriber's directive parser (0.3.23) walks a directive trimmed but
/// slices it untrimmed, so a `log.level` piece with a space before a multi-byte character
/// (` ފ=…`) panicked on a char boundary. `check_level` now trims each directive first; the
/// libFuzzer input is the committed seed `log_filter_space_multibyte`.
#[test]
fn a_log_filter_with_a_space_before_a_multi_byte_character_does_not_panic() {
    let input = include_bytes!("../corpus/config/log_filter_space_multibyte");
    assert!(run_once(by_name("config").unwrap(), input).is_ok());
    let text = "[auth]\ninsecure_no_auth = true\n[log]\nlevel = \"info, \u{78a}=debug\"\n";
    assert!(cairn_server::fuzzing::check_config(text).is_ok());
}

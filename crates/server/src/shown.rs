//! How the CLI and the dashboard both print values: durations (`250ms`, `1m`) and which
//! characters of a name must never be printed raw. A leaf module, so both sides use it.

use std::borrow::Cow;
use std::time::Duration;

/// The shortest exact form the CLI's `--rate` reads back (`1h`, `90s`, `250ms`); a duration
/// that is not a whole number of milliseconds (stored through the HTTP API or the library,
/// which take microseconds) prints in `us`, which `--rate` does not take.
pub(crate) fn format_duration(d: Duration) -> String {
    let us = d.as_micros();
    for (unit, size) in [
        ("h", 3_600_000_000),
        ("m", 60_000_000),
        ("s", 1_000_000),
        ("ms", 1_000),
    ] {
        if us >= size && us % size == 0 {
            return format!("{}{unit}", us / size);
        }
    }
    format!("{us}us")
}

/// Characters that show as nothing, or as a plain space or line break, so that a name holding
/// them reads as another name: zero-width spaces and joiners, the word joiner and invisible
/// operators, the byte-order mark, the soft hyphen, the line and paragraph separators, and
/// the like.
pub(crate) fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{034f}'
            | '\u{061c}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{17b4}'
            | '\u{17b5}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200d}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{2060}'..='\u{2064}'
            | '\u{3164}'
            | '\u{feff}'
            | '\u{ffa0}'
    )
}

/// A character a name printed in a line of words must not hold raw: whitespace, a quote or
/// backslash, a control, bidirectional or invisible character.
fn not_plain(c: char) -> bool {
    c.is_whitespace()
        || matches!(c, '"' | '\'' | '\\')
        || c.is_control()
        || cairn::spool::is_bidi_control(c)
        || invisible(c)
}

/// A name as one word of a CLI line: a plain name (not empty, none of [`not_plain`]'s
/// characters) as it is, any other in double quotes with `"`, `\`, `\n`, `\r`, `\t` escaped
/// by a backslash and other such characters as `\u{…}` (Rust's `{:?}` style), so a name can
/// never pass for other words of the line, or for another name.
pub(crate) fn word(name: &str) -> Cow<'_, str> {
    if !name.is_empty() && !name.chars().any(not_plain) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' ' | '\'' => out.push(c),
            c if not_plain(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_in_their_largest_exact_unit() {
        for (d, shown) in [
            (Duration::from_millis(250), "250ms"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_micros(1500), "1500us"),
        ] {
            assert_eq!(format_duration(d), shown);
        }
    }

    #[test]
    fn plain_names_print_as_they_are_and_others_quoted() {
        for plain in ["mail", "tenant-7/reports", "é", "a.b_c:d"] {
            assert_eq!(word(plain), plain);
        }
        for (name, shown) in [
            ("", r#""""#),
            (
                "x paused max_claimed=5 per_partition=- rate=-",
                r#""x paused max_claimed=5 per_partition=- rate=-""#,
            ),
            ("a\"b", r#""a\"b""#),
            ("a\\b", r#""a\\b""#),
            ("it's", r#""it's""#),
            ("a\nb\tc\r", r#""a\nb\tc\r""#),
            ("a\u{200b}b", r#""a\u{200b}b""#),
            ("a\u{202e}b", r#""a\u{202e}b""#),
            ("a\u{7}b", r#""a\u{7}b""#),
            ("a\u{a0}b", r#""a\u{a0}b""#),
            ("a\u{2028}b", r#""a\u{2028}b""#),
        ] {
            assert_eq!(word(name), shown, "{name:?}");
        }
    }

    #[test]
    fn invisible_characters_are_named() {
        for c in [
            '\u{200b}', '\u{200c}', '\u{200d}', '\u{2060}', '\u{feff}', '\u{2028}', '\u{2029}',
            '\u{00ad}',
        ] {
            assert!(invisible(c), "{c:?}");
        }
        for c in ['a', ' ', 'é', '\u{200e}', '\u{2065}'] {
            assert!(!invisible(c), "{c:?}");
        }
    }
}

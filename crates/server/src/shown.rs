//! How the CLI and the dashboard both print values: durations (`250ms`, `1m`) and which
//! characters of a name must never be printed raw. A leaf module, so both sides use it.

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

//! `cairn serve`'s log lines: tracing events written to stderr by tracing-subscriber, as text
//! or as one JSON object per line (`[log] format`), filtered by `[log] level`.
//!
//! What is logged is chosen where it is emitted: request lines carry the method's and the
//! route's metric labels (an unmatched path is never logged), the status, the latency, the user
//! agent and a made-up method as sent, each client-chosen value clipped to [`FIELD_MAX`] bytes by
//! [`clip`]; the backfill, the retention pass and the delivery worker log counts, outcomes and
//! error codes. No event carries another header, a token, a URL, a payload or a space id.

use std::borrow::Cow;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// The most bytes of a client-chosen value (a user agent, an invented method) a log line
/// carries; longer values are clipped and end with `…`.
pub(crate) const FIELD_MAX: usize = 64;

/// `value` clipped to [`FIELD_MAX`] bytes (at a character boundary, then `…`), so that a client
/// cannot make a log line longer than the fields' sum.
pub(crate) fn clip(value: &str) -> Cow<'_, str> {
    if value.len() <= FIELD_MAX {
        return Cow::Borrowed(value);
    }
    let mut end = FIELD_MAX;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…", &value[..end]))
}

/// Checks a level or filter directive; the problem as a line naming the key.
///
/// Field values in span filters (`target[span{field=value}]`) match literally, never as
/// regular expressions: tracing-subscriber compiles such a regex into a dense DFA, and a
/// directive like `x[{f=(a|b)*a(a|b)(a|b)…}]` then takes minutes and gigabytes to parse (found
/// by the `config` fuzz target).
///
/// Each comma-separated directive is trimmed before tracing-subscriber sees it: its parser (0.3)
/// walks a directive trimmed but slices it untrimmed, so a space after a comma shifted every
/// index (`info, cairn::http=warn` was refused) and a space before a multi-byte character
/// panicked (found by the `config` fuzz target).
pub(crate) fn check_level(level: &str) -> Result<EnvFilter, String> {
    let directives = level
        .split(',')
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(",");
    EnvFilter::builder()
        .with_regex(false)
        .parse(&directives)
        .map_err(|_| "log.level: expected a level (error, warn, info, debug, trace) or a tracing filter directive".to_owned())
}

/// Installs the subscriber for the rest of the process. A second call (never made by the
/// binary) leaves the first in place.
pub(crate) fn init(filter: EnvFilter, format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(true);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::{check_level, clip, FIELD_MAX};

    #[test]
    fn client_values_are_clipped_at_a_character_boundary() {
        assert_eq!(clip("curl/8"), "curl/8");
        let long = "é".repeat(100);
        let clipped = clip(&long);
        assert!(clipped.len() <= FIELD_MAX + '…'.len_utf8(), "{clipped}");
        assert!(clipped.ends_with('…'));
        assert!(long.starts_with(clipped.trim_end_matches('…')));
    }

    #[test]
    fn a_space_after_a_comma_leaves_the_directive_intact() {
        let filter = check_level("info, cairn::http=warn").unwrap().to_string();
        assert!(
            filter.split(',').any(|d| d == "cairn::http=warn"),
            "{filter}"
        );
    }

    #[test]
    fn a_space_before_a_multi_byte_character_neither_panics_nor_shifts_the_target() {
        let filter = check_level("info, \u{78a}=debug").unwrap().to_string();
        assert!(filter.split(',').any(|d| d == "\u{78a}=debug"), "{filter}");
        assert!(check_level(" \u{78a}=========8914143662319").is_err());
    }
}

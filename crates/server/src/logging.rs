//! `cairn serve`'s log lines: tracing events written to stderr by tracing-subscriber, as text
//! or as one JSON object per line (`[log] format`), filtered by `[log] level`.
//!
//! What is logged is chosen where it is emitted: request lines carry the method, the route
//! template, the status and the latency; the backfill and the delivery worker log counts,
//! outcomes and error codes. No event carries a header, a token, a URL, a payload or a space id.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

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
    use super::check_level;

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

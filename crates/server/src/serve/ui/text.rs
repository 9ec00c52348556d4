//! How the dashboard prints values: times, ages, names and bytes (escaped so that no
//! control or reordering character reaches a page), query values, trusted SVG.

use std::time::Duration;

use maud::{html, Markup, PreEscaped};

/// Percent-encodes `s` for a query value.
pub(crate) fn encode_query(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A timestamp as `2026-12-02 01:50:26 UTC`.
pub(crate) fn when(t: cairn::spool::Timestamp) -> String {
    jiff::Timestamp::from_microsecond(t.as_unix_micros())
        .map(|ts| ts.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|_| t.to_string())
}

/// A duration as `3s`, `4m 10s`, `2h 5m`, `3d 4h`.
pub(crate) fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Characters that change how text around them is displayed (bidirectional overrides,
/// isolates and marks): a name holding them could show as another name.
fn reorders(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Characters a name must not show raw: control, reordering and invisible ones
/// ([`crate::shown::invisible`]: zero-width, soft hyphen, line separators …).
fn hidden(c: char) -> bool {
    c.is_control() || reorders(c) || crate::shown::invisible(c)
}

/// A name or id as text anyone can read: control, bidirectional-formatting and invisible
/// characters (zero-width spaces and joiners, the word joiner, the byte-order mark, the soft
/// hyphen, line and paragraph separators) are shown as `\u{…}` escapes, so two different
/// names never look the same (maud then escapes the markup).
pub(crate) fn printable(s: &str) -> String {
    if !s.chars().any(hidden) {
        return s.to_owned();
    }
    s.chars()
        .map(|c| {
            if hidden(c) {
                format!("\\u{{{:x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Bytes as [`printable`] text (invalid UTF-8 as U+FFFD).
pub(crate) fn printable_bytes(b: &[u8]) -> String {
    printable(&String::from_utf8_lossy(b))
}

/// Bytes shown as text when they are printable UTF-8, else as hex; at most `cap` bytes.
pub(crate) fn shown(bytes: &[u8], cap: usize) -> Markup {
    let cut = &bytes[..bytes.len().min(cap)];
    let more = bytes.len() > cap;
    let text = std::str::from_utf8(cut).ok().filter(|t| {
        t.chars()
            .all(|c| (!c.is_control() || c == '\n' || c == '\t') && !reorders(c))
    });
    html! {
        @if let Some(t) = text {
            pre.payload { (t) }
        } @else {
            pre.payload.hex title="not printable text: shown as hex" { (hex::encode(cut)) }
        }
        @if more { p.note { "Showing the first " (cap) " of " (bytes.len()) " bytes." } }
    }
}

/// Trusted markup made by cairn's own renderers (the DAG's SVG), which escape what they print.
pub(crate) fn trusted(svg: String) -> Markup {
    PreEscaped(svg)
}

//! Text read from a store, made safe to print on one line.

use std::borrow::Cow;

/// `text` with every character that could change how a terminal or a log shows the output
/// escaped as Rust writes it in a string literal — control characters (`\n`, `\r`, `\u{1b}`,
/// …), other characters that do not print (bidirectional overrides, line separators) and the
/// backslash itself (`\\`) — and everything else, quotes included, as it is.
///
/// Build ids, hosts and revision ids come from the store, where any program that can write
/// the store can put anything: printed through this function, an escape sequence followed by
/// a newline stays visibly part of its one field instead of forging output lines. Text with
/// nothing to escape is returned as is.
///
/// ```
/// use cairn_migrate::escape_control;
/// assert_eq!(escape_control("svc-v1"), "svc-v1");
/// assert_eq!(escape_control("a\u{1b}[2K\nb\\"), "a\\u{1b}[2K\\nb\\\\");
/// ```
pub fn escape_control(text: &str) -> Cow<'_, str> {
    let plain = |c: char| c == '"' || c == '\'' || c.escape_debug().len() == 1;
    if text.chars().all(plain) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if plain(c) {
            out.push(c);
        } else {
            out.extend(c.escape_debug());
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_invisible_characters_are_escaped_and_nothing_else() {
        assert!(matches!(
            escape_control("build 1.2+cairn@0005"),
            Cow::Borrowed(_)
        ));
        assert_eq!(escape_control("host\r\nFORGED"), "host\\r\\nFORGED");
        assert_eq!(escape_control("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(
            escape_control("a\u{202e}b\u{2028}c"),
            "a\\u{202e}b\\u{2028}c"
        );
        assert_eq!(escape_control("\"q\" 'q' \\"), "\"q\" 'q' \\\\");
        assert_eq!(escape_control("nœud-7 ü"), "nœud-7 ü");
        let escaped = escape_control("x\u{0}\u{7f}\u{85}\ty");
        assert!(!escaped.chars().any(char::is_control), "{escaped}");
    }
}

//! Text read from a store, made safe to print on one line.

/// Escapes what could change how a terminal shows text read from a store (defined in
/// `cairn-core`, where the errors that print such text live).
pub use cairn_core::escape_control;

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

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

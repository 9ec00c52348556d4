//! The binary's error: everything that ends a command with exit status 1.

use std::fmt;

/// Why a command failed. `Display` gives the one line printed after `cairn: `.
#[derive(Debug)]
pub(crate) enum CliError {
    /// The store refused the operation or its input.
    Store(cairn::Error),
    /// The configuration (database URL, data directory) is unusable.
    Config(String),
    /// A file the command reads (`cairn enqueue --from-file`) is not what it takes: the
    /// message names the line and says that nothing was written.
    Input(String),
    /// A command that needs an existing store found none: no SQLite file, or (`cairn migrate
    /// status`) no Postgres schema. Holds where it looked (`at PATH`, `in schema NAME`).
    NoStore(String),
    /// Writing the result to stdout failed.
    Output(std::io::Error),
    /// `cairn migrate down` failed and was rolled back. Kept as the runner's error: the
    /// store error it converts to speaks of an upgrade.
    Down(cairn::migrate::MigrateError),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The error with its causes (a failed revision's store error, an OS error).
            Self::Store(e) => write!(f, "{}", e.report()),
            Self::Config(msg) | Self::Input(msg) => f.write_str(msg),
            Self::NoStore(place) => write!(
                f,
                "no cairn store {place}; the first `cairn append` creates it"
            ),
            Self::Output(e) => write!(f, "cannot write the output: {e}"),
            Self::Down(e) => write!(f, "{}", e.report()),
        }
    }
}

impl From<cairn::Error> for CliError {
    fn from(e: cairn::Error) -> Self {
        Self::Store(e)
    }
}

impl From<cairn::migrate::MigrateError> for CliError {
    /// A migration error, as the store error it maps to (one line; the cause in `report`).
    fn from(e: cairn::migrate::MigrateError) -> Self {
        Self::Store(e.into())
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        Self::Output(e)
    }
}

/// Collapses a message to one line, so that an error is always exactly one line on stderr even
/// when a driver's message spans several.
///
/// Error messages may quote what the store holds (an engine's error quoting a stored down
/// statement, a revision id): any control character left after the folding (an escape
/// sequence) is printed escaped (`\u{1b}`), so a store cannot drive the operator's terminal.
pub(crate) fn one_line(msg: &str) -> String {
    let folded = msg.split_whitespace().collect::<Vec<_>>().join(" ");
    if !folded.chars().any(char::is_control) {
        return folded;
    }
    folded
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_collapse_to_one_line() {
        assert_eq!(one_line("a\nb\r\n  c\t d"), "a b c d");
    }

    #[test]
    fn control_characters_left_after_folding_are_escaped() {
        assert_eq!(
            one_line("near \"nosuch\ncairn: rolled back FORGED\u{1b}[32m\""),
            "near \"nosuch cairn: rolled back FORGED\\u{1b}[32m\""
        );
        assert_eq!(one_line("a\u{7}b\u{9b}c"), "a\\u{7}b\\u{9b}c");
        assert_eq!(one_line("plain C:\\path é"), "plain C:\\path é");
    }
}

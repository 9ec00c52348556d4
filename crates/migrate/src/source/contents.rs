//! What a migration file's text says besides its SQL: its markers, the description,
//! and the statements it splits into.

use cairn_core::schema::Dialect;

use super::file_name::source_err;
use crate::error::MigrateError;
use crate::split::split_statements;

/// The first line of an up file that marks its revision a contract revision.
pub const CONTRACT_MARKER: &str = "-- cairn:contract";

/// A leading line of an up file that marks its revision no-transaction in the file's dialect
/// ([`crate::MigrationSet::with_no_transaction`]).
pub const NO_TRANSACTION_MARKER: &str = "-- cairn:no-transaction";

/// The prefix of a leading line that accepts a lock-check finding for its revision
/// ([`crate::MigrationSet::with_accepted_lock`]): `-- cairn:accept-lock NAME`.
pub const ACCEPT_LOCK_MARKER: &str = "-- cairn:accept-lock";

/// The leading marker lines of `text` (`-- cairn:` and a word), trimmed, in order.
fn markers(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(str::trim).take_while(|l| {
        l.strip_prefix("-- cairn:")
            .is_some_and(|w| w.starts_with(|c: char| c.is_ascii_alphanumeric()))
    })
}

/// Whether `text`'s leading marker lines hold the [`CONTRACT_MARKER`].
pub(super) fn has_contract_marker(text: &str) -> bool {
    markers(text).any(|m| m == CONTRACT_MARKER)
}

/// Whether `text`'s leading marker lines hold the [`NO_TRANSACTION_MARKER`].
pub(super) fn has_no_transaction_marker(text: &str) -> bool {
    markers(text).any(|m| m == NO_TRANSACTION_MARKER)
}

/// The finding names of `text`'s leading [`ACCEPT_LOCK_MARKER`] lines, in order (one per line;
/// checked against the known names when the set is built).
pub(super) fn accepted_locks(text: &str) -> impl Iterator<Item = &str> {
    markers(text).filter_map(|m| {
        m.strip_prefix(ACCEPT_LOCK_MARKER)
            .filter(|rest| rest.starts_with(char::is_whitespace))
            .map(str::trim)
    })
}

/// Refuses a leading marker line cairn does not know (a misspelt marker would otherwise be a
/// comment, and the revision would run as an unmarked one).
pub(super) fn check_markers(file: &str, text: &str) -> Result<(), MigrateError> {
    // A marker written almost right (`--cairn:…`, `-- CAIRN:…`, `/* cairn:… */`, or after
    // another comment or a blank line) would be a plain comment: refused too.
    let leading = markers(text).count();
    for (i, line) in text.lines().map(str::trim).enumerate() {
        if !(line.starts_with("--") || line.starts_with("/*")) {
            continue;
        }
        let lower = line.to_ascii_lowercase();
        let near = lower.find("cairn:").is_some_and(|at| {
            lower[at + "cairn:".len()..].starts_with(|c: char| c.is_ascii_alphabetic())
        });
        if near && i >= leading {
            return Err(source_err(
                file,
                format!(
                    "has `{}`, which reads like a cairn marker but is not one: a marker is a \
                     leading line written exactly `{CONTRACT_MARKER}`, `{NO_TRANSACTION_MARKER}` \
                     or `{ACCEPT_LOCK_MARKER} NAME`, before any other line",
                    crate::text::escape_control(line)
                ),
            ));
        }
    }
    let accepting = |m: &str| {
        m.strip_prefix(ACCEPT_LOCK_MARKER)
            .is_some_and(|rest| rest.starts_with(char::is_whitespace))
    };
    if let Some(unknown) = markers(text)
        .find(|m| *m != CONTRACT_MARKER && *m != NO_TRANSACTION_MARKER && !accepting(m))
    {
        return Err(source_err(
            file,
            format!(
                "starts with the unknown marker `{}`; cairn knows `{CONTRACT_MARKER}`, `{NO_TRANSACTION_MARKER}` and `{ACCEPT_LOCK_MARKER} NAME`",
                crate::text::escape_control(unknown)
            ),
        ));
    }
    match accepted_locks(text).find(|name| crate::additivity::LockRule::from_name(name).is_none()) {
        Some(name) => Err(source_err(
            file,
            format!(
                "accepts the lock-check finding `{}`, which cairn does not report; it knows {}",
                crate::text::escape_control(name),
                crate::additivity::LockRule::ALL
                    .map(|r| r.name())
                    .join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// The description of a revision: its file's first `--` comment line before the first
/// statement (the contract marker aside), else the revision id.
pub(super) fn description(text: &str, stem: &str) -> String {
    text.lines()
        .skip(markers(text).count())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .and_then(|l| l.strip_prefix("--"))
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map_or_else(|| stem.to_owned(), str::to_owned)
}

/// The statements of migration file `file` in `dialect`; a file without one is an error.
pub(super) fn statements(
    file: &str,
    text: &str,
    dialect: Dialect,
) -> Result<Vec<String>, MigrateError> {
    let out = split_statements(text, dialect).map_err(|e| source_err(file, e.to_string()))?;
    if out.is_empty() {
        return Err(source_err(file, "holds no SQL statement"));
    }
    Ok(out)
}

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

/// Refuses a leading marker line cairn does not know (a misspelt marker would otherwise be a
/// comment, and the revision would run as an unmarked one).
pub(super) fn check_markers(file: &str, text: &str) -> Result<(), MigrateError> {
    match markers(text).find(|m| *m != CONTRACT_MARKER && *m != NO_TRANSACTION_MARKER) {
        Some(unknown) => Err(source_err(
            file,
            format!(
                "starts with the unknown marker `{}`; cairn knows `{CONTRACT_MARKER}` and `{NO_TRANSACTION_MARKER}`",
                crate::text::escape_control(unknown)
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

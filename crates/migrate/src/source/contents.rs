//! What a migration file's text says besides its SQL: the contract marker, the description,
//! and the statements it splits into.

use cairn_core::schema::Dialect;

use super::file_name::source_err;
use crate::error::MigrateError;
use crate::split::split_statements;

/// The first line of an up file that marks its revision a contract revision.
pub const CONTRACT_MARKER: &str = "-- cairn:contract";

/// Whether `text` starts with the [`CONTRACT_MARKER`] line.
pub(super) fn has_contract_marker(text: &str) -> bool {
    text.lines().next().map(str::trim) == Some(CONTRACT_MARKER)
}

/// The description of a revision: its file's first `--` comment line before the first
/// statement (the contract marker aside), else the revision id.
pub(super) fn description(text: &str, stem: &str) -> String {
    text.lines()
        .skip(usize::from(has_contract_marker(text)))
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

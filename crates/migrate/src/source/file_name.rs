//! The names of migration files: `NNNN_description[.down][.sqlite|.postgres].sql`, parsed into
//! a revision number, a stem (the revision id), the dialect a file is for and whether it holds
//! down SQL.

use cairn_core::schema::Dialect;

use crate::error::MigrateError;

/// Which dialect a file is for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Target {
    Generic,
    Only(Dialect),
}

/// One parsed file name.
#[derive(Debug)]
pub(super) struct FileName {
    pub(super) number: u64,
    pub(super) stem: String,
    pub(super) target: Target,
    /// A `*.down.sql` file: the revision's compensating down SQL.
    pub(super) down: bool,
}

/// The error for migration file `file`: `reason` says what is wrong and what to do.
pub(super) fn source_err(file: &str, reason: impl Into<String>) -> MigrateError {
    MigrateError::Source {
        file: file.to_owned(),
        reason: reason.into(),
    }
}

/// Parses a migration file name; `Ok(None)` for a file that is not a migration (no `.sql`).
pub(super) fn parse_name(file: &str) -> Result<Option<FileName>, MigrateError> {
    let Some(rest) = file.strip_suffix(".sql") else {
        return Ok(None);
    };
    if file.contains(['/', '\\']) {
        return Err(source_err(
            file,
            "a migration file name must not hold a path",
        ));
    }
    let (stem, target) = if let Some(s) = rest.strip_suffix(".sqlite") {
        (s, Target::Only(Dialect::Sqlite))
    } else if let Some(s) = rest.strip_suffix(".postgres") {
        (s, Target::Only(Dialect::Postgres))
    } else {
        (rest, Target::Generic)
    };
    let (stem, down) = match stem.strip_suffix(".down") {
        Some(s) => (s, true),
        None => (stem, false),
    };
    if stem.ends_with(".up") {
        return Err(source_err(
            file,
            "reversible migrations (*.up.sql) are not supported; rename it to NNNN_description.sql",
        ));
    }
    let expected = "name it NNNN_description.sql, optionally NNNN_description.sqlite.sql or NNNN_description.postgres.sql";
    let digits = stem.bytes().take_while(u8::is_ascii_digit).count();
    let description = stem[digits..].strip_prefix('_').unwrap_or_default();
    if digits == 0 || description.is_empty() || stem.contains('.') {
        return Err(source_err(file, expected));
    }
    let number = stem[..digits]
        .parse::<u64>()
        .map_err(|_| source_err(file, "the revision number is too large"))?;
    Ok(Some(FileName {
        number,
        stem: stem.to_owned(),
        target,
        down,
    }))
}

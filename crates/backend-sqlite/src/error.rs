//! Mapping rusqlite errors onto cairn's meaning-based [`Error`].
//!
//! Details carry SQLite's code and its message, which names tables and columns but never row
//! values, so no payload or key can leak into an error.

use cairn_core::Error;
use rusqlite::ffi;
use rusqlite::ErrorCode;

const BACKEND: &str = "sqlite";

/// Maps a rusqlite error by meaning: busy/locked → [`Error::Retryable`], a unique or
/// primary-key violation → [`Error::Conflict`], a damaged or foreign file → [`Error::Corrupt`],
/// anything else → [`Error::Backend`].
pub(crate) fn map(err: rusqlite::Error) -> Error {
    match &err {
        rusqlite::Error::SqliteFailure(e, msg) => {
            by_code(*e, msg.clone().unwrap_or_else(|| e.to_string()))
        }
        // The statement text is left out: it is cairn's own SQL and would spread the message
        // over many lines.
        rusqlite::Error::SqlInputError { error, msg, .. } => by_code(*error, msg.clone()),
        // Conversion errors can quote a stored value; name the kind of failure only.
        rusqlite::Error::FromSqlConversionFailure(col, ty, _) => {
            Error::corrupt(format!("column {col} holds an unexpected {ty} value"))
        }
        rusqlite::Error::InvalidColumnType(col, name, ty) => Error::corrupt(format!(
            "column {col} ({name}) holds an unexpected {ty} value"
        )),
        rusqlite::Error::IntegralValueOutOfRange(col, _) => {
            Error::corrupt(format!("column {col} holds an out-of-range integer"))
        }
        other => Error::backend(BACKEND, other.to_string()),
    }
}

fn by_code(e: ffi::Error, text: String) -> Error {
    match e.code {
        ErrorCode::DatabaseBusy => Error::retryable("SQLITE_BUSY"),
        ErrorCode::DatabaseLocked => Error::retryable("SQLITE_LOCKED"),
        ErrorCode::ConstraintViolation
            if e.extended_code == ffi::SQLITE_CONSTRAINT_UNIQUE
                || e.extended_code == ffi::SQLITE_CONSTRAINT_PRIMARYKEY =>
        {
            Error::conflict(text)
        }
        ErrorCode::NotADatabase => {
            Error::corrupt("the file is not a SQLite database (SQLITE_NOTADB)")
        }
        ErrorCode::DatabaseCorrupt => Error::corrupt(format!(
            "the database file is damaged (SQLITE_CORRUPT: {text})"
        )),
        _ => Error::backend(BACKEND, format!("{text} (code {})", e.extended_code)),
    }
}

/// A stored value that cairn cannot have written (wrong id length, negative seq, …).
pub(crate) fn corrupt(detail: impl Into<String>) -> Error {
    Error::corrupt(detail.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(ffi::Error::new(code), Some("msg".into()))
    }

    #[test]
    fn codes_map_by_meaning() {
        assert!(map(failure(ffi::SQLITE_BUSY)).is_retryable());
        assert!(map(failure(ffi::SQLITE_LOCKED)).is_retryable());
        assert!(map(failure(ffi::SQLITE_BUSY_SNAPSHOT)).is_retryable());
        assert!(map(failure(ffi::SQLITE_CONSTRAINT_UNIQUE)).is_conflict());
        assert!(map(failure(ffi::SQLITE_CONSTRAINT_PRIMARYKEY)).is_conflict());
        assert!(matches!(
            map(failure(ffi::SQLITE_CONSTRAINT_FOREIGNKEY)),
            Error::Backend {
                backend: "sqlite",
                ..
            }
        ));
        assert!(matches!(
            map(failure(ffi::SQLITE_NOTADB)),
            Error::Corrupt { .. }
        ));
        assert!(matches!(
            map(failure(ffi::SQLITE_CORRUPT)),
            Error::Corrupt { .. }
        ));
        assert!(matches!(
            map(failure(ffi::SQLITE_IOERR)),
            Error::Backend {
                backend: "sqlite",
                ..
            }
        ));
    }
}

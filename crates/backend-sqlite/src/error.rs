//! Mapping rusqlite errors onto cairn's meaning-based [`Error`].
//!
//! Details carry SQLite's code and its message, which names tables and columns but never row
//! values, so no payload or key can leak into an error.

use cairn_core::Error;
use rusqlite::ffi;
use rusqlite::ErrorCode;

const BACKEND: &str = "sqlite";

/// Maps a rusqlite error by meaning, from SQLite's (extended) result code alone:
/// busy/locked → [`Error::Retryable`], a unique or primary-key violation → [`Error::Conflict`],
/// a damaged or foreign file → [`Error::Corrupt`], anything else → [`Error::Backend`]. The
/// rusqlite error stays reachable through [`std::error::Error::source`], except for conversion
/// failures, whose text can quote a stored or bound value.
pub(crate) fn map(err: rusqlite::Error) -> Error {
    match &err {
        rusqlite::Error::SqliteFailure(e, msg) => {
            let text = msg.clone().unwrap_or_else(|| e.to_string());
            by_code(*e, text).with_source(err)
        }
        // The statement text is left out of the detail: it would spread the message over many
        // lines. The source keeps it.
        rusqlite::Error::SqlInputError { error, msg, .. } => {
            by_code(*error, msg.clone()).with_source(err)
        }
        // Conversion errors can quote a stored value; name the kind of failure only, and keep
        // the driver error (which would print the value) out of the chain.
        rusqlite::Error::FromSqlConversionFailure(col, ty, _) => {
            Error::corrupt(format!("column {col} holds an unexpected {ty} value"))
        }
        rusqlite::Error::InvalidColumnType(col, name, ty) => Error::corrupt(format!(
            "column {col} ({name}) holds an unexpected {ty} value"
        )),
        rusqlite::Error::IntegralValueOutOfRange(col, _) => {
            Error::corrupt(format!("column {col} holds an out-of-range integer"))
        }
        rusqlite::Error::ToSqlConversionFailure(_) => {
            Error::backend(BACKEND, "a value cannot be bound to a statement parameter")
        }
        other => Error::backend(BACKEND, other.to_string()).with_source(err),
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
    use std::error::Error as _;

    /// The rusqlite error behind a mapped error, and its extended code.
    fn driver_code(e: &Error) -> Option<i32> {
        e.source()?
            .downcast_ref::<rusqlite::Error>()?
            .sqlite_error()
            .map(|f| f.extended_code)
    }

    #[test]
    fn driver_errors_stay_reachable_as_the_source() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, u TEXT UNIQUE)")
            .unwrap();
        conn.execute("INSERT INTO t (k, u) VALUES (1, 'a')", [])
            .unwrap();
        let unique = map(conn
            .execute("INSERT INTO t (k, u) VALUES (2, 'a')", [])
            .unwrap_err());
        assert!(unique.is_conflict(), "{unique}");
        assert_eq!(driver_code(&unique), Some(ffi::SQLITE_CONSTRAINT_UNIQUE));

        let missing = map(conn.prepare("SELECT * FROM nowhere").unwrap_err());
        assert!(matches!(missing, Error::Backend { .. }), "{missing}");
        assert_eq!(driver_code(&missing), Some(ffi::SQLITE_ERROR));

        assert_eq!(
            driver_code(&map(failure(ffi::SQLITE_BUSY_SNAPSHOT))),
            Some(ffi::SQLITE_BUSY_SNAPSHOT)
        );
    }

    #[test]
    fn conversion_errors_neither_quote_the_value_nor_chain_it() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let err = conn
            .query_row("SELECT 98765432123", [], |r| r.get::<_, u8>(0))
            .unwrap_err();
        assert!(
            err.to_string().contains("98765432123"),
            "the driver quotes it: {err}"
        );
        let mapped = map(err);
        assert!(matches!(mapped, Error::Corrupt { .. }), "{mapped}");
        assert!(!mapped.to_string().contains("98765432123"), "{mapped}");
        assert!(mapped.source().is_none());
    }

    #[test]
    fn classification_reads_the_code_never_the_message() {
        let lying = |code: i32, text: &str| {
            rusqlite::Error::SqliteFailure(ffi::Error::new(code), Some(text.into()))
        };
        assert!(!map(lying(ffi::SQLITE_IOERR, "database is locked")).is_retryable());
        assert!(!map(lying(
            ffi::SQLITE_CONSTRAINT_CHECK,
            "UNIQUE constraint failed"
        ))
        .is_conflict());
        assert!(map(lying(ffi::SQLITE_BUSY, "something else entirely")).is_retryable());
    }

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

//! Mapping rusqlite errors onto cairn's meaning-based [`Error`].
//!
//! A mapped error's detail says what cairn knows: SQLite's result code (its name and the
//! extended code) and, for errors met at open, the file. SQLite's message (which names tables
//! and columns, or quotes the statement of a syntax error) stays in the rusqlite error kept as
//! the [`source`](std::error::Error::source), so [`Error::report`] prints it once, after the
//! detail. A rusqlite error whose text can quote a stored or bound value (a conversion
//! failure) is not kept: the detail names the column and the kind of failure only, so no
//! payload or key can leak into an error.

use cairn_core::Error;
use rusqlite::ffi;
use rusqlite::ErrorCode;

const BACKEND: &str = "sqlite";

/// Maps a rusqlite error by meaning, from SQLite's (extended) result code alone:
/// busy/locked → [`Error::Retryable`], a unique or primary-key violation → [`Error::Conflict`],
/// a full disk → [`Error::StorageFull`], a damaged or foreign file → [`Error::Corrupt`],
/// anything else → [`Error::Backend`]. The
/// rusqlite error stays reachable through [`std::error::Error::source`] and out of the
/// detail, except for conversion failures, whose text can quote a stored or bound value.
pub(crate) fn map(err: rusqlite::Error) -> Error {
    match &err {
        rusqlite::Error::SqliteFailure(e, _) | rusqlite::Error::SqlInputError { error: e, .. } => {
            by_code(*e).with_source(err)
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
        rusqlite::Error::QueryReturnedNoRows => {
            Error::backend(BACKEND, "a query that expects a row returned none").with_source(err)
        }
        _ => Error::backend(BACKEND, "rusqlite refused the call (not an engine error)")
            .with_source(err),
    }
}

fn by_code(e: ffi::Error) -> Error {
    let code = e.extended_code;
    match e.code {
        ErrorCode::DatabaseBusy => Error::retryable("SQLITE_BUSY"),
        ErrorCode::DatabaseLocked => Error::retryable("SQLITE_LOCKED"),
        ErrorCode::ConstraintViolation if code == ffi::SQLITE_CONSTRAINT_UNIQUE => {
            Error::conflict(format!("SQLITE_CONSTRAINT_UNIQUE (code {code})"))
        }
        ErrorCode::ConstraintViolation if code == ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
            Error::conflict(format!("SQLITE_CONSTRAINT_PRIMARYKEY (code {code})"))
        }
        // SQLite answers SQLITE_FULL when the file system is out of space (a short write or
        // ENOSPC) or the store reached `max_page_count`.
        ErrorCode::DiskFull => Error::storage_full(format!("SQLITE_FULL (code {code})")),
        ErrorCode::NotADatabase => {
            Error::corrupt("the file is not a SQLite database (SQLITE_NOTADB)")
        }
        ErrorCode::DatabaseCorrupt => Error::corrupt(format!(
            "the database file is damaged (SQLITE_CORRUPT, code {code})"
        )),
        _ => Error::backend(BACKEND, format!("{} (code {code})", name(code))),
    }
}

/// The name of a result code's primary code (`SQLITE_IOERR` for `SQLITE_IOERR_WRITE`).
fn name(code: i32) -> &'static str {
    match code & 0xff {
        ffi::SQLITE_ERROR => "SQLITE_ERROR",
        ffi::SQLITE_INTERNAL => "SQLITE_INTERNAL",
        ffi::SQLITE_PERM => "SQLITE_PERM",
        ffi::SQLITE_ABORT => "SQLITE_ABORT",
        ffi::SQLITE_NOMEM => "SQLITE_NOMEM",
        ffi::SQLITE_READONLY => "SQLITE_READONLY",
        ffi::SQLITE_INTERRUPT => "SQLITE_INTERRUPT",
        ffi::SQLITE_IOERR => "SQLITE_IOERR",
        ffi::SQLITE_NOTFOUND => "SQLITE_NOTFOUND",
        ffi::SQLITE_FULL => "SQLITE_FULL",
        ffi::SQLITE_CANTOPEN => "SQLITE_CANTOPEN",
        ffi::SQLITE_PROTOCOL => "SQLITE_PROTOCOL",
        ffi::SQLITE_SCHEMA => "SQLITE_SCHEMA",
        ffi::SQLITE_TOOBIG => "SQLITE_TOOBIG",
        ffi::SQLITE_CONSTRAINT => "SQLITE_CONSTRAINT",
        ffi::SQLITE_MISMATCH => "SQLITE_MISMATCH",
        ffi::SQLITE_MISUSE => "SQLITE_MISUSE",
        ffi::SQLITE_NOLFS => "SQLITE_NOLFS",
        ffi::SQLITE_AUTH => "SQLITE_AUTH",
        ffi::SQLITE_RANGE => "SQLITE_RANGE",
        _ => "SQLite error",
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
    fn the_message_leaves_the_drivers_words_to_the_report() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, u TEXT UNIQUE)")
            .unwrap();
        conn.execute("INSERT INTO t (k, u) VALUES (1, 'a')", [])
            .unwrap();
        let driver_errors = [
            conn.execute("INSERT INTO t (k, u) VALUES (2, 'a')", [])
                .unwrap_err(),
            conn.prepare("SELECT * FROM nowhere").unwrap_err(),
            rusqlite::Error::SqliteFailure(
                ffi::Error::new(ffi::SQLITE_CORRUPT),
                Some("database disk image is malformed".into()),
            ),
            rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_BUSY), None),
            rusqlite::Error::InvalidParameterName(":nope".into()),
        ];
        for driver in driver_errors {
            let words = driver.to_string();
            let e = map(driver);
            let text = e.to_string();
            assert!(!text.contains(&words), "{text} repeats {words}");
            let report = e.report().to_string();
            assert_eq!(report.matches(&words).count(), 1, "{report}");
            assert!(report.starts_with(&text), "{report}");
        }
        let unique = map(conn
            .execute("INSERT INTO t (k, u) VALUES (3, 'a')", [])
            .unwrap_err());
        assert_eq!(
            unique.to_string(),
            "uniqueness conflict: SQLITE_CONSTRAINT_UNIQUE (code 2067)"
        );
        assert!(
            unique
                .report()
                .to_string()
                .contains("UNIQUE constraint failed: t.u"),
            "{}",
            unique.report()
        );
        let missing = map(conn.prepare("SELECT * FROM nowhere").unwrap_err());
        assert_eq!(missing.to_string(), "sqlite error: SQLITE_ERROR (code 1)");
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
    fn a_store_out_of_pages_is_storage_full() {
        // `max_page_count` makes SQLite answer SQLITE_FULL as a full file system does.
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (b BLOB)").unwrap();
        let pages: i64 = conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        conn.pragma_update(None, "max_page_count", pages + 2)
            .unwrap();
        let err = conn
            .execute("INSERT INTO t VALUES (zeroblob(1000000))", [])
            .unwrap_err();
        let e = map(err);
        assert!(e.is_storage_full(), "{e:?}");
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("SQLITE_FULL (code 13)"), "{e}");
        assert_eq!(driver_code(&e), Some(ffi::SQLITE_FULL));
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

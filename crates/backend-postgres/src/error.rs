//! Mapping sqlx / Postgres errors onto [`cairn_core::Error`] by meaning.
//!
//! Server errors are classified by SQLSTATE alone, never by message text: the server localizes
//! its messages (`lc_messages`), so text is no basis for a decision. The driver error is kept
//! as the mapped error's source, so `std::error::Error::source()` reaches the `sqlx::Error`.
//!
//! Messages carry SQLSTATEs, constraint names and the server's primary message only: never a
//! connection string, a DETAIL line (which can quote row data) or a payload.

use cairn_core::Error;

const BACKEND: &str = "postgres";

/// Classifies a driver error, keeping it as the source.
pub(crate) fn map(e: sqlx::Error) -> Error {
    let mapped = match &e {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            classify_sqlstate(&code, db.message(), db.constraint())
        }
        sqlx::Error::Io(io) => Error::unavailable(format!("I/O error talking to the server: {io}")),
        sqlx::Error::Tls(_) => Error::unavailable("TLS error talking to the server"),
        sqlx::Error::PoolTimedOut => {
            Error::unavailable("timed out waiting for a pooled connection")
        }
        sqlx::Error::PoolClosed => Error::unavailable("the connection pool is closed"),
        sqlx::Error::WorkerCrashed => Error::unavailable("the connection worker crashed"),
        // The driver's configuration errors may quote parts of the URL: say what to fix instead,
        // and keep no source (InvalidInput has none), so nothing can print the URL later.
        sqlx::Error::Configuration(_) => {
            return Error::invalid(
                "postgres connection options",
                "the connection URL could not be parsed; expected postgres://user@host:port/db",
            )
        }
        sqlx::Error::ColumnDecode { index, .. } => Error::corrupt(format!(
            "column {index} of a cairn table has an unexpected value"
        )),
        sqlx::Error::Decode(_) => {
            Error::corrupt("a cairn table holds a value of an unexpected type")
        }
        other => Error::backend(BACKEND, other.to_string()),
    };
    mapped.with_source(e)
}

/// Classifies a server error by its SQLSTATE; `message` and `constraint` only go into the
/// text.
///
/// `57014` (query_canceled) is retryable: the statement was cancelled and its transaction
/// rolled back, so nothing was written and running the whole operation again is safe. The code
/// is the same for a `statement_timeout` and for an operator's `pg_cancel_backend`, and only
/// the (localized) message tells them apart, so both are treated alike; a caller that wants an
/// operator's cancel to stick stops retrying after a bound, as it must for every retryable
/// error.
pub(crate) fn classify_sqlstate(code: &str, message: &str, constraint: Option<&str>) -> Error {
    match code {
        // serialization_failure, deadlock_detected, lock_not_available (lock_timeout, NOWAIT),
        // query_canceled (statement_timeout or a cancel request).
        "40001" | "40P01" | "55P03" | "57014" => Error::retryable(format!("SQLSTATE {code}")),
        "23505" => Error::conflict(match constraint {
            Some(c) => format!("unique constraint {c} (SQLSTATE 23505)"),
            None => "unique violation (SQLSTATE 23505)".into(),
        }),
        // admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
        "57P01" | "57P02" | "57P03" | "53300" => Error::unavailable(format!(
            "server refused or dropped the connection (SQLSTATE {code})"
        )),
        c if c.starts_with("08") => {
            Error::unavailable(format!("connection exception (SQLSTATE {code})"))
        }
        _ => Error::backend(BACKEND, format!("{message} (SQLSTATE {code})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn serialization_class_lock_timeouts_and_cancels_are_retryable() {
        for code in ["40001", "40P01", "55P03", "57014"] {
            assert!(classify_sqlstate(code, "x", None).is_retryable(), "{code}");
        }
    }

    #[test]
    fn the_message_text_never_changes_the_classification() {
        // The same code under any message (a localized server, a user cancel) classifies alike,
        // and a message that mentions a timeout does not make another code retryable.
        for message in [
            "canceling statement due to statement timeout",
            "canceling statement due to user request",
            "Abbruch der Anweisung wegen Zeitüberschreitung",
        ] {
            assert!(classify_sqlstate("57014", message, None).is_retryable());
            assert!(!classify_sqlstate("42P01", message, None).is_retryable());
            assert!(!classify_sqlstate("XX000", message, None).is_retryable());
        }
    }

    #[test]
    fn unique_violation_is_a_conflict_naming_the_constraint() {
        let e = classify_sqlstate("23505", "duplicate key", Some("epoch_space_seq"));
        assert!(e.is_conflict());
        assert!(e.to_string().contains("epoch_space_seq"));
    }

    #[test]
    fn connection_trouble_is_unavailable_and_the_rest_is_backend() {
        assert!(matches!(
            classify_sqlstate("08006", "x", None),
            Error::Unavailable { .. }
        ));
        assert!(matches!(
            map(sqlx::Error::PoolTimedOut),
            Error::Unavailable { .. }
        ));
        assert!(matches!(
            classify_sqlstate("42P01", "relation missing", None),
            Error::Backend {
                backend: "postgres",
                ..
            }
        ));
    }

    #[test]
    fn the_driver_error_is_the_source() {
        let e = map(sqlx::Error::PoolClosed);
        let source = e.source().expect("a source");
        assert!(matches!(
            source.downcast_ref::<sqlx::Error>(),
            Some(sqlx::Error::PoolClosed)
        ));
    }
}

//! Mapping sqlx / Postgres errors onto [`cairn_core::Error`] by meaning.
//!
//! Messages carry SQLSTATEs, constraint names and the server's primary message only: never a
//! connection string, a DETAIL line (which can quote row data) or a payload.

use cairn_core::Error;

const BACKEND: &str = "postgres";

/// Classifies a driver error.
pub(crate) fn map_sqlx(e: sqlx::Error) -> Error {
    match e {
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
        // The driver's configuration errors may quote parts of the URL: say what to fix instead.
        sqlx::Error::Configuration(_) => Error::invalid(
            "postgres connection options",
            "the connection URL could not be parsed; expected postgres://user@host:port/db",
        ),
        sqlx::Error::ColumnDecode { index, .. } => Error::corrupt(format!(
            "column {index} of a cairn table has an unexpected value"
        )),
        sqlx::Error::Decode(_) => {
            Error::corrupt("a cairn table holds a value of an unexpected type")
        }
        other => Error::backend(BACKEND, other.to_string()),
    }
}

/// Classifies a server error by SQLSTATE.
pub(crate) fn classify_sqlstate(code: &str, message: &str, constraint: Option<&str>) -> Error {
    match code {
        // serialization_failure, deadlock_detected, lock_not_available (lock_timeout, NOWAIT)
        "40001" | "40P01" | "55P03" => Error::retryable(format!("SQLSTATE {code}")),
        // query_canceled: retryable only when a timeout cancelled it, not a user or admin.
        "57014" if message.contains("timeout") => {
            Error::retryable(format!("SQLSTATE {code}, {message}"))
        }
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

    #[test]
    fn serialization_class_and_lock_timeouts_are_retryable() {
        for code in ["40001", "40P01", "55P03"] {
            assert!(classify_sqlstate(code, "x", None).is_retryable(), "{code}");
        }
        let st = "canceling statement due to statement timeout";
        assert!(classify_sqlstate("57014", st, None).is_retryable());
        let user = "canceling statement due to user request";
        assert!(!classify_sqlstate("57014", user, None).is_retryable());
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
            map_sqlx(sqlx::Error::PoolTimedOut),
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
}

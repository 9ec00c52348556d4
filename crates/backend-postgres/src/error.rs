//! Mapping sqlx / Postgres errors onto [`cairn_core::Error`] by meaning.
//!
//! Server errors are classified by SQLSTATE alone, never by message text: the server localizes
//! its messages (`lc_messages`), so text is no basis for a decision.
//!
//! A mapped error's detail says what cairn knows: the SQLSTATE, the constraint, what failed. The
//! driver's own words (the server's primary message, an I/O error) stay in the `sqlx::Error`
//! kept as the mapped error's source, so `std::error::Error::source()` reaches it and
//! [`Error::report`] prints it once, after the detail. Neither holds a connection string, a
//! DETAIL line (which can quote row data) or a payload: a driver error whose text could —
//! a configuration error (it can quote the URL, password included), a decode error (it can
//! quote a stored value) — is not kept as the source, and the detail says what failed instead.
//! A TLS error is kept (see `crate::tls::classify`): it names the server's certificate and the
//! host, which the operator needs to fix it, and never a password or a key.

use cairn_core::Error;

const BACKEND: &str = "postgres";

/// A connection of its own that the server did not complete within the acquire timeout (it
/// accepted the TCP connection but never answered, or answered too slowly).
pub(crate) fn connect_timed_out() -> Error {
    Error::unavailable("timed out connecting to the Postgres server")
}

/// Rolls `tx` back now and answers `e`: the error path of a transaction that may hold locks.
/// sqlx rolls a dropped transaction back only when its connection returns to the pool, from a
/// spawned task, so a lock taken by a failed operation (a row's `FOR UPDATE`, a space's or a
/// supersede group's advisory lock) could outlive the call: a claim right after an operator's
/// refused retry ran on another connection and `SKIP LOCKED` skipped the still-locked row.
pub(crate) async fn rolled_back(tx: sqlx::Transaction<'_, sqlx::Postgres>, e: Error) -> Error {
    // A failed ROLLBACK leaves the connection broken; sqlx closes it on return, which also
    // releases the locks.
    let _ = tx.rollback().await;
    e
}

/// Classifies a driver error, keeping it as the source when its text holds no secret or value.
pub(crate) fn map(e: sqlx::Error) -> Error {
    // A failed TLS setup (a certificate the server or cairn refused, a server without TLS)
    // says what to do; the driver's error names certificates and hosts, no secret: kept.
    if let Some(tls) = crate::tls::classify(&e) {
        return tls.with_source(e);
    }
    let mapped = match &e {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            classify_sqlstate(&code, db.constraint())
        }
        sqlx::Error::Io(_) => Error::unavailable("I/O error talking to the server"),
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
        // Decode errors can quote the stored value: no source (as on SQLite).
        sqlx::Error::ColumnDecode { index, .. } => {
            return Error::corrupt(format!(
                "column {index} of a cairn table has an unexpected value"
            ))
        }
        sqlx::Error::Decode(_) => {
            return Error::corrupt("a cairn table holds a value of an unexpected type")
        }
        // Encode errors can quote the value being bound: no source.
        sqlx::Error::Encode(_) => {
            return Error::backend(BACKEND, "a value cannot be bound to a statement parameter")
        }
        sqlx::Error::RowNotFound => {
            Error::backend(BACKEND, "a query that expects a row returned none")
        }
        sqlx::Error::Protocol(_) => Error::backend(
            BACKEND,
            "the server sent a message the driver did not expect",
        ),
        _ => Error::backend(BACKEND, "the driver refused the call (not a server error)"),
    };
    mapped.with_source(e)
}

/// What to do when the server behaves like a pooler in transaction mode.
pub(crate) const UNDECLARED_POOLER: &str =
    "the connection's prepared statements or session moved between server sessions: a \
     connection pooler in transaction mode (PgBouncer) sits in front of the server; add \
     `cairn_pooler=transaction` to the database URL (docs/OPERATIONS.md, \"Behind PgBouncer\")";

/// Classifies a server error by its SQLSTATE; `constraint` only goes into the text (the
/// server's message is left to the driver error the caller keeps as the source).
///
/// `57014` (query_canceled) is retryable: the statement was cancelled and its transaction
/// rolled back, so nothing was written and running the whole operation again is safe. The code
/// is the same for a `statement_timeout` and for an operator's `pg_cancel_backend`, and only
/// the (localized) message tells them apart, so both are treated alike; a caller that wants an
/// operator's cancel to stick stops retrying after a bound, as it must for every retryable
/// error.
pub(crate) fn classify_sqlstate(code: &str, constraint: Option<&str>) -> Error {
    match code {
        // serialization_failure, deadlock_detected, lock_not_available (lock_timeout, NOWAIT),
        // query_canceled (statement_timeout or a cancel request).
        "40001" | "40P01" | "55P03" | "57014" => Error::retryable(format!("SQLSTATE {code}")),
        "23505" => Error::conflict(match constraint {
            Some(c) => format!("unique constraint {c} (SQLSTATE 23505)"),
            None => "unique violation (SQLSTATE 23505)".into(),
        }),
        // disk_full: the server could not extend a file; the statement's transaction was
        // rolled back.
        "53100" => Error::storage_full(format!("SQLSTATE {code}")),
        // admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
        "57P01" | "57P02" | "57P03" | "53300" => Error::unavailable(format!(
            "server refused or dropped the connection (SQLSTATE {code})"
        )),
        // duplicate_prepared_statement, invalid_sql_statement_name: cairn's named statements
        // met another connection's, or went missing, which is what a pooler in transaction
        // mode does to a store not declared to be behind one (crate::pooler).
        "42P05" | "26000" => {
            Error::backend(BACKEND, format!("SQLSTATE {code}: {UNDECLARED_POOLER}"))
        }
        c if c.starts_with("08") => {
            Error::unavailable(format!("connection exception (SQLSTATE {code})"))
        }
        _ => Error::backend(
            BACKEND,
            match constraint {
                Some(c) => format!("SQLSTATE {code} on constraint {c}"),
                None => format!("SQLSTATE {code}"),
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection as _;
    use std::error::Error as _;

    #[test]
    fn serialization_class_lock_timeouts_and_cancels_are_retryable() {
        for code in ["40001", "40P01", "55P03", "57014"] {
            assert!(classify_sqlstate(code, None).is_retryable(), "{code}");
        }
        // Other codes are not, whatever the server said about them (the message is never
        // read: a localized server, a user cancel and a statement timeout read alike).
        for code in ["42P01", "XX000", "23503"] {
            assert!(!classify_sqlstate(code, None).is_retryable(), "{code}");
        }
    }

    #[test]
    fn a_full_disk_is_storage_full_and_nothing_else_is() {
        let e = classify_sqlstate("53100", None);
        assert!(e.is_storage_full(), "{e:?}");
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("SQLSTATE 53100"), "{e}");
        // Out of memory, too many connections and a configuration limit are other troubles.
        for code in ["53200", "53300", "53400"] {
            assert!(!classify_sqlstate(code, None).is_storage_full(), "{code}");
        }
    }

    #[test]
    fn unique_violation_is_a_conflict_naming_the_constraint() {
        let e = classify_sqlstate("23505", Some("epoch_space_seq"));
        assert!(e.is_conflict());
        assert!(e.to_string().contains("epoch_space_seq"));
    }

    #[test]
    fn connection_trouble_is_unavailable_and_the_rest_is_backend() {
        assert!(matches!(
            classify_sqlstate("08006", None),
            Error::Unavailable { .. }
        ));
        assert!(matches!(
            map(sqlx::Error::PoolTimedOut),
            Error::Unavailable { .. }
        ));
        assert!(matches!(
            classify_sqlstate("42P01", None),
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

    /// The error the test server returns for `sql`.
    async fn server_error(conn: &mut sqlx::PgConnection, sql: &str) -> sqlx::Error {
        sqlx::query(sql).execute(conn).await.unwrap_err()
    }

    #[tokio::test]
    async fn the_message_leaves_the_drivers_words_to_the_report() {
        let url = crate::testkit::test_server_url()
            .await
            .unwrap_or_else(|msg| panic!("{msg}"));
        let mut conn = sqlx::PgConnection::connect(&url)
            .await
            .expect("connect to the test server");
        let c = &mut conn;
        sqlx::query("CREATE TEMP TABLE cairn_error_test (k int PRIMARY KEY)")
            .execute(&mut *c)
            .await
            .unwrap();
        let insert = "INSERT INTO cairn_error_test VALUES (1)";
        sqlx::query(insert).execute(&mut *c).await.unwrap();
        let duplicate = server_error(c, insert).await;
        let missing = server_error(c, "SELECT * FROM cairn_error_test_nowhere").await;
        let driver_errors = [
            server_error(c, insert).await,
            server_error(c, "SELECT * FROM cairn_error_test_nowhere").await,
            server_error(c, "SELEC 1").await,
            sqlx::Error::Io(std::io::Error::other("connection reset by peer")),
            sqlx::Error::Protocol("expected ParameterStatus".into()),
            sqlx::Error::RowNotFound,
            sqlx::Error::PoolClosed,
        ];
        let _ = conn.close().await;

        let server_message = |e: &sqlx::Error| e.as_database_error().unwrap().message().to_owned();
        let words = server_message(&duplicate);
        let conflict = map(duplicate);
        assert_eq!(
            conflict.to_string(),
            "uniqueness conflict: unique constraint cairn_error_test_pkey (SQLSTATE 23505)"
        );
        assert!(conflict.report().to_string().contains(&words));
        let words = server_message(&missing);
        let backend = map(missing);
        assert_eq!(backend.to_string(), "postgres error: SQLSTATE 42P01");
        assert!(backend.report().to_string().contains(&words));

        for driver in driver_errors {
            let words = driver.to_string();
            let e = map(driver);
            let text = e.to_string();
            assert!(!text.contains(&words), "{text} repeats {words}");
            let report = e.report().to_string();
            assert_eq!(report.matches(&words).count(), 1, "{report}");
            assert!(report.starts_with(&text), "{report}");
        }
    }

    #[test]
    fn a_driver_error_that_can_quote_a_secret_or_a_value_is_not_kept() {
        let secret = "postgres://app:s3cret@db.internal.example/app";
        for driver in [
            sqlx::Error::Configuration(format!("invalid port in {secret}").into()),
            sqlx::Error::Decode(format!("invalid value {secret}").into()),
            sqlx::Error::ColumnDecode {
                index: "2".into(),
                source: format!("invalid value {secret}").into(),
            },
            sqlx::Error::Encode(format!("value {secret} out of range").into()),
        ] {
            let e = map(driver);
            assert!(e.source().is_none(), "{e:?}");
            let report = e.report().to_string();
            for part in ["s3cret", "db.internal"] {
                assert!(!report.contains(part), "{report}");
            }
        }
    }
}

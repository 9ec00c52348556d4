//! [`Checker`]: the check's one connection to the throwaway store, with the conversions every
//! step of the check uses (driver errors, catalog columns, the savepoint each checked statement
//! runs in). A leaf: it imports no sibling but the statements, so the steps (`engine`,
//! `capture`, `snapshot`, `down`) all build on it.

use cairn_core::Error;
use cairn_migrate::MigrateError;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Postgres, Row};

use super::sql;
use crate::config::SchemaName;
use crate::error::map;

/// The check of one revision on one connection to the throwaway store.
pub(super) struct Checker<'a> {
    pub(super) conn: &'a mut PgConnection,
    pub(super) schema: &'a SchemaName,
}

pub(super) fn to_migrate(e: sqlx::Error) -> MigrateError {
    MigrateError::Store(map(e))
}

/// Column `i` of a catalog row the check's own query shaped.
pub(super) fn col<'r, T>(row: &'r PgRow, i: usize) -> Result<T, MigrateError>
where
    T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
{
    row.try_get(i).map_err(|e| {
        MigrateError::Store(Error::backend(
            "postgres",
            format!("reading the catalog: {e}"),
        ))
    })
}

impl Checker<'_> {
    pub(super) async fn exec(&mut self, statement: &str) -> Result<(), MigrateError> {
        sqlx::query(statement)
            .persistent(false)
            .execute(&mut *self.conn)
            .await
            .map_err(to_migrate)?;
        Ok(())
    }

    /// Opens the savepoint the next checked statement runs in.
    pub(super) async fn savepoint(&mut self) -> Result<(), MigrateError> {
        self.exec(sql::SAVEPOINT).await
    }

    /// Ends the savepoint the last checked statement ran in: released after a success
    /// (`ran_ok`), rolled back to after a failure. An error means the statement ended the
    /// checked transaction itself (the savepoint is gone).
    pub(super) async fn end_savepoint(&mut self, ran_ok: bool) -> Result<(), sqlx::Error> {
        let end = if ran_ok {
            sql::RELEASE
        } else {
            sql::ROLLBACK_TO
        };
        sqlx::query(end)
            .persistent(false)
            .execute(&mut *self.conn)
            .await
            .map(|_| ())
    }
}

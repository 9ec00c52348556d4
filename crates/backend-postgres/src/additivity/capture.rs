//! Capture: the log table, the event triggers (`ddl_command_end`, `sql_drop`) and the
//! statement-level triggers on every existing table, and reading what they logged.

use std::collections::BTreeSet;

use super::checker::{col, to_migrate, Checker};
use super::sql;
use cairn_migrate::MigrateError;

/// One row of the capture log: a DDL command, a dropped object or a write to an existing table.
pub(super) struct LogRow {
    pub(super) id: i64,
    pub(super) source: String,
    pub(super) tag: String,
    pub(super) classid: Option<String>,
    pub(super) objid: Option<i64>,
    pub(super) objsubid: Option<i32>,
    pub(super) otype: Option<String>,
    pub(super) ident: Option<String>,
    pub(super) rel: Option<i64>,
    /// The schema of the object a DDL command or a drop touched, as the event trigger reports
    /// it (none for objects outside schemas).
    pub(super) schema: Option<String>,
}

impl Checker<'_> {
    /// Creates the log table, the trigger functions and the commit guard (before the
    /// snapshot's row digests, which use the helper functions).
    pub(super) async fn create_capture_objects(&mut self) -> Result<(), MigrateError> {
        for statement in sql::capture_objects(self.schema) {
            self.exec(&statement).await?;
        }
        Ok(())
    }

    /// Installs the statement triggers on the existing tables `oids`, then the event triggers
    /// (last, so the capture's own DDL is not logged).
    pub(super) async fn install_capture(&mut self, oids: &[i64]) -> Result<(), MigrateError> {
        sqlx::query(&sql::install_dml(self.schema))
            .bind(oids)
            .bind(sql::dml_trigger_name(self.schema))
            .execute(&mut *self.conn)
            .await
            .map_err(to_migrate)?;
        for statement in sql::event_triggers(self.schema) {
            self.exec(&statement).await?;
        }
        Ok(())
    }

    /// The relations outside the throwaway schema this session holds locks on, with the mode.
    pub(super) async fn outside_locks(
        &mut self,
    ) -> Result<BTreeSet<(String, String)>, MigrateError> {
        let names: Vec<(String, String)> = sqlx::query_as(sql::OUTSIDE_LOCKS)
            .bind(self.schema.as_str())
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?;
        Ok(names.into_iter().collect())
    }

    /// The log rows after id `after`, oldest first.
    pub(super) async fn read_log(&mut self, after: i64) -> Result<Vec<LogRow>, MigrateError> {
        let prefix = format!("{}.", self.schema.as_str());
        let read_log = sql::read_log(self.schema);
        let rows = sqlx::query(&read_log)
            .bind(after)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?;
        let log: Vec<LogRow> = rows
            .iter()
            .map(|r| {
                Ok(LogRow {
                    id: col(r, 0)?,
                    source: col(r, 1)?,
                    tag: col::<Option<String>>(r, 2)?.unwrap_or_default(),
                    classid: col(r, 3)?,
                    objid: col(r, 4)?,
                    objsubid: col(r, 5)?,
                    otype: col(r, 6)?,
                    // Identities name the throwaway schema, which means nothing in a report.
                    ident: col::<Option<String>>(r, 7)?.map(|i| i.replace(&prefix, "")),
                    rel: col(r, 8)?,
                    schema: col(r, 9)?,
                })
            })
            .collect::<Result<_, MigrateError>>()?;
        Ok(log)
    }
}

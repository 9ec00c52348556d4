//! The executed additivity check on PostgreSQL: [`PgAdditivity`], cairn-migrate's
//! [`AdditivityEngine`] for this backend.
//!
//! One check of one revision:
//!
//! 1. A throwaway schema `cairn_add_<hex>` is built from the [`CheckTarget`]: its sets are
//!    applied in order through the lineage-aware runner (cairn's own set through the store
//!    open; an application's set after cairn's, as a service opens), the epoch log is seeded
//!    with [`cairn_migrate::additivity::seed_epoch_log`] (appends, a fork by import, a repair
//!    and a merge), and every table that is still empty (cairn's spool, an application's
//!    tables) gets one row: the first of
//!    [`cairn_migrate::additivity::synth::candidate_rows`] it accepts (NOT NULL honoured; enum
//!    labels, CHECK literals and partition bounds as hints). A table that refuses them all
//!    stays empty: its definition is still checked, its rows and old-column writes cannot be.
//!    Old-column writes never name a generated or identity-always column, except that the
//!    row deleted and re-inserted keeps its identity-always values (`OVERRIDING SYSTEM
//!    VALUE`), so rows that reference it still hold.
//! 2. On one connection, in one transaction that is always rolled back: the existing tables'
//!    catalog rows (columns with types, collations, nullability, defaults, generation and
//!    storage; constraints; indexes; triggers; table options, privileges and file node) and a
//!    digest of their rows are read, then capture is installed — an event trigger on
//!    `ddl_command_end` (`pg_event_trigger_ddl_commands()`), one on `sql_drop`
//!    (`pg_event_trigger_dropped_objects()`), and a statement-level trigger for INSERT, UPDATE,
//!    DELETE and TRUNCATE on every existing table, all enabled ALWAYS so a migration that sets
//!    `session_replication_role` cannot blind them. Event triggers are database-wide, but
//!    created in a transaction that never commits they are invisible to every other session;
//!    a deferred constraint trigger makes a `COMMIT` issued by the migration itself fail.
//! 3. Each statement of the revision runs in a savepoint, as the runner runs it; a failing
//!    statement is a [`Rule::Failed`] violation (VACUUM and other statements that cannot run in
//!    a transaction fail here too) and the check goes on with the rest.
//! 4. The captured commands are judged per statement (an `ALTER TABLE` on an existing table is an
//!    ADD COLUMN only when that statement's catalog change is new columns and nothing else), then
//!    the final catalog and rows are compared with the snapshot, and an UPDATE and a
//!    DELETE-and-INSERT naming only the old columns are run on one seeded row of each table.
//! 5. Reaching past the store is a violation of its own ([`Rule::OutsideStore`]): a statement
//!    whose DDL touched an object in another schema (the event triggers report the object's
//!    schema), or that took a lock on a relation in another schema (a read, a write, an ALTER:
//!    `pg_locks` of the session, compared before and after each statement). The rollback undoes
//!    what it did there, but it held those locks on live tables while it ran.
//!
//! What this engine cannot observe: commands event triggers do not report (on PostgreSQL 15:
//! `REINDEX`, `CLUSTER`, `LOCK`, `SET`, `NOTIFY`, and commands on shared objects — roles,
//! databases, tablespaces); a rewritten table or index is still caught by its changed file
//! node. `GRANT`/`REVOKE` are reported without the object they touch, so they are flagged for
//! review wherever they point. Sequence advances (`nextval`, `setval`) are not writes a trigger
//! sees. Effects that leave the database's transaction are not seen and not undone
//! (`dblink_exec`, `COPY … TO PROGRAM`, `pg_terminate_backend`): run the check against a
//! scratch server, never production. And, like every engine of the check, it cannot see what
//! rows mean to older code nor side effects outside SQL.
//!
//! Stricter than needed, on purpose: any rewrite of an existing table or index (`CLUSTER`, a
//! column type change) is a rebuild; `COMMENT`, `GRANT` and `CREATE RULE` on an existing table
//! are flagged for review; `SET CONSTRAINTS ALL IMMEDIATE` fires the commit guard and fails; a
//! statement running longer than 60 s fails.

mod build;
mod capture;
mod checker;
mod down;
mod engine;
mod judge;
mod lock_sql;
mod locks;
mod probe;
pub(crate) mod scratch;
mod snapshot;
mod sql;

use std::future::Future;

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::{scratch_name, Error};
use cairn_migrate::additivity::{AdditivityEngine, CheckTarget, LockMeasurement, Violation};
use cairn_migrate::{MigrateError, Revision};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

use crate::config::SchemaName;
use crate::error::map;
use checker::Checker;

/// The Postgres engine of the executed additivity check (see the module docs of
/// `cairn_migrate::additivity` for the rule).
///
/// Each check builds its own throwaway schema in the database `url` names and drops it
/// afterwards; the checked transaction is always rolled back. A check claims its schema with a
/// session advisory lock while it runs; an abandoned check (a panic, a dropped future) has its
/// sessions ended and its schema dropped by a guard, and schemas a killed process left behind
/// (no live claim) are dropped by the next check. The connecting role must be a
/// superuser (event triggers need it). `Debug` never prints the URL.
#[derive(Clone)]
pub struct PgAdditivity {
    url: String,
}

impl PgAdditivity {
    /// An engine that builds its throwaway stores in the database at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into() }
    }

    /// The connect options of every session of the check on `schema`: the URL's, named after
    /// the schema (`application_name`), so a check that is abandoned can find and end them.
    fn connect_options(&self, schema: &SchemaName) -> Result<PgConnectOptions, Error> {
        Ok(crate::config::connect_options_from_url(&self.url)?.application_name(schema.as_str()))
    }

    async fn connect(&self, schema: &SchemaName) -> Result<PgConnection, Error> {
        let mut conn = PgConnection::connect_with(&self.connect_options(schema)?)
            .await
            .map_err(map)?;
        sqlx::query(crate::sql::SESSION_SETUP)
            .bind(schema.as_str())
            .bind("10000")
            .execute(&mut conn)
            .await
            .map_err(map)?;
        Ok(conn)
    }

    async fn drop_schema(&self, schema: &SchemaName) -> Result<(), Error> {
        let mut conn = self.connect(schema).await?;
        let dropped = sqlx::query(&sql::drop_schema(schema))
            .persistent(false)
            .execute(&mut conn)
            .await;
        let _ = conn.close().await;
        dropped.map(|_| ()).map_err(map)
    }

    /// Runs `check` on a fresh throwaway schema, and drops the schema afterwards however the
    /// check ended: the schema is claimed for the whole check (other checks leave it alone while
    /// it is), leftovers of killed checks are dropped first, and a drop guard removes the schema
    /// if the check is abandoned. The check's error comes first, then the drop's.
    async fn in_scratch<'a, T, F, Fut>(&'a self, check: F) -> Result<T, MigrateError>
    where
        F: FnOnce(SchemaName) -> Fut,
        Fut: Future<Output = Result<T, MigrateError>> + 'a,
    {
        let schema = SchemaName::parse(&scratch_name(scratch::PREFIX))?;
        let mut owner = scratch::Owner::claim(&self.url, &schema).await?;
        let guard = scratch::DropGuard::new(self.url.clone(), schema.clone());
        owner.drop_leftovers().await;
        let outcome = check(schema.clone()).await;
        let dropped = self.drop_schema(&schema).await;
        guard.disarm();
        owner.release().await;
        let outcome = outcome?;
        dropped?;
        Ok(outcome)
    }

    async fn check_down_in(
        &self,
        schema: &SchemaName,
        target: &CheckTarget,
        revision: &Revision,
        down: &[String],
    ) -> Result<Vec<Violation>, MigrateError> {
        self.build(schema, target).await?;
        let mut conn = self.connect(schema).await?;
        let outcome = match sqlx::query(sql::BEGIN)
            .persistent(false)
            .execute(&mut conn)
            .await
        {
            Ok(_) => down::check_down(&mut conn, schema, &revision.up_postgres, down).await,
            Err(e) => Err(map(e).into()),
        };
        // Nothing of the check is ever kept.
        let _ = sqlx::query(sql::ROLLBACK)
            .persistent(false)
            .execute(&mut conn)
            .await;
        let _ = conn.close().await;
        outcome
    }

    async fn check_in(
        &self,
        schema: &SchemaName,
        target: &CheckTarget,
        revision: &Revision,
    ) -> Result<Vec<Violation>, MigrateError> {
        // Checked first, so a role that cannot run the check creates nothing.
        let mut conn = self.connect(schema).await?;
        let superuser = sqlx::query_scalar::<_, bool>(sql::IS_SUPERUSER)
            .fetch_optional(&mut conn)
            .await
            .map_err(map);
        let _ = conn.close().await;
        if superuser? != Some(true) {
            return Err(Error::backend(
                "postgres",
                "the additivity check needs a superuser role: it captures DDL with event triggers",
            )
            .into());
        }
        self.build(schema, target).await?;
        // A new session, whose search_path names the schema now that it exists.
        let mut conn = self.connect(schema).await?;
        let outcome = Checker {
            conn: &mut conn,
            schema,
        }
        .run(revision, target.no_transaction())
        .await;
        // The transaction is discarded whatever happened; closing the session would do it too.
        let _ = sqlx::query(sql::ROLLBACK)
            .persistent(false)
            .execute(&mut conn)
            .await;
        let _ = conn.close().await;
        outcome
    }
}

impl std::fmt::Debug for PgAdditivity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgAdditivity")
            .field("url", &"<redacted>")
            .finish()
    }
}

#[async_trait]
impl AdditivityEngine for PgAdditivity {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn check(
        &self,
        target: &CheckTarget,
        revision: &Revision,
    ) -> Result<Vec<Violation>, MigrateError> {
        self.in_scratch(|schema| async move { self.check_in(&schema, target, revision).await })
            .await
    }

    /// The executed lock check: see the `locks` module (a transactional revision measured
    /// after each statement in its transaction, a no-transaction revision while each statement
    /// runs).
    async fn check_locks(
        &self,
        target: &CheckTarget,
        revision: &Revision,
    ) -> Result<Option<LockMeasurement>, MigrateError> {
        self.in_scratch(
            |schema| async move { self.check_locks_in(&schema, target, revision).await },
        )
        .await
        .map(Some)
    }

    /// Up, then down, in the filled throwaway schema, in one transaction that is rolled back:
    /// see [`AdditivityEngine::check_down`]. Compared: every table, view and sequence by name,
    /// each column by its definition (type, collation, NOT NULL, default, generation,
    /// identity; not its position), constraints, indexes and triggers by their definitions,
    /// and each old table's rows over its old columns, value for value.
    async fn check_down(
        &self,
        target: &CheckTarget,
        revision: &Revision,
        down: &[String],
    ) -> Result<Vec<Violation>, MigrateError> {
        self.in_scratch(|schema| async move {
            self.check_down_in(&schema, target, revision, down).await
        })
        .await
    }
}

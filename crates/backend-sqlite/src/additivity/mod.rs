//! The SQLite engine of the executed additivity check; see [`SqliteAdditivity`].
//!
//! By concern: [`capture`] runs a revision under SQLite's trace callback; [`tokens`] recognises
//! what each traced statement is; [`snapshot`] reads the schema and the seeded rows before and
//! after; [`fill`] gives every table the seed leaves empty one synthesized row; [`judge`]
//! applies the rules on statements and schema, [`rows`] those on data, [`down`] the
//! up-then-down check; [`verdict`] collects what they find. This module builds the throwaway
//! store and runs the check.

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::Result;
use cairn_migrate::additivity::{seed_epoch_log, AdditivityEngine, CheckTarget, Rule, Violation};
use cairn_migrate::{MigrateError, Revision, Runner, CAIRN_SET};

use crate::config::SqliteOptions;
use crate::db::blocking;
use crate::error::map;
use crate::{files, SqliteMigrator, SqliteStore};

mod capture;
mod down;
mod fill;
mod judge;
mod rows;
pub(crate) mod scratch;
mod snapshot;
mod sql;
mod tokens;
mod verdict;

use capture::run_traced;
use judge::{judge_schema, judge_statements};
use rows::{judge_old_writes, judge_rows};
use scratch::Scratch;
use snapshot::{of_kind, read_schema, read_seeded};
use verdict::{one_line, Verdict};

/// The SQLite engine of cairn-migrate's executed additivity check ([`AdditivityEngine`]).
///
/// Per revision, in a fresh private temporary directory (removed afterwards, and by the next
/// check when a kill left it behind; see the `scratch` module): a throwaway store is built at the revision's parent through the lineage-aware
/// runner — for an application's set, cairn's own set first, then the application's history
/// ([`CheckTarget`]) — and seeded through cairn's real write paths
/// ([`cairn_migrate::additivity::seed_epoch_log`], shared with the Postgres engine). Every
/// table still empty then gets one row synthesized from its declared column types
/// (the first of [`cairn_migrate::additivity::synth::candidate_rows`] it accepts; NOT NULL
/// honoured, CHECK literals as hints), in creation order, so an application's tables are
/// judged on rows too; a table that refuses every candidate (a foreign key, a CHECK the hints
/// cannot satisfy) stays empty. The engine snapshots
/// `sqlite_schema` and every row, opens the production transaction (`BEGIN IMMEDIATE`),
/// applies the revision's statements one at a time while SQLite's trace callback records every
/// statement SQLite runs (trigger programs included), and requires:
/// - on an existing table, only `ALTER TABLE … ADD COLUMN` and `CREATE INDEX` (any other kind
///   is refused for its kind, whatever rows it touches; an unknown kind is flagged for review);
/// - each existing table's stored SQL equal to the old one plus one insertion of column
///   definitions, at the same root page (so any rebuild, even an identical one, fails);
/// - new columns not generated, not in the key, nullable or with a literal default, without
///   CHECK, UNIQUE or REFERENCES;
/// - existing indexes, triggers and views unchanged; new indexes on existing tables
///   non-unique, non-partial and on plain columns; no new trigger on an existing table;
/// - the seeded rows unchanged, value for value, and a DELETE, INSERT and UPDATE naming only
///   the old columns succeeding on one row of every seeded table (with no foreign key left
///   broken);
/// - every statement succeeding inside the transaction (`VACUUM` cannot).
///
/// Then everything is rolled back.
///
/// It is a **guard, stricter than compatibility needs**: it refuses harmless changes too (an
/// identical rebuild, a replaced index, a `PRAGMA`). What it cannot see: what rows *mean* to
/// older code; side effects outside SQL (files, other connections); triggers created on new
/// tables that did not fire during the migration; constraints a new table places on existing
/// rows once newer code fills it (e.g. a foreign key into `epoch_head` that would stop older
/// code deleting cache rows), since new tables are not seeded; and rows unlike the one
/// synthesized row of a table cairn's write paths do not fill.
#[derive(Clone, Debug, Default)]
pub struct SqliteAdditivity {
    opts: SqliteOptions,
}

impl SqliteAdditivity {
    /// An engine with default store options.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl AdditivityEngine for SqliteAdditivity {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    async fn check(
        &self,
        target: &CheckTarget,
        revision: &Revision,
    ) -> Result<Vec<Violation>, MigrateError> {
        let dir = Scratch::new()?;
        let path = dir.path().join("check.db");
        build(&path, &self.opts, target).await?;
        let (opts, statements) = (self.opts.clone(), revision.up_sqlite.clone());
        let violations = blocking(move || inspect(&path, &opts, &statements)).await?;
        drop(dir);
        Ok(violations)
    }

    /// Up, then down, on the filled throwaway store, in one `BEGIN IMMEDIATE` transaction that
    /// is rolled back: see [`AdditivityEngine::check_down`]. Compared: every object of
    /// `sqlite_schema` (indexes, triggers and views by their SQL), each old table's columns
    /// (name, NOT NULL, default, key, generation) and its rows over its old columns, value for
    /// value (rowids aside).
    async fn check_down(
        &self,
        target: &CheckTarget,
        revision: &Revision,
        down: &[String],
    ) -> Result<Vec<Violation>, MigrateError> {
        let dir = Scratch::new()?;
        let path = dir.path().join("check.db");
        build(&path, &self.opts, target).await?;
        let (opts, up, down) = (self.opts.clone(), revision.up_sqlite.clone(), down.to_vec());
        let violations = blocking(move || down::inspect_down(&path, &opts, &up, &down)).await?;
        drop(dir);
        Ok(violations)
    }
}

/// Builds the throwaway store at `path` from `target` and fills it: every set through the
/// lineage-aware runner (cairn's own through the store's open, so its epoch log is a store to
/// seed), cairn's epoch log through [`seed_epoch_log`], then one synthesized row in every table
/// still empty.
async fn build(
    path: &Path,
    opts: &SqliteOptions,
    target: &CheckTarget,
) -> Result<(), MigrateError> {
    let mut store = None;
    for set in target.sets() {
        let runner = Runner::new(set.clone());
        if set.name() == CAIRN_SET {
            store = Some(SqliteStore::open_with_runner(path, opts.clone(), &runner).await?);
        } else {
            runner
                .open(&SqliteMigrator::new(path, opts.clone()))
                .await?;
        }
    }
    if let Some(store) = store {
        seed_epoch_log(&store).await?;
    }
    let (path, opts) = (path.to_path_buf(), opts.clone());
    blocking(move || fill::fill_empty_tables(&path, &opts)).await?;
    Ok(())
}

fn inspect(path: &Path, opts: &SqliteOptions, statements: &[String]) -> Result<Vec<Violation>> {
    let conn = files::connect(path, opts)?;
    let before = read_schema(&conn).map_err(map)?;
    let mut seeded = BTreeMap::new();
    for (name, _) in of_kind(&before, "table") {
        seeded.insert(name.clone(), read_seeded(&conn, name).map_err(map)?);
    }
    conn.execute_batch(crate::sql::BEGIN_IMMEDIATE)
        .map_err(map)?;
    let mut verdict = Verdict(Vec::new());

    let traced = run_traced(&conn, statements, &mut verdict);

    judge_statements(&traced, &before, &mut verdict);
    match read_schema(&conn) {
        Ok(after) => {
            judge_schema(&conn, &before, &after, &seeded, &mut verdict);
            // A table that is gone is reported once, by its definition.
            seeded.retain(|t, _| after.get(t).is_some_and(|o| o.kind == "table"));
            judge_rows(&conn, &seeded, &mut verdict);
            if !conn.is_autocommit() {
                judge_old_writes(&conn, &seeded, &mut verdict);
            }
        }
        Err(e) => verdict.add(
            Rule::Failed,
            None,
            format!(
                "the schema cannot be read after the revision: {}",
                one_line(e)
            ),
        ),
    }
    if !conn.is_autocommit() {
        conn.execute_batch(crate::sql::ROLLBACK).map_err(map)?;
    }
    Ok(verdict.0)
}

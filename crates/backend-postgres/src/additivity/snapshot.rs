//! The catalog snapshot of the existing tables (columns, constraints, indexes, triggers, table
//! options and file nodes) and the digest of their rows.

use std::collections::BTreeMap;

use cairn_migrate::MigrateError;

use super::checker::{col, to_migrate, Checker};
use super::sql;

#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) struct Column {
    pub(super) name: String,
    pub(super) ty: String,
    pub(super) collation: i64,
    pub(super) not_null: bool,
    pub(super) default: Option<String>,
    pub(super) default_tree: Option<String>,
    pub(super) generated: String,
    pub(super) identity: String,
    pub(super) options: String,
}

impl Column {
    /// The part older code depends on (the default's parse tree is compared through its text).
    pub(super) fn same_as(&self, other: &Column) -> bool {
        Column {
            default_tree: None,
            ..self.clone()
        } == Column {
            default_tree: None,
            ..other.clone()
        }
    }

    pub(super) fn differences(&self, new: &Column) -> String {
        let mut d = Vec::new();
        if self.name != new.name {
            d.push(format!("renamed to {}", new.name));
        }
        if self.ty != new.ty {
            d.push(format!("type {} -> {}", self.ty, new.ty));
        }
        if self.collation != new.collation {
            d.push("collation changed".to_owned());
        }
        if self.not_null != new.not_null {
            d.push(format!("not-null {} -> {}", self.not_null, new.not_null));
        }
        if self.default != new.default {
            d.push(format!("default {:?} -> {:?}", self.default, new.default));
        }
        if self.generated != new.generated || self.identity != new.identity {
            d.push("generation/identity changed".to_owned());
        }
        if self.options != new.options {
            d.push(format!("{} -> {}", self.options, new.options));
        }
        format!("column {}: {}", self.name, d.join(", "))
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) struct Constraint {
    pub(super) name: String,
    pub(super) kind: String,
    pub(super) def: String,
    pub(super) columns: Vec<i32>,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) struct IndexDef {
    pub(super) name: String,
    pub(super) def: String,
    pub(super) filenode: i64,
    pub(super) unique: bool,
    pub(super) partial: bool,
    pub(super) expression: bool,
    pub(super) columns: Vec<i32>,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) struct TriggerDef {
    pub(super) name: String,
    pub(super) def: String,
    pub(super) enabled: String,
    pub(super) internal: bool,
}

#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub(super) struct TableDef {
    pub(super) name: String,
    pub(super) filenode: i64,
    pub(super) props: String,
    /// The storage parameters (`sql::REL_PROPS`): any change of them is tolerated.
    pub(super) storage: String,
    pub(super) columns: BTreeMap<i32, Column>,
    pub(super) constraints: BTreeMap<i64, Constraint>,
    pub(super) indexes: BTreeMap<i64, IndexDef>,
    pub(super) triggers: BTreeMap<i64, TriggerDef>,
}

/// The catalog of the existing tables (by oid) at one moment, plus every table's name.
#[derive(Clone, Debug, Default)]
pub(super) struct Snapshot {
    pub(super) tables: BTreeMap<i64, TableDef>,
    pub(super) names: BTreeMap<String, i64>,
}

impl Checker<'_> {
    pub(super) async fn snapshot(&mut self, oids: &[i64]) -> Result<Snapshot, MigrateError> {
        let mut snap = Snapshot::default();
        let trg = sql::dml_trigger_name(self.schema);
        for row in sqlx::query(sql::REL_PROPS)
            .bind(oids)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
        {
            let oid: i64 = col(&row, 0)?;
            snap.tables.insert(
                oid,
                TableDef {
                    name: col(&row, 1)?,
                    filenode: col(&row, 2)?,
                    props: col(&row, 3)?,
                    storage: col(&row, 4)?,
                    ..TableDef::default()
                },
            );
        }
        for row in sqlx::query(sql::COLUMNS)
            .bind(oids)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
        {
            let Some(t) = snap.tables.get_mut(&col::<i64>(&row, 0)?) else {
                continue;
            };
            t.columns.insert(
                col(&row, 1)?,
                Column {
                    name: col(&row, 2)?,
                    ty: col(&row, 3)?,
                    collation: col(&row, 4)?,
                    not_null: col(&row, 5)?,
                    default: col(&row, 6)?,
                    default_tree: col(&row, 7)?,
                    generated: col(&row, 8)?,
                    identity: col(&row, 9)?,
                    options: col(&row, 10)?,
                },
            );
        }
        for row in sqlx::query(sql::CONSTRAINTS)
            .bind(oids)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
        {
            let Some(t) = snap.tables.get_mut(&col::<i64>(&row, 0)?) else {
                continue;
            };
            t.constraints.insert(
                col(&row, 1)?,
                Constraint {
                    name: col(&row, 2)?,
                    kind: col(&row, 3)?,
                    def: col(&row, 4)?,
                    columns: col(&row, 5)?,
                },
            );
        }
        for row in sqlx::query(sql::INDEXES)
            .bind(oids)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
        {
            let Some(t) = snap.tables.get_mut(&col::<i64>(&row, 0)?) else {
                continue;
            };
            t.indexes.insert(
                col(&row, 1)?,
                IndexDef {
                    name: col(&row, 2)?,
                    def: col(&row, 3)?,
                    filenode: col(&row, 4)?,
                    unique: col(&row, 5)?,
                    partial: col(&row, 6)?,
                    expression: col(&row, 7)?,
                    columns: col(&row, 8)?,
                },
            );
        }
        for row in sqlx::query(sql::TRIGGERS)
            .bind(oids)
            .bind(&trg)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
        {
            let Some(t) = snap.tables.get_mut(&col::<i64>(&row, 0)?) else {
                continue;
            };
            t.triggers.insert(
                col(&row, 1)?,
                TriggerDef {
                    name: col(&row, 2)?,
                    def: col(&row, 3)?,
                    enabled: col(&row, 4)?,
                    internal: col(&row, 5)?,
                },
            );
        }
        for row in sqlx::query(sql::TABLE_NAMES)
            .bind(self.schema.as_str())
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
        {
            snap.names.insert(col(&row, 0)?, col(&row, 1)?);
        }
        Ok(snap)
    }

    pub(super) async fn digests(
        &mut self,
        before: &Snapshot,
    ) -> Result<BTreeMap<i64, String>, MigrateError> {
        let q = sql::digest(self.schema);
        let mut out = BTreeMap::new();
        for (oid, t) in &before.tables {
            let cols: Vec<i32> = t.columns.keys().copied().collect();
            let d: Option<String> = sqlx::query_scalar(&q)
                .bind(oid)
                .bind(&cols)
                .fetch_one(&mut *self.conn)
                .await
                .map_err(to_migrate)?;
            out.insert(*oid, d.unwrap_or_default());
        }
        Ok(out)
    }
}

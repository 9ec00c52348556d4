//! The epoch log's schema, written once and rendered for each SQL backend.
//!
//! [`epoch_log_ddl`] is the generator of revision `0001_epoch_log` of cairn's own migration set
//! (`cairn-migrate`). The revision ships the text this rendered when it was released, as fixed
//! files (`crates/migrate/sql/0001_epoch_log.{sqlite,postgres}.sql`) whose checksum every
//! store's lineage holds; a test in `cairn-migrate` checks that the generator still renders
//! exactly that text. Backends do not run this DDL themselves: they create and upgrade their
//! tables through the migration runner on open, so both engines hold the same objects. The DDL
//! is built with `sea-query` (a query builder, not a driver); every statement is
//! `IF NOT EXISTS`.
//!
//! Tables:
//! - `epoch(space, id, seq)` — PK `(space, id)`; unique index `epoch_space_seq` on
//!   `(space, seq)`, the index the `MAX(seq)` probe walks backwards (without it the probe scans
//!   the space).
//! - `epoch_parent(space, parent, child)` — PK `(space, child, parent)`; index
//!   [`PARENT_INDEX`] on `(space, parent, child)` for the anti-join; both ends reference `epoch`.
//! - `epoch_event(space, seq, epoch_seq, epoch, event_id, kind, key, payload)` — PK
//!   `(space, seq, epoch_seq)`, the feed's order; `(space, epoch)` references `epoch`, with
//!   index `epoch_event_space_epoch` on that side of the key.
//! - `epoch_head(space, id, seq)` — the head cache; PK `(space, id)`, deliberately without
//!   foreign keys so creating or writing it takes no lock on the log's tables.

use sea_query::{
    ColumnDef, ForeignKey, Index, IndexCreateStatement, PostgresQueryBuilder, SqliteQueryBuilder,
    Table, TableCreateStatement,
};

/// The SQL dialects cairn renders its schema for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dialect {
    /// SQLite 3.
    Sqlite,
    /// PostgreSQL 13 or newer.
    Postgres,
}

/// Name of the index on `epoch_parent(space, parent, child)` the anti-join uses.
pub const PARENT_INDEX: &str = "epoch_parent_space_parent_child";

fn tables() -> Vec<TableCreateStatement> {
    let epoch = Table::create()
        .table("epoch")
        .if_not_exists()
        .col(ColumnDef::new("space").blob().not_null())
        .col(ColumnDef::new("id").blob().not_null())
        .col(ColumnDef::new("seq").big_integer().not_null())
        .primary_key(Index::create().col("space").col("id"))
        .to_owned();
    let parent = Table::create()
        .table("epoch_parent")
        .if_not_exists()
        .col(ColumnDef::new("space").blob().not_null())
        .col(ColumnDef::new("parent").blob().not_null())
        .col(ColumnDef::new("child").blob().not_null())
        .primary_key(Index::create().col("space").col("child").col("parent"))
        .foreign_key(
            ForeignKey::create()
                .name("epoch_parent_child_fk")
                .from("epoch_parent", ("space", "child"))
                .to("epoch", ("space", "id")),
        )
        .foreign_key(
            ForeignKey::create()
                .name("epoch_parent_parent_fk")
                .from("epoch_parent", ("space", "parent"))
                .to("epoch", ("space", "id")),
        )
        .to_owned();
    let event = Table::create()
        .table("epoch_event")
        .if_not_exists()
        .col(ColumnDef::new("space").blob().not_null())
        .col(ColumnDef::new("seq").big_integer().not_null())
        .col(ColumnDef::new("epoch_seq").integer().not_null())
        .col(ColumnDef::new("epoch").blob().not_null())
        .col(ColumnDef::new("event_id").blob().not_null())
        .col(ColumnDef::new("kind").text().not_null())
        .col(ColumnDef::new("key").blob().null())
        .col(ColumnDef::new("payload").blob().not_null())
        .primary_key(Index::create().col("space").col("seq").col("epoch_seq"))
        .foreign_key(
            ForeignKey::create()
                .name("epoch_event_epoch_fk")
                .from("epoch_event", ("space", "epoch"))
                .to("epoch", ("space", "id")),
        )
        .to_owned();
    let head = Table::create()
        .table("epoch_head")
        .if_not_exists()
        .col(ColumnDef::new("space").blob().not_null())
        .col(ColumnDef::new("id").blob().not_null())
        .col(ColumnDef::new("seq").big_integer().not_null())
        .primary_key(Index::create().col("space").col("id"))
        .to_owned();
    vec![epoch, parent, event, head]
}

fn indexes() -> Vec<IndexCreateStatement> {
    vec![
        Index::create()
            .if_not_exists()
            .name("epoch_space_seq")
            .table("epoch")
            .col("space")
            .col("seq")
            .unique()
            .to_owned(),
        Index::create()
            .if_not_exists()
            .name(PARENT_INDEX)
            .table("epoch_parent")
            .col("space")
            .col("parent")
            .col("child")
            .to_owned(),
        Index::create()
            .if_not_exists()
            .name("epoch_event_space_epoch")
            .table("epoch_event")
            .col("space")
            .col("epoch")
            .to_owned(),
    ]
}

/// The epoch log's DDL for `dialect`, in the order it must run. Every statement is idempotent
/// (`IF NOT EXISTS`).
pub fn epoch_log_ddl(dialect: Dialect) -> Vec<String> {
    let mut out = Vec::new();
    for t in tables() {
        out.push(match dialect {
            Dialect::Sqlite => t.to_string(SqliteQueryBuilder),
            Dialect::Postgres => t.to_string(PostgresQueryBuilder),
        });
    }
    for i in indexes() {
        out.push(match dialect {
            Dialect::Sqlite => i.to_string(SqliteQueryBuilder),
            Dialect::Postgres => i.to_string(PostgresQueryBuilder),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_dialects_define_the_same_objects() {
        let s = epoch_log_ddl(Dialect::Sqlite);
        let p = epoch_log_ddl(Dialect::Postgres);
        assert_eq!(s.len(), p.len());
        for name in [
            "epoch",
            "epoch_parent",
            "epoch_event",
            "epoch_head",
            "epoch_space_seq",
            PARENT_INDEX,
        ] {
            assert!(
                s.iter().any(|d| d.contains(&format!("\"{name}\""))),
                "sqlite lacks {name}"
            );
            assert!(
                p.iter().any(|d| d.contains(&format!("\"{name}\""))),
                "postgres lacks {name}"
            );
        }
        assert!(p.iter().any(|d| d.contains("bytea")), "{p:?}");
    }

    #[test]
    fn head_cache_has_no_foreign_keys() {
        let ddl = epoch_log_ddl(Dialect::Postgres);
        let head = ddl
            .iter()
            .find(|d| d.contains("TABLE IF NOT EXISTS \"epoch_head\""))
            .unwrap();
        assert!(!head.contains("FOREIGN KEY"), "{head}");
    }
}

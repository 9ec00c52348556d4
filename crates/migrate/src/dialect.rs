//! Small facts about the two dialects that sets, files and messages share.

use cairn_core::schema::Dialect;

/// The engine that is not `dialect`.
pub(crate) fn other_dialect(dialect: Dialect) -> Dialect {
    match dialect {
        Dialect::Sqlite => Dialect::Postgres,
        Dialect::Postgres => Dialect::Sqlite,
    }
}

/// The index of `dialect`'s statements in a `[sqlite, postgres]` pair.
pub(crate) fn dialect_index(dialect: Dialect) -> usize {
    match dialect {
        Dialect::Sqlite => 0,
        Dialect::Postgres => 1,
    }
}

/// The name of `dialect` in messages (`SQLite`, `Postgres`).
pub(crate) fn dialect_name(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "SQLite",
        Dialect::Postgres => "Postgres",
    }
}

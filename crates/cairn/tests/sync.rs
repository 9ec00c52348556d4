//! The sync cases (`r1_…`–`r6_…`, the random-DAG property test) on every pair of the model,
//! SQLite and Postgres stores, each side a fresh store (a temporary file, a fresh Postgres
//! schema). The model on both sides runs in the conformance crate's own tests; over HTTP, in
//! `cairn-server`'s `sync_http` tests.

use cairn_conformance::sync::{harness_sides, memory_sides, OpenSide};

fn sqlite() -> OpenSide {
    harness_sides("sqlite", cairn_sqlite::testkit::harness)
}

fn postgres() -> OpenSide {
    harness_sides("postgres", cairn_postgres::testkit::harness)
}

macro_rules! pair {
    ($module:ident, $name:literal, $a:expr, $b:expr) => {
        mod $module {
            cairn_conformance::sync_suite!(cairn_conformance::sync::SyncPair::new($name, $a, $b));
        }
    };
}

pair!(
    sqlite_sqlite,
    "sqlite→sqlite",
    super::sqlite(),
    super::sqlite()
);
pair!(
    sqlite_postgres,
    "sqlite→postgres",
    super::sqlite(),
    super::postgres()
);
pair!(
    postgres_sqlite,
    "postgres→sqlite",
    super::postgres(),
    super::sqlite()
);
pair!(
    postgres_postgres,
    "postgres→postgres",
    super::postgres(),
    super::postgres()
);
pair!(
    memory_sqlite,
    "memory→sqlite",
    super::memory_sides(),
    super::sqlite()
);
pair!(
    sqlite_memory,
    "sqlite→memory",
    super::sqlite(),
    super::memory_sides()
);
pair!(
    memory_postgres,
    "memory→postgres",
    super::memory_sides(),
    super::postgres()
);
pair!(
    postgres_memory,
    "postgres→memory",
    super::postgres(),
    super::memory_sides()
);

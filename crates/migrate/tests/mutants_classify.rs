//! Tests written to kill mutants cargo-mutants found alive in `classify.rs` (see
//! docs/RELIABILITY.md): a store ahead of this build is trusted only when the
//! recorded lineage starts with exactly this build's history.

use cairn_core::schema::Dialect;
use cairn_migrate::{
    classify, Checksum, Classification, LineageEntry, LineageVerdict, MigrationSet, Refusal,
    StoredState,
};

const D: Dialect = Dialect::Sqlite;

fn set() -> MigrationSet {
    MigrationSet::from_files(
        "app",
        [
            ("0001_a.sql", "CREATE TABLE a (id BIGINT PRIMARY KEY);"),
            ("0002_b.sql", "ALTER TABLE a ADD COLUMN b TEXT;"),
        ],
    )
    .unwrap()
}

fn entry(revision: &str, byte: u8) -> LineageEntry {
    LineageEntry {
        revision: revision.into(),
        checksum: Checksum([byte; 32]),
    }
}

fn ahead_of(lineage: Vec<LineageEntry>) -> StoredState {
    StoredState {
        stamp: Some("0003_c".into()),
        lineage: Some(lineage),
        lineage_table_missing: false,
    }
}

#[test]
fn a_newer_build_of_this_history_is_ahead() {
    let set = set();
    let mut lineage = set.lineage(D);
    lineage.push(entry("0003_c", 3));
    assert_eq!(
        classify(&set, D, &ahead_of(lineage)),
        Classification::Ahead {
            stamp: "0003_c".into()
        }
    );
}

/// The lineage holds this build's head *and*, after it, the stamp — but its base is another
/// history's revision: not a newer build of this one.
#[test]
fn a_lineage_that_reaches_our_head_from_another_base_is_refused() {
    let set = set();
    let ours = set.lineage(D);
    let lineage = vec![entry("0001_other", 9), ours[1].clone(), entry("0003_c", 3)];
    assert_eq!(
        classify(&set, D, &ahead_of(lineage)),
        Classification::Refused(Refusal::UnknownStamp {
            stamp: "0003_c".into(),
            head: "0002_b".into(),
            lineage: LineageVerdict::Inconsistent,
        })
    );
}

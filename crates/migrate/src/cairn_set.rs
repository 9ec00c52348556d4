//! cairn's own migration set: the schema of the epoch log and of the spool.

use cairn_core::schema::{epoch_log_ddl, Dialect};

use crate::revision::{MigrationSet, Revision};
use crate::split::split_statements;

/// Revision 0002's fixed text per dialect, shipped with the build (its checksum is over these
/// bytes as split into statements, never over text rendered at run time).
const SPOOL_SQLITE: &str = include_str!("../sql/0002_spool.sqlite.sql");
const SPOOL_POSTGRES: &str = include_str!("../sql/0002_spool.postgres.sql");

fn fixed_statements(text: &str, dialect: Dialect) -> Vec<String> {
    split_statements(text, dialect).expect("cairn's own revision files split into statements")
}

/// Name under which cairn's own schema is stamped.
pub const CAIRN_SET: &str = "cairn";

/// The revisions of cairn's own schema, base first. Every revision after the first must pass
/// the additivity rule (older builds keep using the store).
pub fn cairn_revisions() -> Vec<Revision> {
    vec![
        Revision {
            id: "0001_epoch_log".into(),
            parent: None,
            up_sqlite: epoch_log_ddl(Dialect::Sqlite),
            up_postgres: epoch_log_ddl(Dialect::Postgres),
            description: "epoch log: epoch, epoch_parent, epoch_event, epoch_head (head cache)"
                .into(),
        },
        Revision {
            id: "0002_spool".into(),
            parent: Some("0001_epoch_log".into()),
            up_sqlite: fixed_statements(SPOOL_SQLITE, Dialect::Sqlite),
            up_postgres: fixed_statements(SPOOL_POSTGRES, Dialect::Postgres),
            description: "spool: spool_run, spool_event, spool_fact".into(),
        },
    ]
}

/// cairn's own migration set, as this build knows it.
pub fn cairn_set() -> MigrationSet {
    MigrationSet::new(CAIRN_SET, cairn_revisions())
        .expect("cairn's own revisions form a valid chain")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cairn_set_is_valid_and_starts_with_the_epoch_log() {
        let set = cairn_set();
        assert_eq!(set.base().id, "0001_epoch_log");
        assert!(set
            .base()
            .up_sqlite
            .iter()
            .any(|s| s.contains("epoch_head")));
    }

    /// The checksums older builds compare in their lineage check: 0001's must never change
    /// (a store created by the previous build must still open, and the previous build must
    /// see a store at 0002 as *ahead*), and 0002's is pinned from its first release on.
    #[test]
    fn revision_checksums_are_pinned() {
        let sums: Vec<(String, String)> = cairn_revisions()
            .iter()
            .map(|r| (r.id.clone(), r.checksum().to_hex()))
            .collect();
        let want = [
            (
                "0001_epoch_log",
                "41b46ffe809982d11b224f7ff3b023a207d5ab585258e87ce69f7a9b4d1a94e9",
            ),
            (
                "0002_spool",
                "e3584e7f472252bf592d8c3fa6964b304a680ae47a32d0457af70a43d7709437",
            ),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(id, sum)| ((*id).to_owned(), (*sum).to_owned()))
            .collect();
        assert_eq!(sums, want);
    }

    /// Both dialects of 0002 create the same objects in the same order.
    #[test]
    fn spool_revision_defines_the_same_objects_on_both_engines() {
        let set = cairn_set();
        let rev = &set.revisions()[1];
        assert_eq!(rev.parent.as_deref(), Some("0001_epoch_log"));
        let objects = |stmts: &[String]| -> Vec<String> {
            stmts
                .iter()
                .map(|s| {
                    let words: Vec<&str> = s.split_whitespace().collect();
                    assert!(
                        words.len() > 3 && words[0] == "CREATE",
                        "0002 only creates: {s}"
                    );
                    let at = words.iter().position(|w| *w == "TABLE" || *w == "INDEX");
                    let at = at.unwrap_or_else(|| panic!("0002 creates tables and indexes: {s}"));
                    format!("{} {}", words[at], words[at + 1])
                })
                .collect()
        };
        let sqlite = objects(&rev.up_sqlite);
        assert_eq!(sqlite, objects(&rev.up_postgres));
        for table in ["spool_run", "spool_event", "spool_fact"] {
            assert!(sqlite.contains(&format!("TABLE {table}")), "{sqlite:?}");
        }
    }
}

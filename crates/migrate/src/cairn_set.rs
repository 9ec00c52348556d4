//! cairn's own migration set: the schema of the epoch log (and, later, the spool).

use cairn_core::schema::{epoch_log_ddl, Dialect};

use crate::revision::{MigrationSet, Revision};

/// Name under which cairn's own schema is stamped.
pub const CAIRN_SET: &str = "cairn";

/// The revisions of cairn's own schema, base first. Every revision after the first must pass
/// the additivity rule (older builds keep using the store).
pub fn cairn_revisions() -> Vec<Revision> {
    vec![Revision {
        id: "0001_epoch_log".into(),
        parent: None,
        up_sqlite: epoch_log_ddl(Dialect::Sqlite),
        up_postgres: epoch_log_ddl(Dialect::Postgres),
        description: "epoch log: epoch, epoch_parent, epoch_event, epoch_head (head cache)".into(),
    }]
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
}

//! cairn's own migration set: the schema of the epoch log and of the spool.
//!
//! Every revision's text is a file under `crates/migrate/sql/` shipped with the build: its
//! checksum is over those bytes (as split into statements), never over text a dependency
//! renders at run time. `0001_epoch_log` is what sea-query rendered for
//! [`cairn_core::schema::epoch_log_ddl`] when it was released; a test checks the generator still
//! renders exactly that text.

use cairn_core::schema::Dialect;

pub use crate::identity::CAIRN_SET;
use crate::revision::{MigrationSet, Revision};
use crate::split::split_statements;

/// Revision 0001's fixed text per dialect, shipped with the build.
const EPOCH_LOG_SQLITE: &str = include_str!("../sql/0001_epoch_log.sqlite.sql");
const EPOCH_LOG_POSTGRES: &str = include_str!("../sql/0001_epoch_log.postgres.sql");

/// Revision 0002's fixed text per dialect, shipped with the build (its checksum is over these
/// bytes as split into statements, never over text rendered at run time).
const SPOOL_SQLITE: &str = include_str!("../sql/0002_spool.sqlite.sql");
const SPOOL_POSTGRES: &str = include_str!("../sql/0002_spool.postgres.sql");
/// Revision 0003's fixed text per dialect, shipped with the build.
const SPOOL_IMPORT_SQLITE: &str = include_str!("../sql/0003_spool_import.sqlite.sql");
const SPOOL_IMPORT_POSTGRES: &str = include_str!("../sql/0003_spool_import.postgres.sql");
/// Revision 0004's fixed text per dialect, shipped with the build.
const FLEET_SQLITE: &str = include_str!("../sql/0004_fleet.sqlite.sql");
const FLEET_POSTGRES: &str = include_str!("../sql/0004_fleet.postgres.sql");
/// Revision 0005's fixed text per dialect, shipped with the build.
const CLAIM_JITTER_SQLITE: &str = include_str!("../sql/0005_spool_claim_jitter.sqlite.sql");
const CLAIM_JITTER_POSTGRES: &str = include_str!("../sql/0005_spool_claim_jitter.postgres.sql");
/// Revision 0006's fixed text per dialect, shipped with the build.
const RUN_CLOSE_SQLITE: &str = include_str!("../sql/0006_spool_run_close.sqlite.sql");
const RUN_CLOSE_POSTGRES: &str = include_str!("../sql/0006_spool_run_close.postgres.sql");
/// Revision 0007's fixed text per dialect, shipped with the build.
const SPOOL_READY_SQLITE: &str = include_str!("../sql/0007_spool_ready.sqlite.sql");
const SPOOL_READY_POSTGRES: &str = include_str!("../sql/0007_spool_ready.postgres.sql");
/// Revision 0008's fixed text per dialect, shipped with the build (a contract revision).
const SPOOL_READY_CONTRACT_SQLITE: &str =
    include_str!("../sql/0008_spool_ready_contract.sqlite.sql");
const SPOOL_READY_CONTRACT_POSTGRES: &str =
    include_str!("../sql/0008_spool_ready_contract.postgres.sql");
/// cairn's own contract revision: builds older than `0007_spool_ready` claim through what it
/// drops.
pub(crate) const SPOOL_READY_CONTRACT: &str = "0008_spool_ready_contract";
/// Revision 0009's fixed text per dialect, shipped with the build.
const SPOOL_FLOW_SQLITE: &str = include_str!("../sql/0009_spool_flow.sqlite.sql");
const SPOOL_FLOW_POSTGRES: &str = include_str!("../sql/0009_spool_flow.postgres.sql");
/// Revision 0010's fixed text per dialect, shipped with the build.
const EPOCH_SYNC_SQLITE: &str = include_str!("../sql/0010_epoch_sync.sqlite.sql");
const EPOCH_SYNC_POSTGRES: &str = include_str!("../sql/0010_epoch_sync.postgres.sql");
/// Revision 0011's fixed text per dialect, shipped with the build.
const SPOOL_ROOM_SQLITE: &str = include_str!("../sql/0011_spool_room.sqlite.sql");
const SPOOL_ROOM_POSTGRES: &str = include_str!("../sql/0011_spool_room.postgres.sql");

/// The revision of cairn's set that stores sync state (`epoch_sync_self`, `epoch_sync_peer`).
/// A build at or past it may run on a store whose upgrade stopped before it (a contract
/// revision before it deferred while older builds are live): what needs its tables
/// ([`cairn_core::EpochStore::store_id`], `import_batch`, `sync_peers`) then refuses with
/// [`sync_revision_missing`].
pub const SYNC_REVISION: &str = "0010_epoch_sync";

/// The refusal of an operation that needs [`SYNC_REVISION`] on a store that has not applied
/// it: [`cairn_core::Error::Incompatible`], naming the revision; nothing was written.
pub fn sync_revision_missing(what: &str) -> cairn_core::Error {
    cairn_core::Error::Incompatible {
        detail: format!(
            "{what} needs cairn's revision {SYNC_REVISION}, which this store has not applied \
             yet (an upgrade stopped before it, e.g. a contract revision deferred while older \
             builds are live); nothing was written. Open the store again once those builds \
             are gone, or run `cairn migrate up`"
        ),
        blockers: Vec::new(),
    }
}

fn fixed_statements(text: &str, dialect: Dialect) -> Vec<String> {
    split_statements(text, dialect).expect("cairn's own revision files split into statements")
}

/// The revisions of cairn's own schema, base first. Every revision after the first must pass
/// the additivity rule (older builds keep using the store).
pub fn cairn_revisions() -> Vec<Revision> {
    vec![
        Revision {
            id: "0001_epoch_log".into(),
            parent: None,
            up_sqlite: fixed_statements(EPOCH_LOG_SQLITE, Dialect::Sqlite),
            up_postgres: fixed_statements(EPOCH_LOG_POSTGRES, Dialect::Postgres),
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
        Revision {
            id: "0003_spool_import".into(),
            parent: Some("0002_spool".into()),
            up_sqlite: fixed_statements(SPOOL_IMPORT_SQLITE, Dialect::Sqlite),
            up_postgres: fixed_statements(SPOOL_IMPORT_POSTGRES, Dialect::Postgres),
            description: "spool import: spool_import (a completion marker per imported source)"
                .into(),
        },
        Revision {
            id: "0004_fleet".into(),
            parent: Some("0003_spool_import".into()),
            up_sqlite: fixed_statements(FLEET_SQLITE, Dialect::Sqlite),
            up_postgres: fixed_statements(FLEET_POSTGRES, Dialect::Postgres),
            description: "fleet: cairn_fleet (the builds that have the store open), cairn_contract (contract revisions applied)"
                .into(),
        },
        Revision {
            id: "0005_spool_claim_jitter".into(),
            parent: Some("0004_fleet".into()),
            up_sqlite: fixed_statements(CLAIM_JITTER_SQLITE, Dialect::Sqlite),
            up_postgres: fixed_statements(CLAIM_JITTER_POSTGRES, Dialect::Postgres),
            description: "spool claim jitter: spool_run.claim_attempt, claim_jitter (the backoff jitter of a run's next attempt, so a Postgres claim is one statement)"
                .into(),
        },
        Revision {
            id: "0006_spool_run_close".into(),
            parent: Some("0005_spool_claim_jitter".into()),
            up_sqlite: fixed_statements(RUN_CLOSE_SQLITE, Dialect::Sqlite),
            up_postgres: fixed_statements(RUN_CLOSE_POSTGRES, Dialect::Postgres),
            description: "spool run close: spool_run.closed (whether a run's producer may still append events)"
                .into(),
        },
        Revision {
            id: "0007_spool_ready".into(),
            parent: Some("0006_spool_run_close".into()),
            up_sqlite: fixed_statements(SPOOL_READY_SQLITE, Dialect::Sqlite),
            up_postgres: fixed_statements(SPOOL_READY_POSTGRES, Dialect::Postgres),
            description: "spool ready: spool_ready (Postgres: the live runs' queue entries apart from the run record; SQLite: unchanged)"
                .into(),
        },
        Revision {
            id: SPOOL_READY_CONTRACT.into(),
            parent: Some("0007_spool_ready".into()),
            up_sqlite: fixed_statements(SPOOL_READY_CONTRACT_SQLITE, Dialect::Sqlite),
            up_postgres: fixed_statements(SPOOL_READY_CONTRACT_POSTGRES, Dialect::Postgres),
            description: "spool ready, contract (Postgres: drops spool_run's claim, expiry and finished indexes and rebuilds spool_ready; SQLite: unchanged); refuses builds older than 0007"
                .into(),
        },
        Revision {
            id: "0009_spool_flow".into(),
            parent: Some(SPOOL_READY_CONTRACT.into()),
            up_sqlite: fixed_statements(SPOOL_FLOW_SQLITE, Dialect::Sqlite),
            up_postgres: fixed_statements(SPOOL_FLOW_POSTGRES, Dialect::Postgres),
            description: "spool flow and schedules: spool_queue (pause, limits), spool_claim_tick (rate windows), spool_run.partition_key, spool_schedule (cron schedules)"
                .into(),
        },
        Revision {
            id: SYNC_REVISION.into(),
            parent: Some("0009_spool_flow".into()),
            up_sqlite: fixed_statements(EPOCH_SYNC_SQLITE, Dialect::Sqlite),
            up_postgres: fixed_statements(EPOCH_SYNC_POSTGRES, Dialect::Postgres),
            description: "epoch sync: epoch_sync_self (the store's sync id), epoch_sync_peer (the cursor kept per sending store and space)"
                .into(),
        },
        Revision {
            id: "0011_spool_room".into(),
            parent: Some(SYNC_REVISION.into()),
            up_sqlite: fixed_statements(SPOOL_ROOM_SQLITE, Dialect::Sqlite),
            up_postgres: fixed_statements(SPOOL_ROOM_POSTGRES, Dialect::Postgres),
            description: "spool room (Postgres: spool_ready's fillfactor 50 and spool_run's 40, so a claim rewrites its runs on their pages; SQLite: unchanged)"
                .into(),
        },
    ]
}

/// cairn's own migration set, as this build knows it.
pub fn cairn_set() -> MigrationSet {
    MigrationSet::new(CAIRN_SET, cairn_revisions())
        .and_then(|set| set.with_contract(SPOOL_READY_CONTRACT))
        // The lock check's finding on 0008, accepted: its rebuild of spool_ready reads
        // spool_run in full while the index drops before it hold ACCESS EXCLUSIVE on it, so
        // spool reads and writes wait for the rebuild. The lock is what makes the rebuild
        // exact (no writer interleaves with it: I-ready holds from its commit on); docs/
        // OPERATIONS.md says when to apply it ("Rolling out the Postgres spool layout").
        .and_then(|set| set.with_accepted_lock(SPOOL_READY_CONTRACT, "scan-under-lock"))
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

    /// The golden test: the checksum every packaged revision's lineage entry holds, per
    /// dialect. 0001's and 0002's are the combined checksums stores already carry and older
    /// builds compare (a store created by the previous build must still open, and the previous
    /// build must see a store at 0002 as *ahead*); they must never change. A revision added
    /// later is pinned here, per dialect, from its first release on.
    #[test]
    fn revision_checksums_are_pinned() {
        let set = cairn_set();
        let mut sums = Vec::new();
        for (i, r) in set.revisions().iter().enumerate() {
            for d in [Dialect::Sqlite, Dialect::Postgres] {
                sums.push((r.id.clone(), d, set.checksum(i, d).to_hex()));
            }
        }
        let combined = |id: &str, sum: &str| {
            [Dialect::Sqlite, Dialect::Postgres].map(|d| (id.to_owned(), d, sum.to_owned()))
        };
        let want: Vec<(String, Dialect, String)> = [
            combined(
                "0001_epoch_log",
                "41b46ffe809982d11b224f7ff3b023a207d5ab585258e87ce69f7a9b4d1a94e9",
            ),
            combined(
                "0002_spool",
                "e3584e7f472252bf592d8c3fa6964b304a680ae47a32d0457af70a43d7709437",
            ),
            [
                (
                    "0003_spool_import".to_owned(),
                    Dialect::Sqlite,
                    "d56d3f819e7611f2f81109ab7836af421bbb071dc6b19163f59c80268bfc8e73".to_owned(),
                ),
                (
                    "0003_spool_import".to_owned(),
                    Dialect::Postgres,
                    "7a3293434cea9bc15d4f4597714d33b5f09faaec3356f3ecd2358f4b4ad21231".to_owned(),
                ),
            ],
            [
                (
                    "0004_fleet".to_owned(),
                    Dialect::Sqlite,
                    "3f6d4e029b81f619bc1e0dd3761f29b032830588dbae0d5c6a0328d8d1be190c".to_owned(),
                ),
                (
                    "0004_fleet".to_owned(),
                    Dialect::Postgres,
                    "3551a9fbffa16180442d0ca0c48acf784ed07214793af8bef1cebf958384d477".to_owned(),
                ),
            ],
            [
                (
                    "0005_spool_claim_jitter".to_owned(),
                    Dialect::Sqlite,
                    "a34a521d3d8b715aaa8a9ccc15c4f14e011120e98be34e26a0c1ef767f8b083e".to_owned(),
                ),
                (
                    "0005_spool_claim_jitter".to_owned(),
                    Dialect::Postgres,
                    "e8aa4353cc655faf708620eb0eae101e59213b345c4d67d93d1ce81bd2240a52".to_owned(),
                ),
            ],
            [
                (
                    "0006_spool_run_close".to_owned(),
                    Dialect::Sqlite,
                    "5c8ff97acf5f11db5a7bee4b95be3dd0238953cc00fc76a983043d56334c077a".to_owned(),
                ),
                (
                    "0006_spool_run_close".to_owned(),
                    Dialect::Postgres,
                    "d52c5c8484acb3482776c430c3c9ff81b600368803d68e8f2c48c1e493bf6525".to_owned(),
                ),
            ],
            [
                (
                    "0007_spool_ready".to_owned(),
                    Dialect::Sqlite,
                    "efeffbc06142f5ba04e7f1e42da536e2869539b7880ed560702b57ff81208c18".to_owned(),
                ),
                (
                    "0007_spool_ready".to_owned(),
                    Dialect::Postgres,
                    "b9dcdf51603803ca6c392770545b16bd3daae9e70fe116beba644d4c1ab7a125".to_owned(),
                ),
            ],
            [
                (
                    "0008_spool_ready_contract".to_owned(),
                    Dialect::Sqlite,
                    "c99054007de9e4bf598ff2e60708f2c4107762da7d8eb5eef8238e3ddbc37bf8".to_owned(),
                ),
                (
                    "0008_spool_ready_contract".to_owned(),
                    Dialect::Postgres,
                    "a5d3357e3b7998b31494c7272f2e88bec0e6257da1dc12c55a999c6391840e57".to_owned(),
                ),
            ],
            [
                (
                    "0009_spool_flow".to_owned(),
                    Dialect::Sqlite,
                    "002ffb0b9e4e92b56c72e56d01a39b4ad5f91ffdfc5c723295acccf1716dec4a".to_owned(),
                ),
                (
                    "0009_spool_flow".to_owned(),
                    Dialect::Postgres,
                    "097db0abc292e8298902f0784aed17eb78566cb46c667508458b02a4711926ac".to_owned(),
                ),
            ],
            [
                (
                    SYNC_REVISION.to_owned(),
                    Dialect::Sqlite,
                    "3d2db2daeac61368310eb6a7ff64a23cf0db36f445774b2fca400f1f834bbbfe".to_owned(),
                ),
                (
                    SYNC_REVISION.to_owned(),
                    Dialect::Postgres,
                    "f916766873b132e1333929aadc3606a913c54636f031b9b3a8301f14e78d0769".to_owned(),
                ),
            ],
            [
                (
                    "0011_spool_room".to_owned(),
                    Dialect::Sqlite,
                    "58e180bb5f25dd4172619e5559340fb9a533d33cd1b678955127ac82e0cc21b5".to_owned(),
                ),
                (
                    "0011_spool_room".to_owned(),
                    Dialect::Postgres,
                    "fe325ec581c18d9e0d0480c730ad3030593acdf7f95ca0e09046dc60ca83e47b".to_owned(),
                ),
            ],
        ]
        .into_iter()
        .flatten()
        .collect();
        assert_eq!(sums, want);
        assert_eq!(set.checksum_form(0), crate::ChecksumForm::Combined);
        assert_eq!(set.checksum_form(1), crate::ChecksumForm::Combined);
        assert_eq!(set.checksum_form(2), crate::ChecksumForm::PerDialect);
        assert_eq!(set.checksum_form(3), crate::ChecksumForm::PerDialect);
        assert_eq!(set.checksum_form(4), crate::ChecksumForm::PerDialect);
        assert_eq!(set.checksum_form(5), crate::ChecksumForm::PerDialect);
        assert_eq!(set.checksum_form(6), crate::ChecksumForm::PerDialect);
        assert_eq!(set.checksum_form(7), crate::ChecksumForm::PerDialect);
        assert_eq!(set.checksum_form(8), crate::ChecksumForm::PerDialect);
        assert_eq!(set.checksum_form(9), crate::ChecksumForm::PerDialect);
        assert_eq!(set.checksum_form(10), crate::ChecksumForm::PerDialect);
        assert!(set.is_contract(SPOOL_READY_CONTRACT));
        assert_eq!(
            set.revisions()
                .iter()
                .filter(|r| set.is_contract(&r.id))
                .count(),
            1
        );
    }

    /// 0001's fixed text is what the generator renders: a sea-query that renders otherwise
    /// fails this test (and changes nothing in any store), instead of silently changing the
    /// revision's checksum.
    #[test]
    fn epoch_log_files_are_what_the_generator_renders() {
        let rev = &cairn_revisions()[0];
        for d in [Dialect::Sqlite, Dialect::Postgres] {
            assert_eq!(
                rev.up(d),
                cairn_core::schema::epoch_log_ddl(d).as_slice(),
                "{d:?}: regenerate nothing; find out why the renderer changed"
            );
        }
    }

    /// The revisions released with the combined checksum are exactly cairn's first two; a new
    /// revision of cairn's set, and every application revision, is per dialect.
    #[test]
    fn only_the_released_revisions_keep_the_combined_form() {
        let mut revs = cairn_revisions();
        let head = revs.last().unwrap().id.clone();
        revs.push(Revision {
            id: "0003_next".into(),
            parent: Some(head),
            up_sqlite: vec!["CREATE TABLE t (id INTEGER)".into()],
            up_postgres: vec!["CREATE TABLE t (id bigint)".into()],
            description: String::new(),
        });
        let set = MigrationSet::new(CAIRN_SET, revs.clone()).unwrap();
        assert_eq!(set.checksum_form(2), crate::ChecksumForm::PerDialect);
        assert_ne!(
            set.checksum(2, Dialect::Sqlite),
            set.checksum(2, Dialect::Postgres)
        );
        let app = MigrationSet::new("app", revs).unwrap();
        assert_eq!(app.checksum_form(0), crate::ChecksumForm::PerDialect);
    }

    /// Both dialects of each revision from 0002 to 0006, 0009 and 0010 create the same objects
    /// (tables, indexes, and columns added to a table) in the same order, and create nothing
    /// else. 0007, 0008 and 0011 change Postgres's spool layout only (see their files), and
    /// SQLite's side of each is one read of `spool_run`.
    #[test]
    fn later_revisions_define_the_same_objects_on_both_engines() {
        let set = cairn_set();
        let objects = |stmts: &[String]| -> Vec<String> {
            stmts
                .iter()
                .map(|s| {
                    let words: Vec<&str> = s.split_whitespace().collect();
                    if words.len() > 5 && words[..2] == ["ALTER", "TABLE"] {
                        assert_eq!(
                            words[3..5],
                            ["ADD", "COLUMN"],
                            "a later revision only adds: {s}"
                        );
                        return format!("COLUMN {}.{}", words[2], words[5]);
                    }
                    assert!(
                        words.len() > 3 && words[0] == "CREATE",
                        "a later revision only creates: {s}"
                    );
                    let at = words.iter().position(|w| *w == "TABLE" || *w == "INDEX");
                    let at = at.unwrap_or_else(|| panic!("only tables and indexes: {s}"));
                    format!("{} {}", words[at], words[at + 1])
                })
                .collect()
        };
        let mut tables = Vec::new();
        let revs = set.revisions();
        for rev in revs[1..6].iter().chain(&revs[8..10]) {
            let sqlite = objects(&rev.up_sqlite);
            assert_eq!(sqlite, objects(&rev.up_postgres), "{}", rev.id);
            tables.extend(sqlite.into_iter().filter(|o| o.starts_with("TABLE ")));
        }
        assert_eq!(
            tables,
            [
                "TABLE spool_run",
                "TABLE spool_event",
                "TABLE spool_fact",
                "TABLE spool_import",
                "TABLE cairn_fleet",
                "TABLE cairn_contract",
                "TABLE spool_queue",
                "TABLE spool_claim_tick",
                "TABLE spool_schedule",
                "TABLE epoch_sync_self",
                "TABLE epoch_sync_peer",
            ]
        );
        for rev in set.revisions()[6..8].iter().chain(&set.revisions()[10..]) {
            assert_eq!(
                rev.up_sqlite,
                ["SELECT count(*) FROM spool_run WHERE 0"],
                "{}",
                rev.id
            );
        }
        assert!(set.revisions()[6].up_postgres[0].starts_with("CREATE TABLE spool_ready"));
        assert_eq!(
            set.revisions()[10].up_postgres,
            [
                "ALTER TABLE spool_ready SET (fillfactor = 50)",
                "ALTER TABLE spool_run SET (fillfactor = 40)"
            ]
        );
        assert_eq!(
            set.revisions().len(),
            11,
            "a new revision is checked here too"
        );
    }
}
